package core

import (
	"context"
	"fmt"
	"github.com/outboxkit/outbox/core/driver"
	"log/slog"
	"sync/atomic"
	"time"
)

// MaxBatchSize bounds every BatchSize option (RelayOptions, CDCOptions, CleanupOptions): a
// batch is held in memory at once.
const MaxBatchSize = 100_000

// DefaultBatchSize is the default of RelayOptions.BatchSize and CDCOptions.BatchSize. It was 500
// until the capacity model (BENCHMARKS.md) showed one relay with batches of 1,000 draining as fast
// as a bare client of 4 loops of 1,000 rows under a 12/80 ms broker, and with 500 at 0.84 of it.
const DefaultBatchSize = 1000

// leaseDefaults applies and checks the options both relays share: an owner name, LeaseTTL
// DefaultLeaseTTL, RenewInterval LeaseTTL/3 (shorter than LeaseTTL), BatchSize DefaultBatchSize,
// and the retry policy (RetryPolicy.Check, then its defaults).
func leaseDefaults(owner *string, ttl, renew *time.Duration, batch *int, retry *RetryPolicy) error {
	if *owner == "" {
		*owner = defaultOwner()
	}
	if *ttl == 0 {
		*ttl = DefaultLeaseTTL
	}
	if *ttl < 0 {
		return &OptionError{Field: "LeaseTTL", Reason: "must be positive"}
	}
	if *renew == 0 {
		*renew = *ttl / 3
	}
	if *renew <= 0 || *renew >= *ttl {
		return &OptionError{Field: "RenewInterval", Reason: "must be positive and shorter than LeaseTTL"}
	}
	if *batch == 0 {
		*batch = DefaultBatchSize
	}
	if err := driver.CheckCount("BatchSize", *batch, MaxBatchSize); err != nil {
		return err
	}
	if err := retry.Check(); err != nil {
		return err
	}
	*retry = retry.withDefaults()
	return nil
}

// send routes recs and sends the routable ones in one Sink call; it is the send step of both
// relays. It returns one outcome per record: nil when acknowledged, the router's error for an
// unroutable record (the later records of its key are not sent and get ErrNotAcknowledged), else
// the sink's outcome. A sink that breaks its contract is logged and its answer treated as
// unacknowledged. sent reports whether Send was called.
func send(ctx context.Context, sink Sink, router Router, recs []driver.Record, log *slog.Logger) (outcome []error, sent bool) {
	outcome = make([]error, len(recs))
	msgs := make([]Message, 0, len(recs))
	idx := make([]int, 0, len(recs))
	blocked := map[string]bool{}
	for i := range recs {
		rec := &recs[i]
		if blocked[rec.PartitionKey] {
			outcome[i] = ErrNotAcknowledged
			continue
		}
		dest, err := router.Route(&rec.Event)
		if err != nil {
			outcome[i] = err
			blocked[rec.PartitionKey] = true
			continue
		}
		msgs = append(msgs, Message{Record: *rec, Destination: dest, DedupID: rec.ID, GroupID: rec.PartitionKey})
		idx = append(idx, i)
	}
	if len(msgs) == 0 {
		return outcome, false
	}
	res := sink.Send(ctx, msgs)
	if err := CheckOutcomes(msgs, res); err != nil {
		log.Error("relay_sink_contract_violated", "error", err)
		if len(res) != len(msgs) {
			res = Outcomes(len(msgs), fmt.Errorf("%w: %v", ErrNotAcknowledged, err))
		}
	}
	for j, i := range idx {
		outcome[i] = res[j]
	}
	return outcome, true
}

// settleCounters count what settles recorded, for both relays' stats.
type settleCounters struct {
	published, failures, parked atomic.Uint64
}

// count adds one successful settle.
func (c *settleCounters) count(p driver.SettleParams) {
	c.published.Add(uint64(len(p.Published)))
	c.failures.Add(uint64(len(p.Failed)))
	for _, f := range p.Failed {
		if f.Park {
			c.parked.Add(1)
		}
	}
}
