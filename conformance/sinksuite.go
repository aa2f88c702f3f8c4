package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// SinkHarness tells RunSink how to build the sink under test and what it declares about its
// broker. The declarations choose which cases apply; a case that does not apply logs why
// ("not offered") and checks nothing, so go test -v shows what was not proven.
type SinkHarness struct {
	// New returns a fresh sink and destination, isolated from every other subtest (subtests
	// run in parallel). Release resources with t.Cleanup. Required.
	New func(t *testing.T) SinkFixture
	// Ordered declares that the destination keeps the order of each partition key (a FIFO
	// queue, a Kafka topic): Received returns the messages of one key in the order the broker
	// accepted them. The order area, and the order check of the concurrent area, need it.
	// Default false: not offered.
	Ordered bool
	// DedupID declares that the broker has a deduplication id per message (an SQS FIFO
	// MessageDeduplicationId) and that Received reports it (ReceivedMessage.DedupID). The
	// dedup area needs it. Default false: not offered.
	DedupID bool
	// MaxMessageBytes declares the sink's size limit: a message whose payload has more than
	// this many bytes gets a permanent outcome (core.IsPermanent) and is not sent, while a
	// payload of MaxMessageBytes/2 bytes is delivered. The oversize cases need it. Default 0:
	// no limit declared, not offered.
	MaxMessageBytes int
	// ErrTooLarge, when set, is the error an oversize outcome must wrap (errors.Is). Default
	// nil: any permanent error.
	ErrTooLarge error
	// Timeout bounds each subtest (the watchdog). Default 2 minutes.
	Timeout time.Duration
	// ReadTimeout bounds each wait for the acknowledged messages to be read back with
	// SinkFixture.Received. Default 30 seconds.
	ReadTimeout time.Duration
	// CancelTimeout is how soon Send must return once its context is cancelled. Default 10
	// seconds.
	CancelTimeout time.Duration
}

// SinkFixture is one sink under test, its destination and what reads the destination back.
type SinkFixture struct {
	// Sink is the sink under test. Required.
	Sink core.Sink
	// Destination is a destination the sink delivers to (core.Message.Destination: a queue
	// URL, a topic ARN or name), empty and used by this fixture only. Required.
	Destination string
	// Received returns every message Destination has received since New, in the order the
	// broker hands them out (per key, the broker's order), waiting until it holds at least
	// atLeast messages or ctx ends; then it returns what it has. It returns an error only when
	// reading fails. RunSink never calls it from two goroutines at once. Required.
	Received func(ctx context.Context, atLeast int) ([]ReceivedMessage, error)
	// RejectPermanent, when set, changes m (a message the suite built for Destination, before
	// it is sent) so that the broker refuses it permanently: route it to a destination that
	// does not exist, tell an in-memory broker to reject its event ID, ... Default nil: the
	// permanent cases are not offered.
	RejectPermanent func(m *core.Message)
	// RejectRetryable, when set, changes m so that the broker refuses it with an error a
	// retry can fix (a 5xx answer, a broker refusing a batch as too large, ...). The broker
	// may refuse other messages sent in the same request too. Default nil: the retryable
	// cases are not offered.
	RejectRetryable func(m *core.Message)
}

// ReceivedMessage is a message read back from a destination, as a consumer decodes it.
type ReceivedMessage struct {
	// EventID is the event ID the message carries.
	EventID string
	// Payload is the payload as a consumer reads it (nil and empty are equal).
	Payload []byte
	// Headers are the event headers as a consumer reads them (nil and empty are equal).
	Headers map[string]string
	// Key is the partition key the message carries (the Kafka record key, the FIFO message
	// group, the key in the message's metadata): core.Message.GroupID.
	Key string
	// DedupID is the broker's deduplication id of the message; empty when the broker has
	// none (see SinkHarness.DedupID).
	DedupID string
}

// RunSink runs the sink suite against the sink that h builds: the sink contract of core.Sink,
// proven through the destination the sink delivers to. Each area is a subtest and each case in
// it has a stable name, "area/case":
//
//   - outcomes: empty (a call without messages returns no outcome), count (one outcome per
//     message, all acknowledged by a healthy destination, in calls of 1 to 33 messages)
//   - roundtrip: bytes (every acknowledged message is at the destination with its event ID,
//     payload, headers and key byte for byte: text, binary, empty and nil payloads)
//   - prefix: permanent, retryable, oversize (a message of a key fails in the middle of a
//     call holding several keys; the outcomes keep core.CheckOutcomes' per-key rule and what
//     was acknowledged was delivered)
//   - classify: permanent, retryable, oversize (the refused message's outcome is permanent or
//     retryable as its cause is, oversize wraps h.ErrTooLarge; no other message of the call is
//     reported permanent; with oversize, the other keys are delivered)
//   - concurrent: sends (8 goroutines call Send at once, each with keys of its own; every
//     message is acknowledged and delivered, in order per key when h.Ordered; run with -race)
//   - cancel: before (a context cancelled before Send: it returns within h.CancelTimeout, every
//     outcome an error that is not permanent), during (cancelled during a call of 60 messages:
//     it returns within h.CancelTimeout, its outcomes keep the per-key rule, none is
//     permanent, and every acknowledged message was delivered)
//   - order: per-key (with h.Ordered: four calls of interleaved keys read back in send order
//     per key)
//   - dedup: event-id (with h.DedupID: the broker's deduplication id is the event ID)
//
// The permanent cases need SinkFixture.RejectPermanent, the retryable ones
// SinkFixture.RejectRetryable, the oversize ones h.MaxMessageBytes; without them a case logs
// that it is not offered and passes with nothing to check. Areas and cases run in parallel,
// each case on its own fixture from h.New and under a watchdog (h.Timeout) that turns a hang
// into a failure with a dump of every goroutine.
func RunSink(t *testing.T, h SinkHarness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("conformance: SinkHarness.New is required")
	}
	if h.ReadTimeout <= 0 {
		h.ReadTimeout = 30 * time.Second
	}
	if h.CancelTimeout <= 0 {
		h.CancelTimeout = 10 * time.Second
	}
	for _, a := range sinkAreas() {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range a.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					ctx := watchdog(t, h.Timeout, nil)
					c.run(newSinkEnv(t, ctx, h))
				})
			}
		})
	}
}

// sinkArea is one area of the sink suite and its cases.
type sinkArea struct {
	name  string
	cases []sinkCase
}

type sinkCase struct {
	name string
	run  func(e *sinkEnv)
}

func sinkAreas() []sinkArea {
	return []sinkArea{
		{"outcomes", []sinkCase{{"empty", sinkOutcomesEmpty}, {"count", sinkOutcomesCount}}},
		{"roundtrip", []sinkCase{{"bytes", sinkRoundtrip}}},
		{"prefix", []sinkCase{
			{"permanent", func(e *sinkEnv) { sinkPrefix(e, rejectPermanent) }},
			{"retryable", func(e *sinkEnv) { sinkPrefix(e, rejectRetryable) }},
			{"oversize", func(e *sinkEnv) { sinkPrefix(e, rejectOversize) }},
		}},
		{"classify", []sinkCase{
			{"permanent", func(e *sinkEnv) { sinkClassify(e, rejectPermanent) }},
			{"retryable", func(e *sinkEnv) { sinkClassify(e, rejectRetryable) }},
			{"oversize", func(e *sinkEnv) { sinkClassify(e, rejectOversize) }},
		}},
		{"concurrent", []sinkCase{{"sends", sinkConcurrent}}},
		{"cancel", []sinkCase{{"before", sinkCancelBefore}, {"during", sinkCancelDuring}}},
		{"order", []sinkCase{{"per-key", sinkOrder}}},
		{"dedup", []sinkCase{{"event-id", sinkDedup}}},
	}
}

// sinkEnv is the fixture of one subtest and what the suite sent through it.
type sinkEnv struct {
	t   *testing.T
	ctx context.Context
	h   SinkHarness
	f   SinkFixture
	run string // prefix of this subtest's event IDs
	seq atomic.Int64

	mu    sync.Mutex
	sent  map[string]core.Message // by event ID, as given to Send
	acked map[string]bool
}

func newSinkEnv(t *testing.T, ctx context.Context, h SinkHarness) *sinkEnv {
	f := h.New(t)
	if f.Sink == nil || f.Destination == "" || f.Received == nil {
		t.Fatal("conformance: SinkFixture.Sink, Destination and Received are required")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &sinkEnv{t: t, ctx: ctx, h: h, f: f, run: "ev-" + hex.EncodeToString(b),
		sent: map[string]core.Message{}, acked: map[string]bool{}}
}

// msg returns a message of key for the fixture's destination with a fresh event ID; Seq
// grows with every message of the subtest, so it is the send order of each key.
func (e *sinkEnv) msg(key string) core.Message {
	n := e.seq.Add(1)
	id := fmt.Sprintf("%s-%d", e.run, n)
	return core.Message{
		Record: driver.Record{Event: core.Event{
			ID: id, AggregateType: "conformance", AggregateID: key, AggregateVersion: n,
			Type: "conformance.sent", PartitionKey: key,
			Payload: fmt.Appendf(nil, `{"id":%q,"key":%q}`, id, key),
			Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-conformance": id},
		}, Seq: n, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)},
		Destination: e.f.Destination, DedupID: id, GroupID: key,
	}
}

// msgs returns n messages whose keys cycle through keys.
func (e *sinkEnv) msgs(n int, keys ...string) []core.Message {
	out := make([]core.Message, n)
	for i := range out {
		out[i] = e.msg(keys[i%len(keys)])
	}
	return out
}

// send calls Send, records what was sent and acknowledged, and returns the outcomes with the
// first contract violation core.CheckOutcomes finds.
func (e *sinkEnv) send(ctx context.Context, msgs []core.Message) ([]error, error) {
	out := e.f.Sink.Send(ctx, msgs)
	e.record(msgs, out)
	return out, core.CheckOutcomes(msgs, out)
}

func (e *sinkEnv) record(msgs []core.Message, out []error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, m := range msgs {
		e.sent[m.ID] = m
		if len(out) == len(msgs) && out[i] == nil {
			e.acked[m.ID] = true
		}
	}
}

// mustSend is send on the subtest's context; a contract violation ends the subtest.
func (e *sinkEnv) mustSend(msgs []core.Message) []error {
	e.t.Helper()
	out, err := e.send(e.ctx, msgs)
	if err != nil {
		e.t.Fatalf("conformance: Send broke the sink contract: %v", err)
	}
	return out
}

// allAcked fails the subtest for each outcome that is not nil: a healthy destination
// acknowledges every message.
func (e *sinkEnv) allAcked(msgs []core.Message, out []error) {
	e.t.Helper()
	for i, err := range out {
		if err != nil {
			e.t.Errorf("conformance: message %d (event %s, key %s) was refused by a healthy destination: %v", i, msgs[i].ID, msgs[i].GroupID, err)
		}
	}
}

// notOffered logs that a case does not apply to the sink under test.
func (e *sinkEnv) notOffered(what string) {
	e.t.Helper()
	e.t.Logf("conformance: not offered: %s; nothing to check", what)
}

// delivered reads the destination back until every acknowledged message is there (or
// h.ReadTimeout passed) and checks each received message against the message sent: event ID,
// payload and headers byte for byte, key. It returns what it read.
func (e *sinkEnv) delivered() []ReceivedMessage {
	e.t.Helper()
	e.mu.Lock()
	want := make([]string, 0, len(e.acked))
	for id := range e.acked {
		want = append(want, id)
	}
	sent := maps.Clone(e.sent)
	e.mu.Unlock()
	sort.Strings(want)

	ctx, cancel := context.WithTimeout(e.ctx, e.h.ReadTimeout)
	defer cancel()
	atLeast := len(want)
	var got []ReceivedMessage
	for {
		var err error
		got, err = e.f.Received(ctx, atLeast)
		if err != nil && ctx.Err() == nil {
			e.t.Fatalf("conformance: Received: %v", err)
		}
		have := map[string]bool{}
		for _, r := range got {
			have[r.EventID] = true
		}
		var missing []string
		for _, id := range want {
			if !have[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			break
		}
		if ctx.Err() != nil {
			e.t.Errorf("conformance: %d acknowledged messages never reached the destination within %v (read %d messages): %s",
				len(missing), e.h.ReadTimeout, len(got), head(missing))
			break
		}
		atLeast = len(got) + 1
	}
	bad := 0
	for _, r := range got {
		if bad >= 20 {
			e.t.Errorf("conformance: (more differences not shown)")
			break
		}
		m, ok := sent[r.EventID]
		if !ok {
			bad++
			e.t.Errorf("conformance: the destination holds event %q, which the suite never sent", r.EventID)
			continue
		}
		if !bytes.Equal(r.Payload, m.Payload) {
			bad++
			e.t.Errorf("conformance: event %s: payload read back differs from the payload sent:\n got  %d bytes %q\n want %d bytes %q",
				m.ID, len(r.Payload), clip(r.Payload), len(m.Payload), clip(m.Payload))
		}
		if !maps.Equal(r.Headers, m.Headers) {
			bad++
			e.t.Errorf("conformance: event %s: headers read back differ from the headers sent:\n got  %v\n want %v", m.ID, r.Headers, m.Headers)
		}
		if r.Key != m.GroupID {
			bad++
			e.t.Errorf("conformance: event %s: read back with key %q, sent with key %q", m.ID, r.Key, m.GroupID)
		}
	}
	return got
}

// inOrder checks that per key, the first delivery of each event follows send order.
func (e *sinkEnv) inOrder(got []ReceivedMessage) {
	e.t.Helper()
	e.mu.Lock()
	sent := maps.Clone(e.sent)
	e.mu.Unlock()
	seen := map[string]bool{}
	last := map[string]core.Message{}
	bad := 0
	for _, r := range got {
		m, ok := sent[r.EventID]
		if !ok || seen[r.EventID] {
			continue
		}
		seen[r.EventID] = true
		if l, ok := last[m.GroupID]; ok && m.Seq < l.Seq {
			bad++
			e.t.Errorf("conformance: key %s: event %s (sent #%d) was delivered after event %s (sent #%d)", m.GroupID, m.ID, m.Seq, l.ID, l.Seq)
			if bad >= 20 {
				return
			}
			continue
		}
		last[m.GroupID] = m
	}
}

func head(ids []string) string {
	if len(ids) > 10 {
		return strings.Join(ids[:10], ", ") + fmt.Sprintf(", ... (%d more)", len(ids)-10)
	}
	return strings.Join(ids, ", ")
}

func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

func sinkOutcomesEmpty(e *sinkEnv) {
	for _, msgs := range [][]core.Message{nil, {}} {
		if out := e.f.Sink.Send(e.ctx, msgs); len(out) != 0 {
			e.t.Errorf("conformance: Send of %d messages (%#v) returned %d outcomes", len(msgs), msgs, len(out))
		}
	}
}

func sinkOutcomesCount(e *sinkEnv) {
	for _, n := range []int{1, 2, 7, 33} {
		msgs := e.msgs(n, "a", "b", "c")
		e.allAcked(msgs, e.mustSend(msgs))
	}
	e.delivered()
}

func sinkRoundtrip(e *sinkEnv) {
	random := make([]byte, 4096)
	if max := e.h.MaxMessageBytes; max > 0 && max/2 < len(random) {
		random = random[:max/2]
	}
	_, _ = rand.Read(random)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	many := map[string]string{}
	for i := range 8 {
		many[fmt.Sprintf("h%d", i)] = strings.Repeat(fmt.Sprint(i), i+1)
	}
	cases := []struct {
		payload []byte
		headers map[string]string
	}{
		// Characters beyond U+FFFD travel in a header, not in this text payload: fauxqs, the
		// AWS emulator the SQS and SNS sinks are tested on, refuses them in a message body,
		// which SQS accepts.
		{[]byte(`{"n":1,"s":"é€ ✓ \"quoted\""}`), map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-region": "eu-west-1"}},
		{all, nil},
		{[]byte{}, map[string]string{"content-type": "application/octet-stream", "tracestate": "congo=t61rcWkgMzE"}},
		{nil, map[string]string{"x.unicode": "é€𝄞 ✓", "x-empty": ""}},
		{[]byte("line 1\nline 2\r\n\ttab \x00 nul"), many},
		{random, map[string]string{"content-type": "application/json"}},
		{[]byte("plain text"), map[string]string{}},
	}
	msgs := make([]core.Message, len(cases))
	for i, c := range cases {
		msgs[i] = e.msg([]string{"a", "b"}[i%2])
		msgs[i].Payload, msgs[i].Headers = c.payload, c.headers
	}
	e.allAcked(msgs, e.mustSend(msgs))
	e.delivered()
}

// rejection is how a case makes one message fail.
type rejection int

const (
	rejectPermanent rejection = iota
	rejectRetryable
	rejectOversize
)

// reject makes m fail as r says. It reports false (and logs that the case is not offered)
// when the sink under test offers no such failure.
func (e *sinkEnv) reject(r rejection, m *core.Message) bool {
	e.t.Helper()
	switch r {
	case rejectPermanent:
		if e.f.RejectPermanent == nil {
			e.notOffered("SinkFixture.RejectPermanent is nil")
			return false
		}
		e.f.RejectPermanent(m)
	case rejectRetryable:
		if e.f.RejectRetryable == nil {
			e.notOffered("SinkFixture.RejectRetryable is nil")
			return false
		}
		e.f.RejectRetryable(m)
	case rejectOversize:
		if e.h.MaxMessageBytes <= 0 {
			e.notOffered("SinkHarness.MaxMessageBytes is 0")
			return false
		}
		m.Payload = bytes.Repeat([]byte("x"), e.h.MaxMessageBytes+1)
	}
	return true
}

// sinkPrefix: in a call of interleaved keys, one message of key a and one of key b fail; the
// outcomes keep the per-key prefix rule and the acknowledged messages were delivered.
func sinkPrefix(e *sinkEnv, r rejection) {
	msgs := []core.Message{e.msg("a"), e.msg("b"), e.msg("a"), e.msg("b"), e.msg("c"), e.msg("a"),
		e.msg("b"), e.msg("c"), e.msg("a"), e.msg("b"), e.msg("c"), e.msg("a")}
	if !e.reject(r, &msgs[2]) || !e.reject(r, &msgs[6]) {
		return
	}
	out := e.mustSend(msgs)
	for _, i := range []int{2, 6} {
		if out[i] == nil {
			e.t.Errorf("conformance: event %s (key %s), which the broker refuses, was acknowledged", msgs[i].ID, msgs[i].GroupID)
		}
	}
	e.delivered()
}

// sinkClassify: the refused message's outcome says whether a retry can help, and no other
// message of the call is reported permanent (the relay would park it for its neighbour).
func sinkClassify(e *sinkEnv, r rejection) {
	msgs := []core.Message{e.msg("x"), e.msg("x"), e.msg("y"), e.msg("x"), e.msg("y")}
	if !e.reject(r, &msgs[1]) {
		return
	}
	if r == rejectOversize {
		msgs[2].Payload = bytes.Repeat([]byte("y"), e.h.MaxMessageBytes/2)
	}
	out := e.mustSend(msgs)
	target := out[1]
	switch {
	case target == nil:
		e.t.Errorf("conformance: event %s, which the broker refuses, was acknowledged", msgs[1].ID)
	case r == rejectRetryable && core.IsPermanent(target):
		e.t.Errorf("conformance: a retryable refusal was reported permanent (the relay would park the event): %v", target)
	case r != rejectRetryable && !core.IsPermanent(target):
		e.t.Errorf("conformance: a permanent refusal was reported retryable (the relay would retry it forever): %v", target)
	case r == rejectOversize && e.h.ErrTooLarge != nil && !errors.Is(target, e.h.ErrTooLarge):
		e.t.Errorf("conformance: the oversize outcome does not wrap SinkHarness.ErrTooLarge (%v): %v", e.h.ErrTooLarge, target)
	}
	for i, err := range out {
		if i != 1 && core.IsPermanent(err) {
			e.t.Errorf("conformance: message %d (event %s, key %s), which the broker does not refuse, was reported permanent: %v", i, msgs[i].ID, msgs[i].GroupID, err)
		}
	}
	if r == rejectOversize {
		// The sink refuses the message itself, before sending: the rest of the call reaches a
		// healthy broker.
		for _, i := range []int{0, 2, 4} {
			if out[i] != nil {
				e.t.Errorf("conformance: message %d (event %s, key %s, %d bytes) was refused beside an oversize message: %v", i, msgs[i].ID, msgs[i].GroupID, len(msgs[i].Payload), out[i])
			}
		}
	}
	e.delivered()
}

func sinkConcurrent(e *sinkEnv) {
	const goroutines, calls, per = 8, 3, 10
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range calls {
				msgs := e.msgs(per, fmt.Sprintf("g%d-a", g), fmt.Sprintf("g%d-b", g))
				out, err := e.send(e.ctx, msgs)
				if err != nil {
					e.t.Errorf("conformance: concurrent Send broke the sink contract: %v", err)
					return
				}
				e.allAcked(msgs, out)
			}
		}()
	}
	close(start)
	wg.Wait()
	got := e.delivered()
	if e.h.Ordered {
		e.inOrder(got)
	}
}

// sendCancel sends msgs on ctx, which is cancelled when cancelled is closed; it returns the
// outcomes, or nil (after failing the subtest) when Send did not return within
// h.CancelTimeout of the cancellation.
func (e *sinkEnv) sendCancel(ctx context.Context, msgs []core.Message, cancelled <-chan struct{}) []error {
	e.t.Helper()
	done := make(chan []error, 1)
	go func() {
		out, _ := e.send(ctx, msgs)
		done <- out
	}()
	select {
	case out := <-done:
		return out
	case <-cancelled:
	}
	select {
	case out := <-done:
		return out
	case <-time.After(e.h.CancelTimeout):
		e.t.Errorf("conformance: Send did not return within %v of its context's cancellation", e.h.CancelTimeout)
		return nil
	}
}

// cancelled checks the outcomes of a call whose context was cancelled: the per-key rule, and
// no outcome permanent (the message is not at fault).
func (e *sinkEnv) cancelled(msgs []core.Message, out []error) {
	e.t.Helper()
	if err := core.CheckOutcomes(msgs, out); err != nil {
		e.t.Fatalf("conformance: Send with a cancelled context broke the sink contract: %v", err)
	}
	for i, err := range out {
		if core.IsPermanent(err) {
			e.t.Errorf("conformance: message %d (event %s) was reported permanent because the context was cancelled (the relay would park it): %v", i, msgs[i].ID, err)
		}
	}
}

func sinkCancelBefore(e *sinkEnv) {
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	msgs := e.msgs(5, "a", "b")
	out := e.sendCancel(ctx, msgs, ctx.Done())
	if out == nil {
		return
	}
	e.cancelled(msgs, out)
	for i, err := range out {
		if err == nil {
			e.t.Errorf("conformance: message %d (event %s) was acknowledged by a Send whose context was cancelled before the call", i, msgs[i].ID)
		}
	}
	e.delivered()
}

func sinkCancelDuring(e *sinkEnv) {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	msgs := e.msgs(60, "a", "b", "c", "d", "e", "f")
	cancelled := make(chan struct{})
	go func() {
		time.Sleep(time.Millisecond)
		cancel()
		close(cancelled)
	}()
	out := e.sendCancel(ctx, msgs, cancelled)
	if out == nil {
		return
	}
	e.cancelled(msgs, out)
	e.delivered()
}

func sinkOrder(e *sinkEnv) {
	if !e.h.Ordered {
		e.notOffered("SinkHarness.Ordered is false")
		return
	}
	for range 4 {
		msgs := e.msgs(12, "a", "b", "c")
		e.allAcked(msgs, e.mustSend(msgs))
	}
	e.inOrder(e.delivered())
}

func sinkDedup(e *sinkEnv) {
	if !e.h.DedupID {
		e.notOffered("SinkHarness.DedupID is false")
		return
	}
	msgs := e.msgs(6, "a", "b")
	e.allAcked(msgs, e.mustSend(msgs))
	for _, r := range e.delivered() {
		if r.DedupID != r.EventID {
			e.t.Errorf("conformance: event %s reached the broker with deduplication id %q, not its event ID", r.EventID, r.DedupID)
		}
	}
}
