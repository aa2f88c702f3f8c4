package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With otlp.endpoint set, the daemon pushes its metrics there (OTLP/HTTP) besides serving them.
func TestDaemonPushesOTLP(t *testing.T) { // not parallel: it sets the AWS environment
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/metrics" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	cfg := Defaults()
	cfg.Database = Database{Driver: "sqlite", DSN: filepath.Join(t.TempDir(), "outbox.db")}
	cfg.Migrate = true
	cfg.AWS = AWS{Region: "us-east-1", Endpoint: "http://127.0.0.1:1"}
	cfg.Routes.Default = "q"
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.OTLP = OTLP{Endpoint: srv.URL + "/v1/metrics", Interval: Duration(100 * time.Millisecond)}
	require.Empty(t, cfg.validate())

	ctx, cancel := context.WithCancel(context.Background())
	d, err := New(ctx, cfg, slog.New(slog.DiscardHandler), io.Discard)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	require.Eventually(t, func() bool { return posts.Load() > 0 }, 30*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}
