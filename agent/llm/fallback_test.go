package llm

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// scripted answers each attempt from its list: an error or a reply.
type scripted struct {
	name string
	errs []error // one per attempt; nil answers
}

func (s *scripted) Name() string { return s.name }

func (s *scripted) Complete(ctx context.Context, req Request, report func(Attempt)) (Response, error) {
	for i, err := range s.errs {
		att := Attempt{Number: i + 1, Model: s.name, Err: err}
		if err == nil {
			r := Response{Model: s.name, Content: "from " + s.name}
			att.Response = &r
			report(att)
			return r, nil
		}
		att.WillRetry = i < len(s.errs)-1
		report(att)
		if !att.WillRetry {
			return Response{}, err
		}
	}
	return Response{}, errors.New("no attempt")
}

func TestWithFallback(t *testing.T) {
	e500 := &APIError{Status: 500, Message: "boom"}
	e400 := &APIError{Status: 400, Message: "bad"}
	for _, c := range []struct {
		name    string
		models  []*scripted
		want    []string // model/number/willRetry/ok per reported attempt
		content string
		fails   bool
	}{
		{"primary answers", []*scripted{{name: "a", errs: []error{nil}}, {name: "b", errs: []error{nil}}},
			[]string{"a#1 ok"}, "from a", false},
		{"500 then fallback", []*scripted{{name: "a", errs: []error{e500, e500}}, {name: "b", errs: []error{nil}}},
			[]string{"a#1 retry", "a#2 retry", "b#3 ok"}, "from b", false},
		{"400 is final", []*scripted{{name: "a", errs: []error{e400}}, {name: "b", errs: []error{nil}}},
			[]string{"a#1 final"}, "", true},
		{"all fail", []*scripted{{name: "a", errs: []error{e500}}, {name: "b", errs: []error{e500}}},
			[]string{"a#1 retry", "b#2 final"}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ms := make([]Model, len(c.models))
			for i, m := range c.models {
				ms[i] = m
			}
			var got []string
			resp, err := WithFallback(ms[0], ms[1:]...).Complete(context.Background(), Request{}, func(a Attempt) {
				s := "final"
				switch {
				case a.Err == nil:
					s = "ok"
				case a.WillRetry:
					s = "retry"
				}
				got = append(got, fmt.Sprintf("%s#%d %s", a.Model, a.Number, s))
			})
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("attempts %v, want %v", got, c.want)
			}
			if (err != nil) != c.fails || resp.Content != c.content {
				t.Errorf("got %q, %v", resp.Content, err)
			}
		})
	}
	if m := WithFallback(&scripted{name: "a"}); m.Name() != "a" {
		t.Errorf("no fallback: %s", m.Name())
	}
}
