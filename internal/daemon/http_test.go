package daemon

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The daemon's server has every bound: a slow or stalled client cannot hold a connection.
func TestHTTPServerHasEveryTimeout(t *testing.T) {
	t.Parallel()
	cfg, _ := sqliteConfig(t, "127.0.0.1:0")
	d, err := New(t.Context(), cfg, NewLogger(cfg.Log, io.Discard), io.Discard)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.srv.Close(); d.db.Close() })
	require.Equal(t, httpReadHeaderTimeout, d.srv.ReadHeaderTimeout)
	require.Equal(t, httpReadTimeout, d.srv.ReadTimeout)
	require.Equal(t, httpWriteTimeout, d.srv.WriteTimeout)
	require.Equal(t, httpIdleTimeout, d.srv.IdleTimeout)
}

// Each stalled client of newHTTPServer is cut off by its bound (shortened here): one that
// stops halfway through its headers, one that announces a body and never sends it, one that
// keeps an idle keep-alive connection, and one that stops reading a large answer. Without the
// bound the connection would stay open for ever.
func TestHTTPServerCutsStalledClients(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	writeErr := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		chunk := make([]byte, 1<<20)
		for range 1 << 10 { // 1 GiB: far more than the socket buffers hold
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	})
	srv := newHTTPServer(mux, httpTimeouts{readHeader: bound, read: bound, write: bound, idle: bound})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	dial := func(t *testing.T, req string) net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, req)
		require.NoError(t, err)
		return c
	}
	// closedWithin reads (and drops) what the server sends and requires that it closes the
	// connection within d.
	closedWithin := func(t *testing.T, c net.Conn, d time.Duration) {
		began := time.Now()
		require.NoError(t, c.SetReadDeadline(began.Add(d)))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "connection still open after %v", d)
		t.Logf("closed after %v", time.Since(began).Round(time.Millisecond))
	}

	t.Run("partial headers", func(t *testing.T) {
		t.Parallel()
		c := dial(t, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		closedWithin(t, c, 10*bound)
	})
	t.Run("body never sent", func(t *testing.T) {
		t.Parallel()
		c := dial(t, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
		closedWithin(t, c, 10*bound)
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		t.Parallel()
		c := dial(t, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.False(t, resp.Close, "kept alive")
		closedWithin(t, c, 10*bound)
	})
	t.Run("answer never read", func(t *testing.T) {
		t.Parallel()
		dial(t, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
		select {
		case err := <-writeErr:
			require.Error(t, err, "the handler's write fails once the bound passed")
		case <-time.After(10 * bound):
			t.Fatalf("the handler still writes to a client that does not read after %v", 10*bound)
		}
	})
}
