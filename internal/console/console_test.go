package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// TestConsolePages, on each database: every page renders the seeded outbox (anonymously: no
// auth, a loopback listener), the search of the parked page filters, the fragments render the
// live parts, and the static files are served.
func TestConsolePages(t *testing.T) {
	for _, b := range hBackends {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			s := hSeed(t, db)
			c, srv := hServe(t, db, &Options{SampleInterval: time.Second})
			cl := hClient(t)
			page := func(path, name string, want ...string) string {
				t.Helper()
				code, body := hGet(t, cl, srv.URL+path)
				require.Equal(t, http.StatusOK, code, body)
				require.Contains(t, body, `<main id="page" data-page="`+name+`">`)
				for _, w := range want {
					require.Contains(t, body, w, path)
				}
				return body
			}
			// The sampler has sampled once at least (it starts with a sample).
			require.Eventually(t, func() bool { return len(c.ring.since(time.Time{})) > 0 }, 10*time.Second, 10*time.Millisecond)
			ov := page("/", "overview",
				`<dd id="stat-pending">3</dd>`, `<dd id="stat-parked">3</dd>`, `<dd id="stat-blocked">2</dd>`,
				`<dd id="pub-generation">`+strconv.FormatInt(s.Generation, 10)+`</dd>`, `<dd id="pub-kind">polling</dd>`,
				"<td>orders</td><td class=\"n\">1</td>", "<em>routed by type</em>", "4: 4 held, 0 expired, 0 free",
				`<polyline class="chart-line" points="`, "Backlog (pending events)", "This store does not list its inbox consumers",
				`data-fragment="/fragment/overview"`, `<script src="/static/console.js" defer></script>`)
			require.NotContains(t, ov, "<style", "no inline style (CSP)")
			require.NotContains(t, ov, " style=", "no inline style (CSP)")
			require.Equal(t, 1, strings.Count(ov, "<script"), "one script, from a file")
			require.NotContains(t, ov, "Log out", "anonymous: no session")
			page("/lanes", "lanes", `4 lanes: 4 held, 0 expired, 0 free.`, `<tr class="lane-live" data-lane="0">`, `<td>w1</td>`, `<span class="state state-live">live</span>`)

			parked := page("/parked", "parked", `<strong id="parked-count">3</strong>`, `<strong id="blocked-count">2</strong>`,
				"<code>a</code>", "<code>c</code>", "rejected schema", "timeout talking to billing", "<code>"+s.IDs["a"][0]+"</code>")
			require.NotContains(t, parked, `name="key"`, "anonymous: no selection, no action")
			require.NotContains(t, parked, "/parked/unpark")
			found := page("/parked?error=TIMEOUT", "parked", "<code>c</code>")
			require.NotContains(t, found, "<code>a</code>")
			found = page("/parked?destination=orders&type=order.created", "parked", "<code>a</code>")
			require.NotContains(t, found, "<code>c</code>")
			page("/parked?key_q=zzz", "parked", `<p id="parked-none">No parked event matches the search.</p>`)

			page("/replay", "replay", `<form method="get" action="/replay" id="replay-form">`)
			preview := page("/replay?ids="+s.IDs["b"][0], "replay", `<p id="replay-count"><strong>1</strong> published event would be sent again:</p>`,
				"<code>"+s.IDs["b"][0]+"</code>", "<td>order.created</td>", `{&#34;order&#34;:&#34;b&#34;}`, "<dt>trace</dt><dd>t-b</dd>")
			require.NotContains(t, preview, `id="replay-confirm"`, "anonymous: no confirmation")
			page("/replay?key=a&since=1h", "replay", `<p class="error" role="alert" id="replay-refusal">Replay would be refused:`)
			page("/replay?ids=nope", "replay", `id="replay-refusal"`)
			page("/replay?ids=x&key=a", "replay", "Give event IDs, or a key with a since, not both.")

			page("/audit", "audit", `<p id="audit-none">No audit rows.</p>`)

			for _, f := range []struct{ path, want string }{{"/fragment/overview", `<dd id="stat-parked">3</dd>`}, {"/fragment/lanes", `id="lane-grid"`}} {
				code, body := hGet(t, cl, srv.URL+f.path)
				require.Equal(t, http.StatusOK, code)
				require.Contains(t, body, f.want)
				require.NotContains(t, body, "<html", "a fragment, not a page")
			}
			for path, ctype := range map[string]string{"/static/console.css": "text/css", "/static/console.js": "text/javascript"} {
				res, err := cl.Get(srv.URL + path)
				require.NoError(t, err)
				res.Body.Close()
				require.Equal(t, http.StatusOK, res.StatusCode, path)
				require.Contains(t, res.Header.Get("Content-Type"), ctype)
			}
			code, body := hGet(t, cl, srv.URL+"/nope")
			require.Equal(t, http.StatusNotFound, code)
			require.Contains(t, body, `data-page="error"`)
		})
	}
}

// TestConsoleOperatorUnparks, on each database: an operator logs in, unparks a selection
// after its dry-run count, and the outbox and the audit table show it with her name, through
// the console's audit page too; "unpark all matching" counts by the filter first.
func TestConsoleOperatorUnparks(t *testing.T) {
	for _, b := range hBackends {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			s := hSeed(t, db)
			_, srv := hServe(t, db, &Options{Auth: hAuth(t)})
			cl := hClient(t)
			hLogin(t, cl, srv.URL, "alice", "alice-pw")
			csrf := hCSRF(t, cl, srv.URL+"/parked")
			code, body := hGet(t, cl, srv.URL+"/parked")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, body, `<input type="checkbox" name="key" value="a" id="sel-0" aria-label="Select key a">`)
			require.Contains(t, body, "alice (operator)")

			// Dry run of the selection a and e: the count, nothing changed.
			code, body = hPost(t, cl, srv.URL+"/parked/unpark", url.Values{"csrf": {csrf}, "dry_run": {"1"}, "key": {"a", "e"}})
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `data-page="unpark"`)
			require.Contains(t, body, `<p id="unpark-count">Dry run: <strong>2</strong> partition keys would be unparked (2 parked events)`)
			require.Contains(t, body, `<input type="hidden" name="key" value="a"><input type="hidden" name="key" value="e">`)
			require.Equal(t, []string{"a", "c", "e"}, hParkedKeys(t, db))
			require.Empty(t, hAudit(t, db))

			// All matching "timeout": c only, counted.
			code, body = hPost(t, cl, srv.URL+"/parked/unpark", url.Values{"csrf": {csrf}, "dry_run": {"1"}, "all": {"1"}, "error": {"timeout"}})
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `<strong>1</strong> partition key would be unparked (1 parked event)`)
			require.Contains(t, body, `<input type="hidden" name="key" value="c">`)
			require.NotContains(t, body, `name="key" value="a"`)

			// Confirmed: a and e are released (their parked events, and the one blocked behind a's).
			code, body = hPost(t, cl, srv.URL+"/parked/unpark", url.Values{"csrf": {csrf}, "confirm": {"1"}, "key": {"a", "e"}})
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `<p id="result" role="status">Unparked 2 records of 2 keys`)
			require.Equal(t, []string{"c"}, hParkedKeys(t, db))
			st, err := db.Store.Stats(t.Context())
			require.NoError(t, err)
			require.Equal(t, [2]int64{5, 1}, [2]int64{st.Pending, st.Parked})

			audit := hAudit(t, db)
			require.Len(t, audit, 1)
			require.Equal(t, "alice", audit[0].Actor)
			require.Equal(t, "unpark", audit[0].Command)
			require.Equal(t, int64(2), audit[0].Rows)
			var args map[string]any
			require.NoError(t, json.Unmarshal([]byte(audit[0].Arguments), &args))
			require.Equal(t, map[string]any{"tool": "console", "keys": []any{"a", "e"}, "all": false}, args)

			code, body = hGet(t, cl, srv.URL+"/audit?tool=console")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, body, `<td class="actor">alice</td><td class="tool">console</td><td>unpark</td><td class="n">2</td>`)
			code, body = hGet(t, cl, srv.URL+"/audit?actor=nobody")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, body, `<p id="audit-none">No audit rows match.</p>`)

			// Replay of b: a preview, then the confirmation puts it back to pending.
			code, body = hGet(t, cl, srv.URL+"/replay?ids="+s.IDs["b"][0])
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, body, `id="replay-confirm"`)
			code, body = hPost(t, cl, srv.URL+"/replay", url.Values{"csrf": {csrf}, "confirm": {"1"}, "ids": {s.IDs["b"][0]}})
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, "Put 1 published events back to pending")
			st, err = db.Store.Stats(t.Context())
			require.NoError(t, err)
			require.Equal(t, int64(6), st.Pending)
			audit = hAudit(t, db)
			require.Len(t, audit, 2)
			require.Equal(t, [3]string{"alice", "replay", `{"ids":["` + s.IDs["b"][0] + `"],"tool":"console"}`}, [3]string{audit[1].Actor, audit[1].Command, audit[1].Arguments})

			// A refused replay changes nothing and says why.
			code, body = hPost(t, cl, srv.URL+"/replay", url.Values{"csrf": {csrf}, "confirm": {"1"}, "ids": {s.IDs["b"][0]}})
			require.Equal(t, http.StatusConflict, code, body)
			require.Contains(t, body, "Nothing was changed")
			require.Len(t, hAudit(t, db), 2)

			// A bearer token of an operator acts without a session (no cookie: no CSRF).
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/parked/unpark", strings.NewReader(url.Values{"confirm": {"1"}, "key": {"c"}}.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Authorization", "Bearer operator-token-0123456789")
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.Empty(t, hParkedKeys(t, db))
			audit = hAudit(t, db)
			require.Equal(t, "ci-op", audit[len(audit)-1].Actor)
		})
	}
}

// TestConsoleRefusals, on each database: an anonymous POST (401), a viewer's (403, with a
// valid CSRF token and as a viewer token), an operator's without or with a wrong CSRF token
// (403) and a bad bearer token (401) change nothing: the keys stay parked, no audit row.
func TestConsoleRefusals(t *testing.T) {
	for _, b := range hBackends {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			s := hSeed(t, db)
			_, srv := hServe(t, db, &Options{Auth: hAuth(t)})
			unchanged := func(what string) {
				t.Helper()
				require.Equal(t, []string{"a", "c", "e"}, hParkedKeys(t, db), what)
				require.Empty(t, hAudit(t, db), what)
				st, err := db.Store.Stats(t.Context())
				require.NoError(t, err)
				require.Equal(t, [3]int64{3, 3, 1}, [3]int64{st.Pending, st.Parked, st.Published}, what)
			}
			unpark := func(csrf string) url.Values {
				return url.Values{"csrf": {csrf}, "confirm": {"1"}, "key": {"a", "c", "e"}}
			}
			replay := func(csrf string) url.Values {
				return url.Values{"csrf": {csrf}, "confirm": {"1"}, "ids": {s.IDs["b"][0]}}
			}

			anon := hClient(t)
			for _, p := range []struct {
				path string
				form url.Values
			}{{"/parked/unpark", unpark("")}, {"/replay", replay("")}, {"/logout", url.Values{}}} {
				code, body := hPost(t, anon, srv.URL+p.path, p.form)
				require.Equal(t, http.StatusUnauthorized, code, p.path+": "+body)
			}
			unchanged("anonymous")

			viewer := hClient(t)
			hLogin(t, viewer, srv.URL, "bob", "bob-pw")
			vcsrf := hCSRF(t, viewer, srv.URL+"/parked")
			_, body := hGet(t, viewer, srv.URL+"/parked")
			require.NotContains(t, body, "/parked/unpark", "a viewer sees no action")
			for _, p := range []struct {
				path string
				form url.Values
			}{{"/parked/unpark", unpark(vcsrf)}, {"/replay", replay(vcsrf)}} {
				code, body := hPost(t, viewer, srv.URL+p.path, p.form)
				require.Equal(t, http.StatusForbidden, code, body)
				require.Contains(t, body, "Only an operator may do this")
			}
			unchanged("viewer")

			op := hClient(t)
			hLogin(t, op, srv.URL, "alice", "alice-pw")
			csrf := hCSRF(t, op, srv.URL+"/parked")
			for _, form := range []url.Values{unpark(""), unpark(vcsrf), unpark(csrf + "x"), {"confirm": {"1"}, "key": {"a"}}} {
				code, body := hPost(t, op, srv.URL+"/parked/unpark", form)
				require.Equal(t, http.StatusForbidden, code, body)
				require.Contains(t, body, "security token is missing or stale")
			}
			code, _ := hPost(t, op, srv.URL+"/replay", replay(""))
			require.Equal(t, http.StatusForbidden, code)
			// The CSRF token in the query string does not count: only the form's.
			code, _ = hPost(t, op, srv.URL+"/parked/unpark?csrf="+url.QueryEscape(csrf), url.Values{"confirm": {"1"}, "key": {"a"}})
			require.Equal(t, http.StatusForbidden, code)
			unchanged("operator without CSRF")

			for tok, want := range map[string]int{"viewer-token-0123456789": http.StatusForbidden, "wrong-token-0123456789": http.StatusUnauthorized, "": http.StatusUnauthorized} {
				req, err := http.NewRequest(http.MethodPost, srv.URL+"/parked/unpark", strings.NewReader(unpark("").Encode()))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Authorization", "Bearer "+tok)
				res, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				res.Body.Close()
				require.Equal(t, want, res.StatusCode, tok)
			}
			unchanged("tokens")

			// With the CSRF token the same operator succeeds: the refusals above were the token's.
			code, body = hPost(t, op, srv.URL+"/parked/unpark", unpark(csrf))
			require.Equal(t, http.StatusOK, code, body)
			require.Empty(t, hParkedKeys(t, db))
		})
	}
}

// TestConsoleLogin: with users configured, the pages need a login (a redirect; 401 for a
// fragment); a wrong password is refused; the login form needs its CSRF token; the session
// cookie is HttpOnly, SameSite=Strict (and Secure with SecureCookies); logout ends the session.
func TestConsoleLogin(t *testing.T) {
	db := hSQLite(t)
	hSeed(t, db)
	for _, secure := range []bool{false, true} {
		_, srv := hServe(t, db, &Options{Auth: hAuth(t), SecureCookies: secure, BasePath: "/console"})
		base := srv.URL + "/console"
		cl := hClient(t)
		res, err := cl.Get(base + "/lanes")
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		require.Equal(t, "/console/login?next=%2Fconsole%2Flanes", res.Header.Get("Location"))
		code, _ := hGet(t, cl, base+"/fragment/lanes")
		require.Equal(t, http.StatusUnauthorized, code)

		// No CSRF token, or a token without its cookie: refused before the password is looked at.
		code, _ = hPost(t, cl, base+"/login", url.Values{"name": {"alice"}, "password": {"alice-pw"}})
		require.Equal(t, http.StatusForbidden, code)
		code, _ = hPost(t, hClient(t), base+"/login", url.Values{"csrf": {hCSRF(t, cl, base+"/login")}, "name": {"alice"}, "password": {"alice-pw"}})
		require.Equal(t, http.StatusForbidden, code)
		csrf := hCSRF(t, cl, base+"/login")
		code, body := hPost(t, cl, base+"/login", url.Values{"csrf": {csrf}, "name": {"alice"}, "password": {"wrong"}})
		require.Equal(t, http.StatusUnauthorized, code)
		require.Contains(t, body, `<p class="error" role="alert" id="login-error">Wrong name or password.</p>`)

		csrf = hCSRF(t, cl, base+"/login")
		res, err = cl.PostForm(base+"/login", url.Values{"csrf": {csrf}, "name": {"alice"}, "password": {"alice-pw"}, "next": {"/console/lanes"}})
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		require.Equal(t, "/console/lanes", res.Header.Get("Location"))
		var cookie *http.Cookie
		for _, c := range res.Cookies() {
			if c.Name == sessionCookie {
				cookie = c
			}
		}
		require.NotNil(t, cookie)
		require.True(t, cookie.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
		require.Equal(t, secure, cookie.Secure)
		require.Equal(t, "/console/", cookie.Path)
		require.Len(t, cookie.Value, 43, "32 random bytes")

		if !secure { // a Secure cookie is not sent back over plain HTTP by the jar
			code, body = hGet(t, cl, base+"/lanes")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, body, `href="/console/parked"`)
			// An open redirect is refused: next must be a path of the console.
			csrf = hCSRF(t, cl, base+"/login")
			res, err = cl.PostForm(base+"/login", url.Values{"csrf": {csrf}, "name": {"alice"}, "password": {"alice-pw"}, "next": {"//evil.example/"}})
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, "/console/", res.Header.Get("Location"))
			lcsrf := hCSRF(t, cl, base+"/")
			code, _ = hPost(t, cl, base+"/logout", url.Values{"csrf": {"nope"}})
			require.Equal(t, http.StatusForbidden, code)
			res, err = cl.PostForm(base+"/logout", url.Values{"csrf": {lcsrf}})
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusSeeOther, res.StatusCode)
			res, err = cl.Get(base + "/lanes")
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusSeeOther, res.StatusCode, "logged out")
		}
	}
}

// TestConsoleLoginRateLimit: the sixth failed login of a client address within a minute is
// refused with 429, even with the right password, while another address may still log in;
// after the minute it may try again.
func TestConsoleLoginRateLimit(t *testing.T) {
	db := hSQLite(t)
	c, err := New(t.Context(), db, &Options{Auth: hAuth(t), Logger: discard()})
	require.NoError(t, err)
	defer c.Close()
	now := time.Now()
	c.now = func() time.Time { return now }
	login := func(addr, password string) int {
		w := httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/login", nil))
		var tok string
		for _, ck := range w.Result().Cookies() {
			if ck.Name == loginCookie {
				tok = ck.Value
			}
		}
		r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"csrf": {tok}, "name": {"alice"}, "password": {password}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(&http.Cookie{Name: loginCookie, Value: tok})
		r.RemoteAddr = addr + ":40000"
		w = httptest.NewRecorder()
		c.ServeHTTP(w, r)
		return w.Code
	}
	for range DefaultLoginFailures {
		require.Equal(t, http.StatusUnauthorized, login("192.0.2.1", "wrong"))
	}
	require.Equal(t, http.StatusTooManyRequests, login("192.0.2.1", "alice-pw"))
	require.Equal(t, http.StatusTooManyRequests, login("192.0.2.1", "wrong"))
	require.Equal(t, http.StatusSeeOther, login("192.0.2.2", "alice-pw"), "another address")
	now = now.Add(time.Minute)
	require.Equal(t, http.StatusSeeOther, login("192.0.2.1", "alice-pw"), "a minute later")
}

// TestConsoleSecurityHeaders: every response (pages, fragments, static files, redirects,
// refusals, the not found) carries the CSP and the other security headers.
func TestConsoleSecurityHeaders(t *testing.T) {
	db := hSQLite(t)
	hSeed(t, db)
	_, srv := hServe(t, db, &Options{Auth: hAuth(t)})
	cl := hClient(t)
	check := func(res *http.Response, what string) {
		t.Helper()
		res.Body.Close()
		require.Equal(t, "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'", res.Header.Get("Content-Security-Policy"), what)
		require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"), what)
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), what)
		require.Equal(t, "no-referrer", res.Header.Get("Referrer-Policy"), what)
	}
	codes := map[int]bool{}
	for _, p := range []string{"/", "/lanes", "/parked", "/replay", "/audit", "/login", "/fragment/overview", "/static/console.css", "/static/console.js", "/nope", "/static/nope"} {
		res, err := cl.Get(srv.URL + p)
		require.NoError(t, err)
		codes[res.StatusCode] = true
		check(res, "anonymous GET "+p)
	}
	res, err := cl.PostForm(srv.URL+"/parked/unpark", nil)
	require.NoError(t, err)
	codes[res.StatusCode] = true
	check(res, "anonymous POST")
	hLogin(t, cl, srv.URL, "bob", "bob-pw")
	for _, p := range []string{"/", "/lanes", "/parked", "/replay", "/audit", "/fragment/lanes"} {
		res, err := cl.Get(srv.URL + p)
		require.NoError(t, err)
		codes[res.StatusCode] = true
		check(res, "viewer GET "+p)
	}
	res, err = cl.PostForm(srv.URL+"/replay", url.Values{"csrf": {hCSRF(t, cl, srv.URL+"/")}})
	require.NoError(t, err)
	codes[res.StatusCode] = true
	check(res, "viewer POST")
	require.Equal(t, map[int]bool{200: true, 303: true, 401: true, 403: true, 404: true}, codes)
}

// TestConsoleAnonymousOnlyOnLoopback: with no auth, anonymous reading needs a loopback
// listener; a request that came in on another address is sent to the login page.
func TestConsoleAnonymousOnlyOnLoopback(t *testing.T) {
	db := hSQLite(t)
	c, err := New(t.Context(), db, &Options{Logger: discard()})
	require.NoError(t, err)
	defer c.Close()
	for addr, want := range map[string]int{"127.0.0.1:8080": http.StatusOK, "[::1]:8080": http.StatusOK, "192.0.2.7:8080": http.StatusSeeOther} {
		r := httptest.NewRequest(http.MethodGet, "/lanes", nil)
		host, port, _ := strings.Cut(strings.Trim(strings.Replace(addr, "]:", "|", 1), "["), "|")
		if port == "" {
			host, port, _ = strings.Cut(addr, ":")
		}
		p, _ := strconv.Atoi(port)
		r = r.WithContext(withLocalAddr(r, host, p))
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		require.Equal(t, want, w.Code, addr)
	}
}

// TestConsoleCheckListen: beyond loopback needs a user or a token.
func TestConsoleCheckListen(t *testing.T) {
	withUser := Auth{Users: []User{{Name: "a"}}}
	withToken := Auth{Tokens: []Token{{Name: "t"}}}
	for _, c := range []struct {
		addr string
		auth Auth
		open bool
	}{
		{"127.0.0.1:8080", Auth{}, false}, {"localhost:8080", Auth{}, false}, {"[::1]:8080", Auth{}, false}, {"127.0.0.2:0", Auth{}, false},
		{":8080", Auth{}, true}, {"0.0.0.0:8080", Auth{}, true}, {"[::]:8080", Auth{}, true}, {"192.0.2.1:8080", Auth{}, true}, {"console.internal:8080", Auth{}, true},
		{":8080", withUser, false}, {"0.0.0.0:8080", withToken, false},
	} {
		err := CheckListen(c.addr, c.auth)
		if c.open {
			require.ErrorIs(t, err, ErrOpenListen, c.addr)
			require.Contains(t, err.Error(), c.addr)
		} else {
			require.NoError(t, err, c.addr)
		}
	}
	err := CheckListen("8080", Auth{})
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrOpenListen))
}

// TestConsoleLoadAuth: a valid file loads; unknown keys, a second document and every Validate
// problem are refused, one line per problem naming its key.
func TestConsoleLoadAuth(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	hash := hHash(t, "pw")
	t.Setenv("CONSOLE_TEST_TOKEN", "env-token-0123456789abcdef")
	a, err := LoadAuth(write("ok.yaml", "users:\n  - name: alice\n    role: operator\n    password_hash: '"+hash+"'\ntokens:\n  - name: ci\n    role: viewer\n    token_env: CONSOLE_TEST_TOKEN\n"))
	require.NoError(t, err)
	require.Equal(t, Auth{Users: []User{{Name: "alice", Role: RoleOperator, PasswordHash: hash}}, Tokens: []Token{{Name: "ci", Role: RoleViewer, TokenEnv: "CONSOLE_TEST_TOKEN"}}}, a)
	p, ok := newAuthn(a).bearer("env-token-0123456789abcdef")
	require.True(t, ok)
	require.Equal(t, principal{name: "ci", role: RoleViewer}, p)
	_, ok = newAuthn(a).bearer("env-token-0123456789abcdeX")
	require.False(t, ok)

	for name, c := range map[string]struct{ text, want string }{
		"unknown": {"users:\n  - name: a\n    role: operator\n    password: x\n", "field password not found"},
		"typo":    {"user: []\n", "field user not found"},
		"second":  {"users: []\n---\nusers: []\n", "a second YAML document"},
		"syntax":  {"users: [\n", "did not find expected"},
	} {
		_, err := LoadAuth(write(name+".yaml", c.text))
		require.ErrorIs(t, err, ErrAuthFile, name)
		require.Contains(t, err.Error(), c.want, name)
	}
	_, err = LoadAuth(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, ErrAuthFile)
	require.ErrorIs(t, err, os.ErrNotExist)

	low, err := bcryptHash("pw", 4)
	require.NoError(t, err)
	t.Setenv("CONSOLE_TEST_EMPTY", "")
	bad := Auth{
		Users: []User{{Name: "", Role: "admin", PasswordHash: ""}, {Name: "a", Role: RoleViewer, PasswordHash: "plain"}, {Name: "a", Role: RoleOperator, PasswordHash: low}, {Name: " b", Role: RoleOperator, PasswordHash: hash}},
		Tokens: []Token{{Name: "t1", Role: RoleViewer}, {Name: "t2", Role: RoleViewer, Token: "x", TokenEnv: "Y"}, {Name: "t3", Role: RoleOperator, Token: "short"},
			{Name: "t4", Role: RoleOperator, TokenEnv: "CONSOLE_TEST_EMPTY"}, {Name: "t5", Role: RoleViewer, Token: "same-token-0123456789"}, {Name: "t6", Role: RoleViewer, Token: "same-token-0123456789"},
			{Name: "t7", Role: RoleViewer, Token: "has space 0123456789"}},
	}
	require.Equal(t, []string{
		"users[0].name: is required (the name the audit log records)",
		`users[0].role: want viewer or operator, got "admin"`,
		`users[0].password_hash: is required: a bcrypt hash (htpasswd -bnBC 10 "" PASSWORD | tr -d ':\n')`,
		`users[1].password_hash: is not a bcrypt hash ($2a$/$2b$/$2y$...): crypto/bcrypt: hashedSecret too short to be a bcrypted password; make one with htpasswd -bnBC 10 "" PASSWORD | tr -d ':\n'`,
		`users[2].name: "a" is already the name of users[1]: each user and token needs its own name`,
		"users[2].password_hash: bcrypt cost 4 is too low: use at least 10",
		`users[3].name: must be at most 100 characters without surrounding spaces or control characters, got " b"`,
		"tokens[0]: give token or token_env (the environment variable holding the token)",
		"tokens[1]: give token or token_env, not both",
		"tokens[2].token: the token must be at least 16 characters (openssl rand -hex 32 makes one)",
		"tokens[3].token_env: $CONSOLE_TEST_EMPTY is empty or unset: export the token in it",
		"tokens[5].token: the same token as tokens[4]: each client needs its own",
		"tokens[6].token: the token must not contain spaces or line breaks",
	}, bad.Validate())
	_, err = New(t.Context(), hSQLite(t), &Options{Auth: bad})
	var oe *core.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "Auth", oe.Field)
}

// TestConsoleOptions: bad options are *core.OptionError naming the field.
func TestConsoleOptions(t *testing.T) {
	db := hSQLite(t)
	for field, o := range map[string]Options{
		"SampleInterval": {SampleInterval: time.Millisecond}, "SessionTTL": {SessionTTL: time.Second}, "LoginFailures": {LoginFailures: -1},
		"BasePath": {BasePath: "console"}, "PrometheusURL": {PrometheusURL: "ftp://x"},
	} {
		_, err := New(t.Context(), db, &o)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, field)
		require.Equal(t, field, oe.Field)
	}
	_, err := New(t.Context(), nil, nil)
	var oe *core.OptionError
	require.ErrorAs(t, err, &oe)
	c, err := New(t.Context(), db, nil)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "twice")
}

// TestConsoleAuditShowsCLI: a row the CLI wrote (no tool argument) shows tool cli; the filter
// by tool tells the two apart.
func TestConsoleAuditShowsCLI(t *testing.T) {
	db := hSQLite(t)
	hSeed(t, db)
	op, err := core.NewOperator(db.Store, nil)
	require.NoError(t, err)
	_, err = op.Unpark(t.Context(), []string{"a"}, &driver.AuditEntry{Actor: "carol", Command: "unpark", Arguments: `{"all":false,"keys":["a"]}`})
	require.NoError(t, err)
	_, srv := hServe(t, db, nil)
	code, body := hGet(t, hClient(t), srv.URL+"/audit")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<td class="actor">carol</td><td class="tool">cli</td><td>unpark</td>`)
	_, body = hGet(t, hClient(t), srv.URL+"/audit?tool=console")
	require.Contains(t, body, "No audit rows match.")
}

// TestConsolePrometheusCharts: with PrometheusURL the charts are drawn from its query_range
// answers; when it fails, from the console's own samples, saying why.
func TestConsolePrometheusCharts(t *testing.T) {
	db := hSQLite(t)
	hSeed(t, db)
	var queries []string
	var fail bool
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/api/v1/query_range", r.URL.Path)
		queries = append(queries, r.URL.Query().Get("query"))
		if fail {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"parse error"}`))
			return
		}
		end, _ := strconv.ParseInt(r.URL.Query().Get("end"), 10, 64)
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[` +
			strconv.FormatInt(end-1800, 10) + `,"40"],[` + strconv.FormatInt(end, 10) + `.5,"1234"]]}]}}`))
	}))
	defer prom.Close()
	_, srv := hServe(t, db, &Options{PrometheusURL: prom.URL})
	code, body := hGet(t, hClient(t), srv.URL+"/")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []string{promBacklogQuery, promRateQuery}, queries)
	require.Contains(t, body, `data-source="prometheus"`)
	require.Contains(t, body, "Backlog (pending events): latest 1234, highest 1234")
	require.Regexp(t, `points="(29\d|300)\.\d,114\.2 (599|600)\.\d,2\.0"`, body, "40 half an hour ago, 1234 now")
	fail = true
	code, body = hGet(t, hClient(t), srv.URL+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `data-source="console"`)
	require.Contains(t, body, "Prometheus could not be read: prometheus: max(outboxkit_outbox_pending): parse error")
}

// TestConsoleParkedPages: 120 parked keys are shown 50 a page, in order, with a next link
// until the last page; "unpark all" counts all 120 and a search narrows the count.
func TestConsoleParkedPages(t *testing.T) {
	db := hSQLite(t)
	ctx := t.Context()
	var evs []core.Event
	for i := range 120 {
		dest := "orders"
		if i%3 == 0 {
			dest = "billing"
		}
		evs = append(evs, core.Event{AggregateType: "order", AggregateID: strconv.Itoa(i), Type: "order.created", PartitionKey: "k" + strconv.Itoa(1000+i), Destination: dest, Payload: []byte(`{}`)})
	}
	hWrite(t, db.Store, evs...)
	pub, err := db.Store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "w1"})
	require.NoError(t, err)
	leases, err := db.Store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "w1", Max: 4, TTL: time.Hour})
	require.NoError(t, err)
	recs, err := db.Store.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, recs, 120)
	p := driver.SettleParams{Leases: leases}
	for _, r := range recs {
		p.Failed = append(p.Failed, driver.Failure{Seq: r.Seq, Lane: r.Lane, Error: "boom " + r.Destination, Park: true})
	}
	require.NoError(t, db.Store.Settle(ctx, p))

	_, srv := hServe(t, db, &Options{Auth: hAuth(t)})
	cl := hClient(t)
	hLogin(t, cl, srv.URL, "alice", "alice-pw")
	next := regexp.MustCompile(`href="/parked\?after=(\d+)" rel="next"`)
	keys := regexp.MustCompile(`<td><code>(k\d+)</code></td>`)
	var seen []string
	path := "/parked"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 3)
		code, body := hGet(t, cl, srv.URL+path)
		require.Equal(t, http.StatusOK, code)
		got := keys.FindAllStringSubmatch(body, -1)
		require.LessOrEqual(t, len(got), parkedPage)
		for _, m := range got {
			seen = append(seen, m[1])
		}
		m := next.FindStringSubmatch(body)
		if m == nil {
			require.Len(t, got, 20, "the last page")
			break
		}
		require.Len(t, got, parkedPage)
		path = "/parked?after=" + m[1]
	}
	require.Len(t, seen, 120)
	for i, k := range seen {
		require.Equal(t, "k"+strconv.Itoa(1000+i), k, "in order, each once")
	}
	csrf := hCSRF(t, cl, srv.URL+"/parked")
	code, body := hPost(t, cl, srv.URL+"/parked/unpark", url.Values{"csrf": {csrf}, "dry_run": {"1"}, "all": {"1"}})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<strong>120</strong> partition keys would be unparked (120 parked events)`)
	hidden := regexp.MustCompile(`<input type="hidden" name="key" value="(k\d+)">`)
	require.Len(t, hidden.FindAllStringSubmatch(body, -1), 120)
	code, body = hPost(t, cl, srv.URL+"/parked/unpark", url.Values{"csrf": {csrf}, "dry_run": {"1"}, "all": {"1"}, "error": {"BOOM billing"}})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<strong>40</strong> partition keys would be unparked (40 parked events)`)
	var chosen []string
	for _, m := range hidden.FindAllStringSubmatch(body, -1) {
		chosen = append(chosen, m[1])
	}
	require.Len(t, chosen, 40)
	code, body = hPost(t, cl, srv.URL+"/parked/unpark", url.Values{"csrf": {csrf}, "confirm": {"1"}, "all": {"1"}, "error": {"BOOM billing"}, "key": chosen})
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Unparked 40 records of 40 keys")
	st, err := db.Store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(80), st.Parked)
	audit := hAudit(t, db)
	require.Len(t, audit, 1)
	require.Contains(t, audit[0].Arguments, `"all":true`)
	require.Contains(t, audit[0].Arguments, `"filter":{"error":"BOOM billing"}`)
}

// TestConsoleRing: the ring keeps the last hour's samples at the interval (oldest dropped),
// and the chart places them by time, the highest at the top.
func TestConsoleRing(t *testing.T) {
	r := newRing(time.Minute)
	require.Equal(t, 61, r.cap)
	now := time.Now()
	for i := range 100 {
		r.add(sample{at: now.Add(time.Duration(i-99) * time.Minute), pending: int64(i)})
	}
	all := r.since(time.Time{})
	require.Len(t, all, 61)
	require.Equal(t, int64(39), all[0].pending)
	require.Len(t, r.since(now.Add(-30*time.Minute)), 31)
	c := charts(r.since(now.Add(-chartWindow)), now)
	require.Len(t, c, 2)
	pts := strings.Fields(c[0].Points)
	require.Len(t, pts, 61)
	require.Equal(t, "0.0,72.3", pts[0], "an hour ago, 39 of 99: 118 - 116*39/99")
	require.Equal(t, "600.0,2.0", pts[60], "now, the highest")
	require.Equal(t, "99", c[0].Max)
	require.Equal(t, "Backlog (pending events): no samples yet", charts(nil, now)[0].Summary)
	require.Equal(t, 3600, newRing(time.Second).cap, "at most an hour of seconds")
}
