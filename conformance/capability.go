package conformance

import (
	"fmt"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/reconcile"
)

// Capability is a set of the optional capabilities an adapter offers beyond Adapter: each
// constant names one interface of package driver (or reconcile.InboxReader), and a set is their
// bitwise or. An adapter declares its set in Harness.Capabilities; Run checks the declaration
// against the adapter first (subtest "capabilities") and then runs the cases of every declared
// capability. The zero value declares none.
type Capability uint32

// The capabilities, each with the cases that check it.
const (
	// Notifier is driver.Notifier (delivery/wakeup and operator/wake, with Waker).
	Notifier Capability = 1 << iota
	// Waker is driver.Waker (delivery/wakeup and operator/wake, with Notifier).
	Waker
	// Flusher is driver.Flusher (delivery/wakeup: Outbox.Flush after Notify).
	Flusher
	// OperatorStore is driver.OperatorStore, with its driver.StatusReader (the operator area).
	OperatorStore
	// SingleWriter is driver.SingleWriter (operator/inbox-prune: one transaction).
	SingleWriter
	// LaneResizer is driver.LaneResizer (lanes/resize-under-load, lanes/resize-stale-writer).
	LaneResizer
	// LaneInserter is driver.LaneInserter[TTx] (lanes/resize-stale-writer; every write).
	LaneInserter
	// InboxBatchStore is driver.InboxBatchStore[TTx] (inbox/batch, inbox/batch-outcomes).
	InboxBatchStore
	// PartitionPruner is driver.PartitionPruner (the cleanup area, through core.CleanupOutbox).
	PartitionPruner
	// CheckpointStore is driver.CheckpointStore (publisher/checkpoint-fenced; required by
	// Harness.CDC).
	CheckpointStore
	// Liveness is driver.Liveness (liveness/takeover, with Harness.Reopen and
	// Harness.KillSession).
	Liveness
	// CheckpointReleaser is driver.CheckpointReleaser (operator/checkpoint-release).
	CheckpointReleaser
	// AuditWriter is driver.AuditWriter (operator/audit-writer).
	AuditWriter
	// InboxReader is reconcile.InboxReader (chain/reconcile's inbox findings).
	InboxReader
	// LogReleaser is driver.LogReleaser on the change sources of CDCHarness.Source
	// (cdc/retention: ReleaseOverCap). Checked there, on the source.
	LogReleaser
	// PartitionedInbox is driver.PartitionedInbox: when InboxPartitioned reports true, the
	// inbox and operator cases that count pruned records accept fewer (records older than the
	// horizon may stay), and check the retention rule as for every inbox.
	PartitionedInbox
	// IngressCounter is driver.IngressCounter (delivery/ingress): the count grows with every
	// record committed, and the relay's marks do not lower it.
	IngressCounter

	lastCapability = IngressCounter
)

var capabilityNames = map[Capability]string{
	Notifier:           "driver.Notifier",
	Waker:              "driver.Waker",
	Flusher:            "driver.Flusher",
	OperatorStore:      "driver.OperatorStore",
	SingleWriter:       "driver.SingleWriter",
	LaneResizer:        "driver.LaneResizer",
	LaneInserter:       "driver.LaneInserter",
	InboxBatchStore:    "driver.InboxBatchStore",
	PartitionPruner:    "driver.PartitionPruner",
	CheckpointStore:    "driver.CheckpointStore",
	Liveness:           "driver.Liveness",
	CheckpointReleaser: "driver.CheckpointReleaser",
	AuditWriter:        "driver.AuditWriter",
	InboxReader:        "reconcile.InboxReader",
	LogReleaser:        "driver.LogReleaser",
	PartitionedInbox:   "driver.PartitionedInbox",
	IngressCounter:     "driver.IngressCounter",
}

var capabilityConsts = map[Capability]string{
	Notifier: "Notifier", Waker: "Waker", Flusher: "Flusher", OperatorStore: "OperatorStore",
	SingleWriter: "SingleWriter", LaneResizer: "LaneResizer", LaneInserter: "LaneInserter",
	InboxBatchStore: "InboxBatchStore", PartitionPruner: "PartitionPruner",
	CheckpointStore: "CheckpointStore", Liveness: "Liveness", CheckpointReleaser: "CheckpointReleaser",
	AuditWriter: "AuditWriter", InboxReader: "InboxReader", LogReleaser: "LogReleaser",
	PartitionedInbox: "PartitionedInbox", IngressCounter: "IngressCounter",
}

// Has reports whether every capability of x is in c.
func (c Capability) Has(x Capability) bool { return c&x == x }

// each returns the single capabilities of c in declaration order.
func (c Capability) each() []Capability {
	var out []Capability
	for b := Capability(1); b <= lastCapability; b <<= 1 {
		if c&b != 0 {
			out = append(out, b)
		}
	}
	return out
}

// String returns the interfaces of c, comma separated ("none" for the empty set).
func (c Capability) String() string {
	if c == 0 {
		return "none"
	}
	var names []string
	for _, b := range c.each() {
		names = append(names, capabilityNames[b])
	}
	if rest := c &^ allCapabilities; rest != 0 {
		names = append(names, fmt.Sprintf("Capability(%#x)", uint32(rest)))
	}
	return strings.Join(names, ", ")
}

// goName returns c as Go code: "conformance.Waker | conformance.Notifier".
func (c Capability) goName() string {
	var names []string
	for _, b := range c.each() {
		names = append(names, "conformance."+capabilityConsts[b])
	}
	return strings.Join(names, " | ")
}

// storeCapabilities are the capabilities found on the adapter itself (LogReleaser is on the
// change sources).
const storeCapabilities = allCapabilities &^ LogReleaser

// allCapabilities is every Capability.
const allCapabilities = lastCapability<<1 - 1

// implemented returns the capabilities a implements (all but LogReleaser).
func implemented[TTx any](a Adapter[TTx]) Capability {
	var c Capability
	set := func(x Capability, ok bool) {
		if ok {
			c |= x
		}
	}
	var v any = a
	_, ok := v.(driver.Notifier)
	set(Notifier, ok)
	_, ok = v.(driver.Waker)
	set(Waker, ok)
	_, ok = v.(driver.Flusher)
	set(Flusher, ok)
	_, ok = v.(driver.OperatorStore)
	set(OperatorStore, ok)
	_, ok = v.(driver.SingleWriter)
	set(SingleWriter, ok)
	_, ok = v.(driver.LaneResizer)
	set(LaneResizer, ok)
	_, ok = v.(driver.LaneInserter[TTx])
	set(LaneInserter, ok)
	_, ok = v.(driver.InboxBatchStore[TTx])
	set(InboxBatchStore, ok)
	_, ok = v.(driver.PartitionPruner)
	set(PartitionPruner, ok)
	_, ok = v.(driver.CheckpointStore)
	set(CheckpointStore, ok)
	_, ok = v.(driver.Liveness)
	set(Liveness, ok)
	_, ok = v.(driver.CheckpointReleaser)
	set(CheckpointReleaser, ok)
	_, ok = v.(driver.AuditWriter)
	set(AuditWriter, ok)
	_, ok = v.(reconcile.InboxReader)
	set(InboxReader, ok)
	_, ok = v.(driver.PartitionedInbox)
	set(PartitionedInbox, ok)
	_, ok = v.(driver.IngressCounter)
	set(IngressCounter, ok)
	return c
}

// checkCapabilities is the "capabilities" subtest: the declaration of h against an adapter of
// h.New. It returns the hooks and capabilities Run logs as not offered.
func checkCapabilities[TTx any](t *testing.T, h Harness[TTx]) {
	t.Helper()
	declared := h.Capabilities
	if rest := declared &^ allCapabilities; rest != 0 {
		t.Errorf("conformance: Harness.Capabilities holds unknown bits %#x", uint32(rest))
	}
	a := h.New(t, 8)
	if a == nil {
		t.Fatal("conformance: Harness.New returned nil")
	}
	has := implemented(a)
	if missing := has &^ declared; missing != 0 {
		t.Errorf("conformance: %T implements %s but Harness.Capabilities does not declare it: "+
			"add %s to Harness.Capabilities, so that the suite checks it", a, missing, missing.goName())
	}
	if extra := declared & storeCapabilities &^ has; extra != 0 {
		t.Errorf("conformance: Harness.Capabilities declares %s but %T does not implement it: "+
			"implement it, or remove %s from Harness.Capabilities", extra, a, extra.goName())
	}
	if declared.Has(LaneResizer) && !declared.Has(LaneInserter) {
		t.Errorf("conformance: Harness.Capabilities declares driver.LaneResizer without driver.LaneInserter: a resize is safe for writers only with checked inserts (see driver.LaneInserter)")
	}
	if declared.Has(LogReleaser) && h.CDC == nil {
		t.Errorf("conformance: Harness.Capabilities declares driver.LogReleaser (of the change sources) but Harness.CDC is nil")
	}
	if h.CDC != nil && !declared.Has(CheckpointStore) {
		t.Errorf("conformance: Harness.CDC is set but Harness.Capabilities does not declare conformance.CheckpointStore (required by the cdc area)")
	}
}

// notOffered returns what Run logs as not offered: the capabilities h does not declare and the
// optional hooks it leaves nil.
func notOffered[TTx any](h Harness[TTx]) string {
	var out []string
	if missing := allCapabilities &^ h.Capabilities; missing != 0 {
		out = append(out, missing.String())
	}
	for _, hook := range []struct {
		name string
		set  bool
	}{
		{"Harness.CDC (the cdc area)", h.CDC != nil},
		{"Harness.NewUnmigrated (the unmigrated area)", h.NewUnmigrated != nil},
		{"Harness.NewForeign (badtx/foreign)", h.NewForeign != nil},
		{"Harness.Reopen and KillSession (the liveness area)", h.Reopen != nil && h.KillSession != nil},
	} {
		if !hook.set {
			out = append(out, hook.name)
		}
	}
	return strings.Join(out, ", ")
}
