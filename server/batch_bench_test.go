package server

import (
	"fmt"
	"net/http"
	"testing"
)

// BenchmarkDecodeCreate is the decoding of POST /api/v1/tasks's body and
// the encoding of its answer's envelope, the handler's own JSON work per
// enqueue.
func BenchmarkDecodeCreate(b *testing.B) {
	body := []byte(`{"title":"job 12345","required_capabilities":["nobody"],"priority":3,"metadata":{"tenant":"acme"}}`)
	b.ReportAllocs()
	for b.Loop() {
		var req struct {
			createRequest
			batchKey
		}
		if e := decodeJSON([]byte(`{"input":"job 12345","type":"general","metadata":{"tenant":"acme"}}`), &req); e != nil {
			b.Fatal(e)
		}
		var bodyReq struct {
			Title                string            `json:"title"`
			RequiredCapabilities []string          `json:"required_capabilities"`
			Priority             int               `json:"priority"`
			Metadata             map[string]string `json:"metadata"`
		}
		if e := decodeJSON(body, &bodyReq); e != nil {
			b.Fatal(e)
		}
		writeJSON(discardWriter{}, 201, CreatedJSON{TaskID: "01M8CS0A4XG2C3V5TTPZ6WJ1QD", State: "idle"})
	}
}

type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (discardWriter) WriteHeader(int)             {}

// BenchmarkDecodeBrokerBatch is the decoding of a broker batch of 100
// items as pegasus-bench -enqueue sends them, with encoding/json alone
// and with the hand decoder.
func BenchmarkDecodeBrokerBatch(b *testing.B) {
	var body []byte
	body = append(body, `{"tasks":[`...)
	for i := range 100 {
		if i > 0 {
			body = append(body, ',')
		}
		body = fmt.Appendf(body, `{"title":"job 0.%d.%d","required_capabilities":["nobody"]}`, i, i)
	}
	body = append(body, "]}"...)
	for _, c := range []struct {
		name   string
		decode func([]byte) ([]brokerItem, bool)
	}{{"encoding-json", decodeItemsReflect[brokerItem]}, {"by-hand", decodeItemsAtOnce[brokerItem]}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := c.decode(body); !ok {
					b.Fatal("not decoded")
				}
			}
		})
	}
}
