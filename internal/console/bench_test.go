package console

import (
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/internal/testkit"
)

// BenchmarkPages times each page of the console (rendered through ServeHTTP, as an operator's
// bearer token: the reads, the template, no network) on a large outbox of
// OUTBOXKIT_BENCH_CONSOLE_ROWS rows (default 10,000), a fifth of them pending and one parked,
// built by testkit.BigOutboxSQL (BenchmarkStatus's outbox), on PostgreSQL and MySQL/MariaDB.
// It reports the median of the iterations (ms/page). The target is under 300 ms each
// on 5,000,000 rows with 1,000,000 pending:
//
//	OUTBOXKIT_BENCH_CONSOLE_ROWS=5000000 go test ./internal/console -run '^$' -bench Pages -benchtime 5x -timeout 60m
func BenchmarkPages(b *testing.B) {
	rows := 10_000
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_CONSOLE_ROWS")); err == nil && n > 0 {
		rows = n
	}
	pending := rows / 5
	pages := []struct{ name, path string }{
		{"overview", "/"}, {"fragment-overview", "/fragment/overview"}, {"lanes", "/lanes"},
		{"parked", "/parked"}, {"parked-search", "/parked?error=nothing-matches"},
		{"replay-preview", "/replay?ids=e1"}, {"audit", "/audit"},
	}
	for _, backend := range []struct {
		name string
		open func(testing.TB) *opendb.DB
	}{{"postgres", hPostgresLanes(0)}, {"mysql", hMySQLLanes(0)}} {
		b.Run(backend.name, func(b *testing.B) {
			db := backend.open(b)
			start := time.Now()
			stmts, err := testkit.BigOutboxSQL(backend.name, hSchemaOf(db), "", rows, pending)
			require.NoError(b, err)
			for _, s := range stmts {
				_, err := db.SQL.ExecContext(b.Context(), s)
				require.NoError(b, err)
			}
			b.Logf("%s: %d rows (%d pending) built in %s", backend.name, rows, pending, time.Since(start).Round(time.Second))
			auth := Auth{Tokens: []Token{{Name: "bench", Role: RoleOperator, Token: "bench-token-0123456789"}}}
			c, err := New(b.Context(), db, &Options{Auth: auth, Logger: discard()})
			require.NoError(b, err)
			defer c.Close()
			get := func(path string) {
				r := httptest.NewRequest(http.MethodGet, path, nil)
				r.Header.Set("Authorization", "Bearer bench-token-0123456789")
				w := httptest.NewRecorder()
				c.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", path, w.Code, w.Body.String())
				}
			}
			for _, p := range pages {
				b.Run(p.name, func(b *testing.B) {
					get(p.path) // warm the caches once
					var took []time.Duration
					for b.Loop() {
						t0 := time.Now()
						get(p.path)
						took = append(took, time.Since(t0))
					}
					slices.Sort(took)
					b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms/page")
					b.Logf("%s %s: %v (min %v, max %v)", backend.name, p.name, took[len(took)/2], took[0], took[len(took)-1])
				})
			}
		})
	}
}
