package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sqliteConfig is a valid polling configuration on a new SQLite file (migrate: true) that listens
// on listen.
func sqliteConfig(t *testing.T, listen string) (Config, string) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "relay.db")
	cfg := Defaults()
	cfg.Database = Database{Driver: "sqlite", DSN: db}
	cfg.Migrate = true
	cfg.AWS = AWS{Region: "eu-west-1", Endpoint: "http://127.0.0.1:1"}
	cfg.Routes.Default = "https://queue/default"
	cfg.HTTP.Listen = listen
	require.Empty(t, cfg.validate())
	return cfg, db
}

// New listens before it opens the database: an address it cannot bind fails with nothing
// touched (no SQLite file created, nothing migrated).
func TestNewListensBeforeOpeningTheDatabase(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	cfg, db := sqliteConfig(t, busy.Addr().String())
	d, err := New(t.Context(), cfg, NewLogger(cfg.Log, io.Discard), io.Discard)
	require.ErrorContains(t, err, "http.listen: ")
	require.Nil(t, d)
	require.NoFileExists(t, db)
}

// Until New has built the daemon, /healthz answers and /readyz and /metrics say 503; once
// built, /readyz still fails until the relays run, then answers 200, and 503 again after Run.
func TestReadyzFailsUntilTheRelaysRun(t *testing.T) {
	t.Parallel()
	get := func(h http.Handler, path string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w.Code, w.Body.String()
	}
	starting := (&Daemon{}).handler()
	require.Equal(t, http.StatusOK, must(get(starting, "/healthz")))
	code, body := get(starting, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready: starting\n", body)
	require.Equal(t, http.StatusServiceUnavailable, must(get(starting, "/metrics")))

	cfg, db := sqliteConfig(t, "127.0.0.1:0")
	d, err := New(t.Context(), cfg, NewLogger(cfg.Log, io.Discard), io.Discard)
	require.NoError(t, err)
	require.FileExists(t, db)
	url := "http://" + d.ln.Addr().String()
	status := func(path string) int {
		resp, err := http.Get(url + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, status("/healthz"), "served from New on")
	require.Equal(t, http.StatusServiceUnavailable, status("/readyz"), "no relay runs yet")
	require.Equal(t, http.StatusOK, status("/metrics"))

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	require.Eventually(t, func() bool { return status("/readyz") == http.StatusOK }, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

func must(code int, _ string) int { return code }
