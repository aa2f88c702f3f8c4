package daemon

import (
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/outboxkit/outbox/internal/browsertest"
	"github.com/outboxkit/outbox/internal/console"
)

// With console.enabled the daemon's HTTP server serves the console under /console/ (next to
// /healthz), over the daemon's database; without it /console/ is 404.
func TestConsoleServedUnderConsolePath(t *testing.T) {
	t.Parallel()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(t *testing.T, d *Daemon, path string) (int, string, http.Header) {
		resp, err := noRedirect.Get("http://" + d.ln.Addr().String() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b), resp.Header
	}
	start := func(t *testing.T, cfg Config) *Daemon {
		require.Empty(t, cfg.validate())
		d, err := New(t.Context(), cfg, NewLogger(cfg.Log, io.Discard), io.Discard)
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = d.srv.Close()
			if d.console != nil {
				_ = d.console.Close()
			}
			d.db.Close()
		})
		return d
	}

	t.Run("Enabled", func(t *testing.T) {
		t.Parallel()
		cfg, _ := sqliteConfig(t, "127.0.0.1:0")
		cfg.Console.Enabled = true
		d := start(t, cfg)
		for page, path := range map[string]string{"overview": "/console/", "lanes": "/console/lanes", "parked": "/console/parked", "audit": "/console/audit"} {
			code, body, h := get(t, d, path)
			require.Equal(t, http.StatusOK, code, "%s: %s", path, body)
			require.Contains(t, body, `<main id="page" data-page="`+page+`"`, path)
			require.Contains(t, body, `href="/console/`, "%s: links stay under /console/", path)
			require.NotEmpty(t, h.Get("Content-Security-Policy"), path)
		}
		code, _, h := get(t, d, "/console")
		require.True(t, code/100 == 3, "/console redirects, got %d", code)
		require.Equal(t, "/console/", h.Get("Location"))
		code, _, _ = get(t, d, "/healthz")
		require.Equal(t, http.StatusOK, code, "the daemon's own endpoints stay")
		// Anonymous on loopback with no user: read-only, a change is refused.
		resp, err := http.PostForm("http://"+d.ln.Addr().String()+"/console/parked/unpark", map[string][]string{"all": {"1"}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, resp.StatusCode)
	})

	t.Run("Disabled", func(t *testing.T) {
		t.Parallel()
		cfg, _ := sqliteConfig(t, "127.0.0.1:0")
		d := start(t, cfg)
		require.Nil(t, d.console)
		for _, path := range []string{"/console/", "/console/lanes", "/console"} {
			code, _, _ := get(t, d, path)
			require.Equal(t, http.StatusNotFound, code, path)
		}
	})
}

// The console beyond loopback with nobody to log in is refused: by the configuration check
// (exit 2) and by New before it listens or opens anything. A user, or a token, lifts it.
func TestConsoleRefusesOpenListen(t *testing.T) {
	t.Parallel()
	cfg, db := sqliteConfig(t, "0.0.0.0:0")
	cfg.Console.Enabled = true
	require.Equal(t, []string{`console.enabled: http.listen "0.0.0.0:0" is beyond loopback and the console has no user or token: add console.users or console.tokens, or listen on a loopback address (127.0.0.1:9464)`},
		cfg.validate())
	d, err := New(t.Context(), cfg, NewLogger(cfg.Log, io.Discard), io.Discard)
	require.Nil(t, d)
	require.True(t, errors.Is(err, console.ErrOpenListen), "%v", err)
	require.NoFileExists(t, db, "refused before the database is opened")

	cfg.Console.Enabled = false
	require.Empty(t, cfg.validate(), "a disabled console is no reason to refuse")
	cfg.Console.Enabled = true
	cfg.Console.Tokens = []console.Token{{Name: "ci", Role: console.RoleViewer, Token: strings.Repeat("t", 32)}}
	require.Empty(t, cfg.validate())
	cfg.Console.Tokens = nil
	cfg.Console.Users = []console.User{{Name: "alice", Role: console.RoleOperator, PasswordHash: hash(t, "secret")}}
	require.Empty(t, cfg.validate())
}

func hash(t *testing.T, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	require.NoError(t, err)
	return string(h)
}

// The console section reads users and tokens from the file, and reports one line per bad
// key, with the entry's index.
func TestConsoleConfigKeyByKey(t *testing.T) {
	t.Parallel()
	base := "database: {driver: sqlite, dsn: /tmp/x.db}\nsink: sqs\nroutes: {default: https://x}\n"
	good := hash(t, "secret")
	cfg, err := Load(writeConfig(t, base+`console:
  enabled: true
  prometheus_url: http://127.0.0.1:9090
  users:
    - {name: alice, role: operator, password_hash: "`+good+`"}
    - name: bob
      role: viewer
      password_hash: "`+good+`"
  tokens:
    - {name: grafana, role: viewer, token: "0123456789abcdef0123"}
`), noEnv, nil)
	require.NoError(t, err)
	require.True(t, cfg.Console.Enabled)
	require.Equal(t, "http://127.0.0.1:9090", cfg.Console.PrometheusURL)
	require.Equal(t, []console.User{{Name: "alice", Role: console.RoleOperator, PasswordHash: good}, {Name: "bob", Role: console.RoleViewer, PasswordHash: good}}, cfg.Console.Users)
	require.Equal(t, []console.Token{{Name: "grafana", Role: console.RoleViewer, Token: "0123456789abcdef0123"}}, cfg.Console.Tokens)

	// From the environment: enabled (a leaf); users and tokens are the file's only.
	cfg, err = Load(writeConfig(t, base), func(k string) string {
		return map[string]string{"OUTBOXKIT_CONSOLE_ENABLED": "true"}[k]
	}, nil)
	require.NoError(t, err)
	require.True(t, cfg.Console.Enabled)

	_, err = Load(writeConfig(t, base+`console:
  enabled: true
  prometheus_url: "prometheus:9090"
  users:
    - {name: alice, role: admin, password_hash: "not a hash"}
    - {name: alice, role: viewer, password_hash: "`+good+`", pasword: x}
  tokens:
    - {name: ci, role: operator}
    - {name: short, role: viewer, token: abc}
`), noEnv, nil)
	require.True(t, IsConfigError(err), "%v", err)
	problems := err.(*ConfigError).Problems
	for _, key := range []string{
		"console.prometheus_url: ",
		"console.users[0].role: ",
		"console.users[0].password_hash: ",
		"console.users[1].name: ",
		"console.users[1].pasword: unknown key (line 9)",
		"console.tokens[0]: give token or token_env",
		"console.tokens[1].token: ",
	} {
		found := false
		for _, p := range problems {
			found = found || strings.HasPrefix(p, key)
		}
		require.True(t, found, "no problem %q in\n%s", key, strings.Join(problems, "\n"))
	}
	require.Len(t, problems, 7, strings.Join(problems, "\n"))

	_, err = Load(writeConfig(t, base+"console:\n  enabled: true\n  users: alice\n"), noEnv, nil)
	require.True(t, IsConfigError(err), "%v", err)
	require.Equal(t, []string{"console.users: must be a list of mappings (line 6)"}, err.(*ConfigError).Problems)

	// The file's users are not settable by a flag or the environment: no such key.
	for _, l := range leaves(reflect.TypeFor[Config](), "") {
		require.False(t, strings.HasPrefix(l.path, "console.users") || strings.HasPrefix(l.path, "console.tokens"), l.path)
	}
}

// The console under the daemon in a real browser: anonymous and read-only on loopback (no user
// configured), every page renders under /console/ with no console error, CSP refusal or failed
// request, and offers no action.
func TestConsoleBrowserUnderDaemon(t *testing.T) {
	b := browsertest.Start(t, nil)
	cfg, _ := sqliteConfig(t, "127.0.0.1:0")
	cfg.Console.Enabled = true
	d, err := New(t.Context(), cfg, NewLogger(cfg.Log, io.Discard), io.Discard)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.srv.Close(); _ = d.console.Close(); d.db.Close() })
	url := "http://" + d.ln.Addr().String() + "/console"
	p := b.NewPage(t)
	for _, page := range []string{"overview", "lanes", "parked", "replay", "audit"} {
		path := "/" + page
		if page == "overview" {
			path = "/"
		}
		p.Do(chromedp.Navigate(url+path), chromedp.WaitVisible(chromedp.CSS(`main#page[data-page="`+page+`"]`)))
		who, err := browsertest.Run(p, chromedp.Text(chromedp.CSS("header .who")))
		require.NoError(t, err)
		require.Contains(t, who, "read-only", page)
		n, err := browsertest.Run(p, chromedp.Evaluate[int](`document.querySelectorAll('form[method="post"]').length`))
		require.NoError(t, err)
		require.Zero(t, n, "%s: no action offered to an anonymous reader", page)
		p.Screenshot("daemon-" + page)
	}
	p.RequireNoProblems()
}
