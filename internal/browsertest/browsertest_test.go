package browsertest_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/browsertest"
)

// The pages of the test server: a clean page under a strict CSP (its script is a file of the
// same origin), and one page for each kind of problem the helper must report. There is no
// /favicon.ico: the browser's own probe for it is not the page's problem.
func testServer(t *testing.T) *httptest.Server {
	page := func(csp, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if csp != "" {
				w.Header().Set("Content-Security-Policy", csp)
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, "<!doctype html><html><head><title>t</title></head><body><main id=\"page\">"+body+"</main></body></html>")
		}
	}
	script := func(js string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/javascript")
			_, _ = io.WriteString(w, js)
		}
	}
	const strict = "default-src 'self'"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ok", page(strict, `<p id="out">waiting</p><script src="/ok.js"></script>`))
	mux.HandleFunc("GET /ok.js", script(`console.log("fine"); document.getElementById("out").textContent = "ran";`))
	mux.HandleFunc("GET /throws", page(strict, `<script src="/throws.js"></script>`))
	mux.HandleFunc("GET /throws.js", script(`null.boom();`))
	mux.HandleFunc("GET /rejects", page(strict, `<script src="/rejects.js"></script>`))
	mux.HandleFunc("GET /rejects.js", script(`Promise.reject(new Error("nobody waits"));`))
	mux.HandleFunc("GET /console-error", page(strict, `<script src="/console-error.js"></script>`))
	mux.HandleFunc("GET /console-error.js", script(`console.error("something broke", 42);`))
	mux.HandleFunc("GET /inline", page(strict, `<p id="out">waiting</p><script>document.getElementById("out").textContent = "inline ran";</script>`))
	mux.HandleFunc("GET /missing", page(strict, `<script src="/missing.js"></script>`))
	mux.HandleFunc("GET /refused-fetch", page(strict, `<script src="/refused-fetch.js"></script>`))
	mux.HandleFunc("GET /refused-fetch.js", script(`fetch("/forbidden").then(r => { document.title = "fetched " + r.status; });`))
	mux.HandleFunc("GET /forbidden", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusForbidden) })
	mux.HandleFunc("GET /set-cookie", func(w http.ResponseWriter, _ *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "alice", Path: "/"})
		page("", "set")(w, nil)
	})
	mux.HandleFunc("GET /cookie", func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("session")
		v := "none"
		if err == nil {
			v = c.Value
		}
		page("", `<p id="cookie">`+v+`</p>`)(w, nil)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// One browser for every case (a start costs a second or two of CPU).
func TestBrowser(t *testing.T) {
	b := browsertest.Start(t, nil)
	srv := testServer(t)

	t.Run("CleanPage", func(t *testing.T) {
		p := b.NewPage(t)
		p.Do(chromedp.Navigate(srv.URL+"/ok"), chromedp.WaitVisible(chromedp.CSS("main#page")))
		got, err := browsertest.Run(p, chromedp.Text(chromedp.CSS("#out")))
		require.NoError(t, err)
		require.Equal(t, "ran", got, "the page's script ran")
		require.Empty(t, p.Problems())
		p.RequireNoProblems()
	})

	// The safety checks: each kind of problem is caught, with its text.
	for _, tc := range []struct {
		path, kind, text string
	}{
		{"/throws", "exception", "TypeError"},
		{"/rejects", "exception", "nobody waits"},
		{"/console-error", "console", "something broke 42"},
		{"/inline", "log", "Content Security Policy"}, // the inline script is refused
		{"/missing", "http", "404"},
		{"/refused-fetch", "http", "403"},
	} {
		t.Run("Catches"+tc.path, func(t *testing.T) {
			p := b.NewPage(t)
			p.Do(chromedp.Navigate(srv.URL+tc.path), chromedp.WaitVisible(chromedp.CSS("main#page")))
			if tc.path == "/refused-fetch" {
				_, err := browsertest.Run(p, chromedp.Poll[bool](`document.title.startsWith("fetched")`))
				require.NoError(t, err)
			}
			var found bool
			for _, pr := range p.Problems() {
				if pr.Kind == tc.kind && strings.Contains(pr.Text, tc.text) {
					found = true
				}
			}
			require.True(t, found, "want a %s problem with %q, got %v", tc.kind, tc.text, p.Problems())
			if tc.path == "/inline" {
				got, err := browsertest.Run(p, chromedp.Text(chromedp.CSS("#out")))
				require.NoError(t, err)
				require.Equal(t, "waiting", got, "the CSP refused the inline script")
			}
			require.NotEmpty(t, p.TakeProblems())
			require.Empty(t, p.Problems(), "TakeProblems forgets them")
		})
	}

	// A page that declares no icon makes the browser ask for /favicon.ico, here a 404: kept
	// apart, not a problem of the page. (The browser asks once per origin: a server of its own.)
	t.Run("FaviconProbeIsNotAProblem", func(t *testing.T) {
		own := testServer(t)
		p := b.NewPage(t)
		p.Do(chromedp.Navigate(own.URL+"/ok"), chromedp.WaitVisible(chromedp.CSS("main#page")))
		require.Eventually(t, func() bool { return len(p.Probes()) > 0 }, 10*time.Second, 50*time.Millisecond, "the browser probes /favicon.ico")
		for _, pr := range p.Probes() {
			require.True(t, strings.HasSuffix(pr.URL, "/favicon.ico"), "%v", pr)
		}
		require.Empty(t, p.Problems())
		p.RequireNoProblems()
	})

	t.Run("SessionsAreSeparate", func(t *testing.T) {
		alice, anonymous := b.NewPage(t), b.NewPage(t)
		alice.Do(chromedp.Navigate(srv.URL + "/set-cookie"))
		alice.Do(chromedp.Navigate(srv.URL + "/cookie"))
		got, err := browsertest.Run(alice, chromedp.Text(chromedp.CSS("#cookie")))
		require.NoError(t, err)
		require.Equal(t, "alice", got)
		anonymous.Do(chromedp.Navigate(srv.URL + "/cookie"))
		got, err = browsertest.Run(anonymous, chromedp.Text(chromedp.CSS("#cookie")))
		require.NoError(t, err)
		require.Equal(t, "none", got, "a new page has no cookie of another")
	})

	t.Run("Screenshot", func(t *testing.T) {
		p := b.NewPage(t)
		p.Do(chromedp.Navigate(srv.URL+"/ok"), chromedp.WaitVisible(chromedp.CSS("main#page")))
		path := p.Screenshot("ok page")
		require.Equal(t, "ok_page.png", filepath.Base(path))
		require.Equal(t, b.ArtefactDir(), filepath.Dir(path))
		png, err := os.ReadFile(path)
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "a PNG file")
		require.Greater(t, len(png), 1000)
	})
}
