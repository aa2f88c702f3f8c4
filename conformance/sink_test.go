package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func msgOf(id, key string, seq int64) core.Message {
	return core.Message{Record: driver.Record{Event: core.Event{ID: id, PartitionKey: key}, Seq: seq}, DedupID: id, GroupID: key}
}

func TestSinkKeepsPrefixRule(t *testing.T) {
	t.Parallel()
	s := NewSink()
	s.FailID("a1", errInjected)
	s.FailOnce("b2")
	msgs := []core.Message{msgOf("a1", "a", 1), msgOf("b1", "b", 2), msgOf("a2", "a", 3), msgOf("b2", "b", 4), msgOf("b3", "b", 5)}
	out := s.Send(context.Background(), msgs)
	if err := core.CheckOutcomes(msgs, out); err != nil {
		t.Fatalf("the sink broke the prefix rule: %v", err)
	}
	if !errors.Is(out[0], errInjected) || out[1] != nil || !errors.Is(out[2], core.ErrNotAcknowledged) ||
		!errors.Is(out[3], errInjected) || !errors.Is(out[4], core.ErrNotAcknowledged) {
		t.Fatalf("outcomes %v", out)
	}
	out = s.Send(context.Background(), msgs[3:])
	if out[0] != nil || out[1] != nil {
		t.Fatalf("FailOnce failed twice: %v", out)
	}
	if s.Acks("b1") != 1 || s.Acks("a1") != 0 || s.Sent("a2") != 1 || s.Sends() != 2 || s.Seen() != 7 {
		t.Fatalf("counters: acks b1 %d a1 %d, sent a2 %d, sends %d, seen %d", s.Acks("b1"), s.Acks("a1"), s.Sent("a2"), s.Sends(), s.Seen())
	}

	s.ViolatePrefix("a", true)
	out = s.Send(context.Background(), msgs[:3])
	if core.CheckOutcomes(msgs[:3], out) == nil {
		t.Fatalf("ViolatePrefix did not acknowledge a2 after a1 failed: %v", out)
	}
}

func TestSinkCrashAndFailAll(t *testing.T) {
	t.Parallel()
	s := NewSink()
	crashed := 0
	s.CrashAfterSend(func() { crashed++ })
	s.FailAll(errInjected)
	s.Send(context.Background(), []core.Message{msgOf("x", "k", 1)})
	if crashed != 0 {
		t.Fatal("crashed on a send that acknowledged nothing")
	}
	s.FailAll(nil)
	s.Send(context.Background(), []core.Message{msgOf("x", "k", 1)})
	s.Send(context.Background(), []core.Message{msgOf("y", "k", 2)})
	if crashed != 1 {
		t.Fatalf("crashed %d times, want once", crashed)
	}
}

func TestCheckOrderFindsViolations(t *testing.T) {
	t.Parallel()
	want := map[string][]string{"a": {"a1", "a2", "a3"}, "b": {"b1"}}
	send := func(ids ...string) *Sink {
		s := NewSink()
		for _, id := range ids {
			s.Send(context.Background(), []core.Message{msgOf(id, id[:1], 0)})
		}
		return s
	}
	if errs := send("a1", "b1", "a2", "a1", "a2", "a3").CheckOrder(want); len(errs) != 0 {
		t.Fatalf("in-order deliveries with duplicates reported: %v", errs)
	}
	for _, c := range []struct {
		ids  []string
		want string
	}{
		{[]string{"a1", "a3", "a2"}, "before event a2"},
		{[]string{"a2", "a1"}, "before event a1"},
		{[]string{"a1", "c1"}, "never committed"},
	} {
		errs := send(c.ids...).CheckOrder(want)
		if len(errs) == 0 || !strings.Contains(errors.Join(errs...).Error(), c.want) {
			t.Errorf("deliveries %v: got %v, want an error with %q", c.ids, errs, c.want)
		}
	}
}
