package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/outboxkit/outbox/internal/console"
	"github.com/outboxkit/outbox/internal/opendb"
)

// TestConsoleCommandUsage: bad flags and a console that would listen beyond loopback without
// authentication exit 2 with one line naming the problem; a missing outbox exits 1.
func TestConsoleCommandUsage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "outbox.db")
	ok(t, "migrate", "--db", "sqlite:"+path)
	db := []string{"--db", "sqlite:" + path}
	with := func(args ...string) []string { return append(append([]string{"console"}, db...), args...) }
	fails(t, 2, "console: --db is required", "console")
	fails(t, 2, "--tls-cert and --tls-key go together", with("--tls-cert", "c.pem")...)
	fails(t, 2, "--listen: want HOST:PORT", with("--listen", "8080")...)
	fails(t, 2, "--sample-interval: must be at least 1s", with("--sample-interval", "10ms")...)
	line := fails(t, 2, "--listen: console: listening beyond loopback without authentication", with("--listen", "0.0.0.0:0")...)
	require.Contains(t, line, "0.0.0.0:0")
	fails(t, 2, "--listen: console: listening beyond loopback", with("--listen", ":0")...)
	bad := filepath.Join(dir, "auth.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("users:\n  - name: a\n    role: admin\n    password_hash: x\n"), 0o600))
	line = fails(t, 2, `users[0].role: want viewer or operator, got "admin"`, with("--auth", bad)...)
	require.Contains(t, line, "users[0].password_hash: is not a bcrypt hash")
	fails(t, 2, "--auth: console: bad auth file", with("--auth", filepath.Join(dir, "none.yaml"))...)
	fails(t, 2, "--tls-cert/--tls-key", with("--tls-cert", filepath.Join(dir, "c.pem"), "--tls-key", filepath.Join(dir, "k.pem"))...)
	fails(t, 1, "no migrated outbox", "console", "--db", "sqlite:"+filepath.Join(dir, "missing.db"), "--listen", "127.0.0.1:0")
	help := ok(t, "console", "--help")
	for _, want := range []string{"console --db URL [--listen ADDR] [--auth FILE] [--tls-cert F --tls-key F]", "--listen string", "(default \"127.0.0.1:8080\")", "--auth string", "--tls-cert string", "--db string", "--table string", "SIGINT or SIGTERM stops gracefully"} {
		require.Contains(t, help, want)
	}
}

// consoleAddr waits for the "console listening on URL" line and returns the URL.
func consoleAddr(t *testing.T, out *syncBuffer) string {
	t.Helper()
	re := regexp.MustCompile(`console listening on (\S+)/\n`)
	var u string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			u = m[1]
		}
		return m != nil
	}, 20*time.Second, 20*time.Millisecond, "no listening line: %q", out.String())
	return u
}

// TestConsoleCommandServes: `outboxkit console` serves the overview of the outbox of --db
// on a loopback address, beyond loopback with --auth (a bearer token reads), over HTTPS with
// --tls-cert and --tls-key (the login cookie Secure), and stops with exit status 0 when its
// context ends (SIGINT/SIGTERM in main); its output never shows the token.
func TestConsoleCommandServes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "outbox.db")
	ok(t, "migrate", "--db", "sqlite:"+path)
	odb, err := opendb.Open(t.Context(), opendb.Config{Driver: "sqlite", DSN: path})
	require.NoError(t, err)
	writeEvents(t, odb.Store, "a", "b")
	odb.Close()

	start := func(args ...string) (string, *syncBuffer, context.CancelFunc, chan int) {
		ctx, cancel := context.WithCancel(t.Context())
		var out, errb syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, append([]string{"console", "--db", "sqlite:" + path}, args...), &out, &errb)
		}()
		return consoleAddr(t, &out), &errb, cancel, done
	}
	stop := func(cancel context.CancelFunc, done chan int) {
		t.Helper()
		cancel()
		select {
		case code := <-done:
			require.Equal(t, 0, code)
		case <-time.After(15 * time.Second):
			t.Fatal("console did not stop")
		}
	}
	get := func(cl *http.Client, u, token string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, u, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := cl.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(b)
	}

	// Anonymous, read-only, on loopback.
	u, _, cancel, done := start("--listen", "127.0.0.1:0")
	require.True(t, strings.HasPrefix(u, "http://127.0.0.1:"), u)
	res, body := get(http.DefaultClient, u+"/", "")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `<main id="page" data-page="overview">`)
	require.Contains(t, body, `<dd id="stat-pending">2</dd>`)
	require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"))
	stop(cancel, done)

	// Beyond loopback with a token, over TLS.
	const token = "console-cmd-token-0123456789"
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), 10)
	require.NoError(t, err)
	auth := filepath.Join(dir, "auth.yaml")
	require.NoError(t, os.WriteFile(auth, []byte("users:\n  - name: alice\n    role: operator\n    password_hash: '"+string(hash)+"'\ntokens:\n  - name: ci\n    role: viewer\n    token: "+token+"\n"), 0o600))
	cert, key := selfSignedPair(t, dir)
	u, errb, cancel, done := start("--listen", "0.0.0.0:0", "--auth", auth, "--tls-cert", cert, "--tls-key", key)
	require.True(t, strings.HasPrefix(u, "https://"), u)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(u, "https://"))
	require.NoError(t, err)
	u = "https://127.0.0.1:" + port
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // the test's own self-signed certificate
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, _ = get(cl, u+"/lanes", "")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "a login is needed")
	res, body = get(cl, u+"/lanes", token)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-page="lanes"`)
	require.Contains(t, body, "ci (viewer)")
	res, _ = get(cl, u+"/login", "")
	require.NotEmpty(t, res.Cookies())
	for _, c := range res.Cookies() {
		require.True(t, c.Secure, c.Name)
		require.True(t, c.HttpOnly, c.Name)
	}
	stop(cancel, done)
	require.NotContains(t, errb.String(), token)
}

// selfSignedPair writes a self-signed certificate for 127.0.0.1 and its key, and returns their
// paths.
func selfSignedPair(t *testing.T, dir string) (string, string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "console-test"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	return cert, key
}

// TestConsoleHashPassword: `console hash-password` prints a bcrypt hash of stdin's first line
// that LoadAuth accepts and that matches the password; no password is bad usage.
func TestConsoleHashPassword(t *testing.T) {
	hash := func(in string, args ...string) (string, string, error) {
		root := newRoot()
		var out, errb strings.Builder
		root.SetIn(strings.NewReader(in))
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs(append([]string{"console", "hash-password"}, args...))
		err := root.ExecuteContext(t.Context())
		return out.String(), errb.String(), err
	}
	out, _, err := hash("s3cret pass\nignored\n", "--cost", "10")
	require.NoError(t, err)
	h := strings.TrimSuffix(out, "\n")
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(h), []byte("s3cret pass")))
	cost, err := bcrypt.Cost([]byte(h))
	require.NoError(t, err)
	require.Equal(t, 10, cost)
	auth := filepath.Join(t.TempDir(), "auth.yaml")
	require.NoError(t, os.WriteFile(auth, []byte("users:\n  - name: a\n    role: viewer\n    password_hash: '"+h+"'\n"), 0o600))
	_, err = console.LoadAuth(auth)
	require.NoError(t, err)
	_, errs, err := hash("")
	require.Error(t, err)
	require.Contains(t, errs, "give the password on standard input")
	_, errs, err = hash("x\n", "--cost", "4")
	require.Error(t, err)
	require.Contains(t, errs, "--cost: want 10 to 31, got 4")
}

// TestConsoleSecretsNeverShown: the password of --db and the tokens of the auth file are
// masked in everything the console writes: a failed open, and a log line built from what a
// client sent (a token typed into the login form's name).
func TestConsoleSecretsNeverShown(t *testing.T) {
	pass := "PLANTED-pg-" + randSuffix()
	_, out, errs := cli(t, "console", "--db", "postgres://u:"+pass+"@127.0.0.1:1/db?connect_timeout=2", "--listen", "127.0.0.1:0")
	require.NotContains(t, out+errs, pass)

	dir := t.TempDir()
	path := filepath.Join(dir, "outbox.db")
	ok(t, "migrate", "--db", "sqlite:"+path)
	token := "PLANTED-token-" + randSuffix()
	t.Setenv("CONSOLE_CMD_TEST_TOKEN", token)
	auth := filepath.Join(dir, "auth.yaml")
	require.NoError(t, os.WriteFile(auth, []byte("tokens:\n  - name: ci\n    role: viewer\n    token_env: CONSOLE_CMD_TEST_TOKEN\n"), 0o600))
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console", "--db", "sqlite:" + path, "--listen", "127.0.0.1:0", "--auth", auth}, &stdout, &stderr)
	}()
	u := consoleAddr(t, &stdout)
	jar := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := jar.Get(u + "/login")
	require.NoError(t, err)
	res.Body.Close()
	var csrf string
	for _, c := range res.Cookies() {
		csrf = c.Value
	}
	req, err := http.NewRequest(http.MethodPost, u+"/login", strings.NewReader("csrf="+csrf+"&name="+token+"&password=x"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "outboxkit_console_login", Value: csrf})
	res, err = jar.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	cancel()
	require.Equal(t, 0, <-done)
	require.Contains(t, stderr.String(), "console_login_failed user=[REDACTED]")
	require.NotContains(t, stdout.String()+stderr.String(), token)
}

// The issue's first check: `outboxkit console --db sqlite:DIR/producer.db` after `outboxkit demo
// --dir DIR` shows the demo's outbox: every event it wrote, published; its relays' publisher
// and lanes; no parked key.
func TestConsoleAfterDemo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig()
	cfg.dir = dir
	ok, out := runDemoForTest(t, cfg)
	require.True(t, ok, out)
	m := verdictOK.FindStringSubmatch(lastLine(out))
	require.NotNil(t, m, "last line: %s", lastLine(out))

	ctx, cancel := context.WithCancel(t.Context())
	var stdout, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console", "--db", "sqlite:" + filepath.Join(dir, "producer.db"), "--listen", "127.0.0.1:0"}, &stdout, &errb)
	}()
	u := consoleAddr(t, &stdout)
	defer func() {
		cancel()
		require.Equal(t, 0, <-done, errb.String())
	}()
	for _, c := range []struct{ path, page, want string }{
		{"/", "overview", `<dd id="stat-pending">0</dd>`},
		{"/", "overview", `<dd id="pub-kind">polling</dd>`},
		{"/lanes", "lanes", "<table"},
		{"/parked", "parked", "No parked"},
	} {
		res, err := http.Get(u + c.path)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, c.path)
		require.Contains(t, string(body), `data-page="`+c.page+`"`, c.path)
		require.Contains(t, string(body), c.want, c.path)
	}
}
