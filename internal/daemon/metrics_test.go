package daemon

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core/driver"
	"github.com/stretchr/testify/require"
)

// The backlog gauges query Admin.Stats at most once per metrics.stats_interval, however many
// collections (scrapes, OTLP pushes) come in between, and concurrent collections share a query;
// a failed query is kept for the interval as well.
func TestBacklogQueriesStatsOncePerInterval(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	pending := int64(0)
	var fail error
	b := &backlog{interval: 5 * time.Second, now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	b.stats = func(context.Context) (driver.Stats, error) {
		mu.Lock()
		defer mu.Unlock()
		pending++
		return driver.Stats{Pending: pending}, fail
	}
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	ctx := t.Context()

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			st, err := b.get(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(1), st.Pending)
		})
	}
	wg.Wait()
	require.Equal(t, 1, b.queries, "concurrent collections share one query")

	advance(4 * time.Second)
	st, err := b.get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Pending, "within the interval: the last answer")
	require.Equal(t, 1, b.queries)

	advance(time.Second)
	st, err = b.get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), st.Pending, "the interval is over: a new query")
	require.Equal(t, 2, b.queries)

	mu.Lock()
	fail = errors.New("database down")
	mu.Unlock()
	advance(5 * time.Second)
	_, err = b.get(ctx)
	require.Error(t, err)
	_, err = b.get(ctx)
	require.Error(t, err, "a failure is kept for the interval too")
	require.Equal(t, 3, b.queries)
}
