package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

var errRollback = errors.New("conformance: roll back")

func writeCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "atomicity", run: testWriteAtomicity[TTx]},
		{name: "validation", run: testWriteValidation[TTx]},
		{name: "duplicate", run: testWriteDuplicate[TTx]},
		{name: "defaults", lanes: 7, run: testWriteDefaults[TTx]},
		{name: "roundtrip", run: testWriteRoundtrip[TTx]},
		{name: "lane-count", lanes: 3, run: testWriteLaneCount[TTx]},
		{name: "tx-group", run: testWriteTxGroup[TTx]},
	}
}

// testWriteAtomicity: a domain effect and an outbox write in one transaction commit together
// or not at all.
func testWriteAtomicity[TTx any](e *env[TTx]) {
	var rolled []core.Event
	err := e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		if err := e.h.Effect(ctx, tx, "rolled"); err != nil {
			return err
		}
		var err error
		if rolled, err = e.ob.Write(ctx, tx, event("k", 1), event("k", 2)); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		e.fatalf("InTx returned %v, want fn's error %v", err, errRollback)
	}
	if n := e.effectCount("rolled"); n != 0 {
		e.fatalf("rolled back effect is visible: count %d", n)
	}
	if recs := e.list(driver.StateAll); len(recs) != 0 {
		e.fatalf("rolled back events are visible: %d records, first %s", len(recs), recs[0].ID)
	}

	var committed []core.Event
	err = e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		if err := e.h.Effect(ctx, tx, "committed"); err != nil {
			return err
		}
		var err error
		committed, err = e.ob.Write(ctx, tx, event("k", 3))
		return err
	})
	e.must(err, "commit effect and event")
	if n := e.effectCount("committed"); n != 1 {
		e.fatalf("committed effect count %d, want 1", n)
	}
	recs := e.list(driver.StateAll)
	if len(recs) != 1 || recs[0].ID != committed[0].ID {
		e.fatalf("after commit got %d records, want exactly the committed event %s", len(recs), committed[0].ID)
	}
	for _, ev := range rolled {
		if ev.ID == recs[0].ID {
			e.fatalf("rolled back event id %s is stored", ev.ID)
		}
	}
}

// testWriteValidation: each invalid field is a *ValidationError naming it, and nothing of
// that Write call is written even when the bad event is not the first.
func testWriteValidation[TTx any](e *env[TTx]) {
	ob, err := core.NewOutbox(e.ctx, driver.OutboxStore[TTx](e.a), &core.OutboxOptions{
		Limits: core.Limits{MaxPayloadBytes: 64, MaxHeaders: 2, MaxHeaderBytes: 64},
	})
	e.must(err, "NewOutbox with limits")
	bad := []struct {
		field string
		edit  func(ev *core.Event)
	}{
		{"ID", func(ev *core.Event) { ev.ID = "has space" }},
		{"ID", func(ev *core.Event) { ev.ID = strings.Repeat("x", 129) }},
		{"AggregateType", func(ev *core.Event) { ev.AggregateType = "" }},
		{"AggregateType", func(ev *core.Event) { ev.AggregateType = "or/der" }},
		{"AggregateID", func(ev *core.Event) { ev.AggregateID = "" }},
		{"AggregateID", func(ev *core.Event) { ev.AggregateID = "a\nb" }},
		{"AggregateVersion", func(ev *core.Event) { ev.AggregateVersion = -1 }},
		{"Type", func(ev *core.Event) { ev.Type = "" }},
		{"Type", func(ev *core.Event) { ev.Type = "order created" }},
		{"SchemaID", func(ev *core.Event) { ev.SchemaID = "v1!" }},
		{"PartitionKey", func(ev *core.Event) { ev.PartitionKey = "k\x00" }},
		{"Destination", func(ev *core.Event) { ev.Destination = "q/1" }},
		{"Payload", func(ev *core.Event) { ev.Payload = bytes.Repeat([]byte("p"), 65) }},
		{"Headers", func(ev *core.Event) { ev.Headers = map[string]string{"bad key": "v"} }},
		{"Headers", func(ev *core.Event) { ev.Headers = map[string]string{"a": "1", "b": "2", "c": "3"} }},
		{"Headers", func(ev *core.Event) { ev.Headers = map[string]string{"a": strings.Repeat("v", 70)} }},
		{"Tenant", func(ev *core.Event) { ev.Tenant = "t\x01" }},
		{"CausationID", func(ev *core.Event) { ev.CausationID = string([]byte{0xff, 0xfe}) }},
		{"CorrelationID", func(ev *core.Event) { ev.CorrelationID = strings.Repeat("c", 256) }},
	}
	for i, b := range bad {
		ev := event("v", i)
		b.edit(&ev)
		var werr error
		err := e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
			_, werr = ob.Write(ctx, tx, event("v", 1000+i), ev)
			return nil // commit: the invalid call must have written nothing
		})
		e.must(err, "commit after a rejected Write")
		var ve *core.ValidationError
		switch {
		case !errors.As(werr, &ve):
			e.t.Errorf("case %d (%s): Write returned %v, want a *core.ValidationError", i, b.field, werr)
		case !errors.Is(werr, core.ErrInvalidEvent):
			e.t.Errorf("case %d (%s): errors.Is(err, ErrInvalidEvent) is false for %v", i, b.field, werr)
		case ve.Field != b.field || ve.Index != 1:
			e.t.Errorf("case %d: ValidationError names field %q index %d, want %q index 1 (%v)", i, ve.Field, ve.Index, b.field, werr)
		}
	}
	// Two events of one call with the same ID.
	var werr error
	e.must(e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		a, b := event("v", 1), event("v", 2)
		a.ID, b.ID = "same-id", "same-id"
		_, werr = ob.Write(ctx, tx, a, b)
		return nil
	}), "commit after a rejected Write")
	var ve *core.ValidationError
	if !errors.As(werr, &ve) || ve.Field != "ID" || ve.Index != 1 {
		e.t.Errorf("two events with one ID in one call: got %v, want a ValidationError on ID of event 1", werr)
	}
	if recs := e.list(driver.StateAll); len(recs) != 0 {
		e.fatalf("rejected Write calls stored %d records (first %s)", len(recs), recs[0].ID)
	}
}

// testWriteDuplicate: a duplicate ID is ErrDuplicateEvent and nothing of that call is written.
func testWriteDuplicate[TTx any](e *env[TTx]) {
	first := event("d", 1)
	first.ID = "dup-1"
	e.write(first)

	// Against a committed row, the duplicate not first in the call. fn commits even so: an
	// adapter may refuse to commit a transaction whose statement failed, but it must not store
	// the other event of the call either way.
	var werr error
	_ = e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		fresh := event("d", 2)
		fresh.ID = "fresh-1"
		_, werr = e.ob.Write(ctx, tx, fresh, first)
		return nil
	})
	if !errors.Is(werr, core.ErrDuplicateEvent) {
		e.fatalf("duplicate of a committed id: Write returned %v, want ErrDuplicateEvent", werr)
	}
	// Against a row written earlier in the same transaction.
	werr = nil
	err := e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		a := event("d", 3)
		a.ID = "same-tx"
		if _, err := e.ob.Write(ctx, tx, a); err != nil {
			return err
		}
		if _, werr = e.ob.Write(ctx, tx, a); werr == nil {
			return nil
		}
		return errRollback
	})
	if !errors.Is(werr, core.ErrDuplicateEvent) {
		e.fatalf("duplicate of an id written in the same transaction: Write returned %v, want ErrDuplicateEvent", werr)
	}
	if !errors.Is(err, errRollback) {
		e.fatalf("InTx returned %v, want %v", err, errRollback)
	}
	recs := e.list(driver.StateAll)
	if len(recs) != 1 || recs[0].ID != "dup-1" {
		got := make([]string, len(recs))
		for i, r := range recs {
			got[i] = r.ID
		}
		e.fatalf("records after rejected duplicates: %v, want only dup-1", got)
	}
}

// isUUIDv7 checks the text form of an RFC 9562 version 7 UUID.
func isUUIDv7(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return s[14] == '7' && strings.IndexByte("89ab", s[19]) >= 0
}

// testWriteDefaults: IDs are UUIDv7, PartitionKey defaults, Lane == LaneOf, Seq follows write
// order, CreatedAt is set and bookkeeping fields start empty.
func testWriteDefaults[TTx any](e *env[TTx]) {
	before := time.Now()
	var evs []core.Event
	for i := range 60 {
		evs = append(evs, core.Event{AggregateType: "cart", AggregateID: fmt.Sprintf("c-%d", i), Type: "cart.updated"})
	}
	stored := e.write(evs[:30]...)
	stored = append(stored, e.write(evs[30:]...)...)
	recs := e.byID()
	var lastSeq int64
	for i, ev := range stored {
		if !isUUIDv7(ev.ID) {
			e.t.Errorf("event %d: assigned ID %q is not a UUIDv7", i, ev.ID)
		}
		if want := evs[i].AggregateType + "/" + evs[i].AggregateID; ev.PartitionKey != want {
			e.t.Errorf("event %d: PartitionKey %q, want default %q", i, ev.PartitionKey, want)
		}
		r, ok := recs[ev.ID]
		if !ok {
			e.fatalf("event %d (%s) not stored", i, ev.ID)
		}
		if r.PartitionKey != ev.PartitionKey {
			e.t.Errorf("event %d: stored PartitionKey %q, want %q", i, r.PartitionKey, ev.PartitionKey)
		}
		if want := driver.LaneOf(ev.PartitionKey, e.lanes); r.Lane != want {
			e.t.Errorf("event %d: stored lane %d, want LaneOf = %d", i, r.Lane, want)
		}
		if r.Seq <= lastSeq {
			e.t.Errorf("event %d: seq %d not above the previous event's %d", i, r.Seq, lastSeq)
		}
		lastSeq = r.Seq
		if r.CreatedAt.IsZero() || r.CreatedAt.Sub(before).Abs() > 24*time.Hour {
			e.t.Errorf("event %d: CreatedAt %v not set to the database clock (test started %v)", i, r.CreatedAt, before)
		}
		if !r.PublishedAt.IsZero() || !r.ParkedAt.IsZero() || !r.NextAttemptAt.IsZero() || r.Attempts != 0 || r.LastError != "" {
			e.t.Errorf("event %d: fresh record has bookkeeping set: %+v", i, r)
		}
	}
}

// testWriteRoundtrip: every field, binary payloads and headers come back exactly.
func testWriteRoundtrip[TTx any](e *env[TTx]) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	evs := []core.Event{
		{
			ID: "rt-1", AggregateType: "Order_v2.x-y", AggregateID: "ö 42 ✓", AggregateVersion: 7,
			Type: "order.created", SchemaID: "schema.v3", PartitionKey: "tenant-1/ö",
			Destination: "orders.fifo", Payload: all,
			Headers: map[string]string{"trace-id": "abc", "x.unicode": "ünïcødé ✓", "empty": ""},
			Tenant:  "tenant 1", CausationID: "cause-1", CorrelationID: "corr-1",
		},
		{ID: "rt-2", AggregateType: "a", AggregateID: "b", Type: "t", Payload: []byte(`{"json":true}`)},
		{ID: "rt-3", AggregateType: "a", AggregateID: "c", Type: "t"},
		{ID: "rt-4", AggregateType: "a", AggregateID: "d", Type: "t", Payload: bytes.Repeat([]byte{0, 0xff}, 40000)},
	}
	written := e.write(evs...)
	recs := e.byID()
	for i, want := range evs {
		// Write adds the transaction group headers (tested by tx-group); everything else
		// comes back as given.
		want.Headers = maps.Clone(want.Headers)
		if want.Headers == nil {
			want.Headers = map[string]string{}
		}
		for _, k := range []string{core.HeaderTxID, core.HeaderTxIndex, core.HeaderTxCount} {
			want.Headers[k] = written[i].Headers[k]
		}
		got, ok := recs[want.ID]
		if !ok {
			e.fatalf("event %s not stored", want.ID)
		}
		if want.PartitionKey == "" {
			want.PartitionKey = want.AggregateType + "/" + want.AggregateID
		}
		if !bytes.Equal(got.Payload, want.Payload) {
			e.t.Errorf("event %s: payload of %d bytes came back as %d bytes (or different bytes)", want.ID, len(want.Payload), len(got.Payload))
		}
		if len(got.Headers) != len(want.Headers) || (len(want.Headers) > 0 && !maps.Equal(got.Headers, want.Headers)) {
			e.t.Errorf("event %s: headers %v, want %v", want.ID, got.Headers, want.Headers)
		}
		g, w := got.Event, want
		g.Payload, w.Payload, g.Headers, w.Headers = nil, nil, nil, nil
		if !reflect.DeepEqual(g, w) {
			e.t.Errorf("event %s round trip:\n got %+v\nwant %+v", want.ID, g, w)
		}
	}
}

// testWriteLaneCount: LaneCount returns the count the outbox was migrated with.
func testWriteLaneCount[TTx any](e *env[TTx]) {
	n, err := e.a.LaneCount(e.ctx)
	e.must(err, "LaneCount")
	if n != e.lanes {
		e.fatalf("LaneCount = %d, want %d", n, e.lanes)
	}
	if e.ob.Lanes() != e.lanes {
		e.fatalf("Outbox.Lanes = %d, want %d", e.ob.Lanes(), e.lanes)
	}
}

// testWriteTxGroup: every event carries its transaction group in its stored headers: one Write
// call is one group with a count; Write calls under one WithTxGroup context share an id and
// continue the index, without a count; separate calls get separate ids.
func testWriteTxGroup[TTx any](e *env[TTx]) {
	gctx, err := core.WithTxGroup(e.ctx)
	e.must(err, "WithTxGroup")
	var one, grouped []core.Event
	e.must(e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		var err error
		if one, err = e.ob.Write(ctx, tx, event("g1", 1), event("g2", 1), event("g1", 2)); err != nil {
			return err
		}
		other, err := e.ob.Write(ctx, tx, event("g3", 1))
		if err != nil {
			return err
		}
		if other[0].Headers[core.HeaderTxID] == one[0].Headers[core.HeaderTxID] {
			return fmt.Errorf("two Write calls without WithTxGroup share tx id %s", one[0].Headers[core.HeaderTxID])
		}
		return nil
	}), "write one group per call")
	e.must(e.a.InTx(gctx, func(ctx context.Context, tx TTx) error {
		for _, k := range []string{"g4", "g5"} {
			evs, err := e.ob.Write(ctx, tx, event(k, 1), event(k, 2))
			if err != nil {
				return err
			}
			grouped = append(grouped, evs...)
		}
		return nil
	}), "write one group over two calls")
	recs := e.byID()
	check := func(what string, evs []core.Event, count string) {
		id := evs[0].Headers[core.HeaderTxID]
		if !isUUIDv7(id) {
			e.t.Errorf("%s: tx id %q is not a UUIDv7", what, id)
		}
		for i, ev := range evs {
			h := recs[ev.ID].Headers
			if h[core.HeaderTxID] != id || h[core.HeaderTxIndex] != fmt.Sprint(i) {
				e.t.Errorf("%s: event %d stored tx id %q index %q, want %q and %d", what, i, h[core.HeaderTxID], h[core.HeaderTxIndex], id, i)
			}
			if c, ok := h[core.HeaderTxCount]; c != count || ok != (count != "") {
				e.t.Errorf("%s: event %d stored tx count %q (present %v), want %q", what, i, c, ok, count)
			}
		}
	}
	check("one call", one, "3")
	check("WithTxGroup", grouped, "")
}
