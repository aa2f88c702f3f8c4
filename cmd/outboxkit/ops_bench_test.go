package main

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

// BenchmarkStatus times `outboxkit status --output json` (connect, Stats, Blocked, the
// publisher generation, the CDC checkpoint and the lane table, through the cobra root) on a
// large outbox of OUTBOXKIT_BENCH_STATUS_ROWS rows (default 10,000) of which
// OUTBOXKIT_BENCH_STATUS_PENDING (default a fifth) are unpublished and one is parked, ~200-byte
// payloads, built with one INSERT ... SELECT and analysed (testkit.BigOutboxSQL). It reports the median of the
// iterations (ms/status). The figure and the command are in BENCHMARKS.md:
//
//	OUTBOXKIT_BENCH_STATUS_ROWS=5000000 go test ./cmd/outboxkit -run '^$' -bench Status -benchtime 5x -timeout 60m
func BenchmarkStatus(b *testing.B) {
	rows, pending := 10_000, 0
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_STATUS_ROWS")); err == nil && n > 0 {
		rows = n
	}
	pending = rows / 5
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_STATUS_PENDING")); err == nil && n > 0 && n <= rows {
		pending = n
	}
	for _, backend := range opsBackends[:2] {
		b.Run(backend.name, func(b *testing.B) {
			d := backend.new(b)
			ok(b, append([]string{"migrate"}, d.flags...)...)
			start := time.Now()
			fill, err := testkit.BigOutboxSQL(backend.name, d.cfg.Schema, "", rows, pending)
			require.NoError(b, err)
			d.execEach(b, fill) // one by one and outside a transaction: the fill ends with VACUUM
			b.Logf("%s: %d rows (%d pending) built in %s", backend.name, rows, pending, time.Since(start).Round(time.Second))
			args := append([]string{"status", "--output", "json"}, d.flags...)
			ok(b, args...) // warm the caches once
			var took []time.Duration
			for b.Loop() {
				t0 := time.Now()
				ok(b, args...)
				took = append(took, time.Since(t0))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms/status")
			b.Logf("%s: status %v (min %v, max %v)", backend.name, took[len(took)/2], took[0], took[len(took)-1])
		})
	}
}
