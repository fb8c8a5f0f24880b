package cluster

import (
	"strings"

	"github.com/pegasus-engine/pegasus/fsm"
)

// dispatchEvents names each dispatch.task event type on the seed's
// swarm.task.<id>.<event> subjects (docs/broker.md). The last three have
// no subject in the seed; they get their own. Persisted (subscribers
// depend on them): do not rename.
var dispatchEvents = map[string]string{
	string(fsm.DispatchCreated):      "created",
	string(fsm.DispatchAssigned):     "assigned",
	string(fsm.DispatchStarted):      "started",
	string(fsm.DispatchProgress):     "progress",
	string(fsm.DispatchCompleted):    "completed",
	string(fsm.DispatchFailed):       "failed",
	string(fsm.DispatchTimedOut):     "timeout",
	string(fsm.DispatchRetried):      "retry",
	string(fsm.DispatchDeadLettered): "dlq",
	string(fsm.DispatchRequeued):     "requeued",
	string(fsm.DispatchUpdated):      "updated",
	string(fsm.DispatchCancelled):    "cancelled",
}

// Subjects are the subjects the outbox publishes on, what the stream it
// creates captures. They leave pegasus.log.> free for the clustered log's
// stream in the same account (JetStream refuses overlapping streams). An
// existing stream is used if its subjects cover these (a stream created
// before, with pegasus.> and swarm.task.>, does).
var Subjects = []string{"pegasus.task.>", "pegasus.system.>", "swarm.task.>"}

// covers reports whether the subject filter f matches every subject the
// filter g matches: token by token, ">" covers the rest, "*" covers one
// token (not a ">"), any other token only itself.
func covers(f, g string) bool {
	ft, gt := strings.Split(f, "."), strings.Split(g, ".")
	for i, t := range ft {
		switch {
		case t == ">":
			return i < len(gt)
		case i >= len(gt):
			return false
		case t == "*":
			if gt[i] == ">" {
				return false
			}
		case t != gt[i]:
			return false
		}
	}
	return len(ft) == len(gt)
}

// Subject returns the subject an event of the given stream and type is
// published on (see the package comment). Stream names and types are
// made into one subject token each by Token.
func Subject(stream, typ string) string {
	if name, ok := dispatchEvents[typ]; ok {
		return "swarm.task." + Token(stream) + "." + name
	}
	if rest, ok := strings.CutPrefix(stream, "$"); ok && rest != "" {
		return "pegasus.system." + Token(rest) + "." + Token(typ)
	}
	return "pegasus.task." + Token(stream) + "." + Token(typ)
}

// Token returns s as one NATS subject token: a byte that a token may not
// hold (., *, >, whitespace, control characters) and % itself are written
// as %XX, so distinct names stay distinct. Task ids (ULIDs) and event
// types are returned unchanged; an empty s is "%00" (never produced by
// the log, which refuses empty stream names).
func Token(s string) string {
	if s == "" {
		return "%00"
	}
	clean := true
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsEscape(c byte) bool {
	return c <= ' ' || c == 0x7f || c == '.' || c == '*' || c == '>' || c == '%'
}
