package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core/driver"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// CleanupOptions bounds an outbox cleanup. Zero fields take their defaults.
type CleanupOptions struct {
	// Retention keeps published rows at least this long after publication. Default
	// DefaultCleanupRetention (24h).
	Retention time.Duration
	// BatchSize is the most rows one statement deletes. Default DefaultPruneLimit (1000); at most
	// MaxBatchSize.
	BatchSize int
	// BelowSeq, when > 0, is an extra watermark: only rows with Seq < BelowSeq are deleted. A CDC
	// relay needs none: it marks rows published only after the sink acknowledged them and
	// checkpoints only after marking, so every row after its checkpoint that was not delivered
	// is unpublished, and cleanup never deletes an unpublished row.
	BelowSeq int64
	// MeterProvider receives outboxkit.cleanup.deleted ({row}), the rows each call deleted
	// (partitions dropped included; also when it fails part-way; 0 included), and
	// outboxkit.cleanup.watermark (s), the retention cutoff of the last call that finished as a
	// Unix time: rows published before it are gone. Neither has an attribute. Default nil: the
	// global provider (otel.GetMeterProvider), a no-op until set.
	MeterProvider metric.MeterProvider

	now func() time.Time // test hook (internal/testhook.SetClock); nil: time.Now
}

// CleanupOutbox deletes published rows older than the retention window and behind the relay's
// evidence watermark (the lowest unpublished Seq, and opts.BelowSeq), in batches, until none is
// left. Unpublished and parked rows are never deleted. When p is also a PartitionPruner, whole
// partitions that qualify are dropped first. It returns how many rows it deleted.
func CleanupOutbox(ctx context.Context, p driver.Pruner, opts *CleanupOptions) (int, error) {
	var o CleanupOptions
	if opts != nil {
		o = *opts
	}
	if o.Retention < 0 {
		return 0, &OptionError{Field: "Retention", Reason: "must not be negative"}
	}
	if o.Retention == 0 {
		o.Retention = DefaultCleanupRetention
	}
	if err := driver.CheckCount("BatchSize", o.BatchSize, MaxBatchSize); err != nil {
		return 0, err
	}
	o.BatchSize = driver.PruneLimit(o.BatchSize)
	now := time.Now
	if o.now != nil {
		now = o.now
	}
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(instrumentationName)
	deleted, err := meter.Int64Counter("outboxkit.cleanup.deleted", metric.WithUnit("{row}"),
		metric.WithDescription("Published rows deleted by cleanup."))
	watermark, e := meter.Float64Gauge("outboxkit.cleanup.watermark", metric.WithUnit("s"),
		metric.WithDescription("Retention cutoff of the last cleanup that finished, as a Unix time: rows published before it were deleted."))
	if err = errors.Join(err, e); err != nil {
		return 0, fmt.Errorf("outbox: cleanup instruments: %w", err)
	}
	params := driver.PruneParams{PublishedBefore: now().Add(-o.Retention), BelowSeq: o.BelowSeq, Limit: o.BatchSize}
	total := 0
	var failed error
	defer func() {
		deleted.Add(ctx, int64(total))
		if failed == nil {
			watermark.Record(ctx, float64(params.PublishedBefore.UnixMicro())/1e6)
		}
	}()
	if pp, ok := p.(driver.PartitionPruner); ok {
		n, err := pp.DropPartitions(ctx, params)
		total += n
		if err != nil {
			failed = err
			return total, fmt.Errorf("outbox: cleanup: drop partitions: %w", err)
		}
	}
	for {
		n, err := p.PruneOutbox(ctx, params)
		total += n
		if err != nil {
			failed = err
			return total, fmt.Errorf("outbox: cleanup: %w", err)
		}
		if n < o.BatchSize {
			return total, nil
		}
	}
}
