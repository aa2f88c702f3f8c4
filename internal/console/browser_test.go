package console_test

// The console in a real browser (headless Chromium through internal/browsertest): every page
// renders without a console error on each database; an operator logs in and unparks a
// selection after a dry run, which the database and the audit page then show with the
// operator's name; a viewer's, an anonymous and a CSRF-less POST are refused with nothing
// changed; the lane grid follows a relay that takes the lanes while the page stays open.
//
// Screenshots of each page are test artefacts ($OUTBOXKIT_ARTEFACTS, else a temporary
// directory: the log says where). OUTBOXKIT_UPDATE_DOCS_IMG=1 also copies one SQLite shot of
// each page into docs/img/console-<page>.png, the screenshots of docs/console.md (their
// timestamps change every run, so only on request).

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/browsertest"
	"github.com/outboxkit/outbox/internal/console"
	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/internal/testkit"
)

const base = "/console"

// The users of the tests: an operator and a viewer.
const (
	operatorName, operatorPassword = "olive", "olive-password-1"
	viewerName, viewerPassword     = "victor", "victor-password-1"
)

func browserAuth(t *testing.T) console.Auth {
	t.Helper()
	h := func(pw string) string {
		b, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost+6) // 10: the least Validate takes
		require.NoError(t, err)
		return string(b)
	}
	return console.Auth{Users: []console.User{
		{Name: operatorName, Role: console.RoleOperator, PasswordHash: h(operatorPassword)},
		{Name: viewerName, Role: console.RoleViewer, PasswordHash: h(viewerPassword)},
	}}
}

// browserDB is an empty database of one driver for the browser tests.
type browserDB struct {
	name string
	cfg  func(t *testing.T) opendb.Config
}

var browserDBs = []browserDB{
	{"sqlite", func(t *testing.T) opendb.Config {
		return opendb.Config{Driver: "sqlite", DSN: filepath.Join(t.TempDir(), "outbox.db"), Lanes: 8}
	}},
	{"postgres", func(t *testing.T) opendb.Config {
		dsn := testkit.Need(t, testkit.PostgresDSN)
		schema := fmt.Sprintf("console_browser_%d", time.Now().UnixNano())
		admin, err := pgx.Connect(t.Context(), dsn)
		require.NoError(t, err)
		_, err = admin.Exec(t.Context(), "CREATE SCHEMA "+schema)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			_ = admin.Close(context.Background())
		})
		return opendb.Config{Driver: "postgres", DSN: dsn, Schema: schema, Lanes: 8}
	}},
	{"mysql", func(t *testing.T) opendb.Config {
		dsn := testkit.Need(t, testkit.MySQLDSN)
		cfg, err := gomysql.ParseDSN(dsn)
		require.NoError(t, err)
		admin, err := sql.Open("mysql", dsn)
		require.NoError(t, err)
		name := fmt.Sprintf("console_browser_%d", time.Now().UnixNano())
		_, err = admin.ExecContext(t.Context(), "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`")
			_ = admin.Close()
		})
		c := cfg.Clone()
		c.DBName, c.ParseTime = name, true
		return opendb.Config{Driver: "mysql", DSN: c.FormatDSN(), Lanes: 8}
	}},
}

// The seeded outbox: keys bad-1 (two events: the first parked, the second blocked behind it),
// bad-2 and bad-3 (one parked event each), good-1 and good-2 (published). No lane is held.
var parkedKeys = []string{"bad-1", "bad-2", "bad-3"}

const parkError = "rejected: schema order.changed/v2 unknown"

func seed(t *testing.T, cfg opendb.Config) *opendb.DB {
	t.Helper()
	ctx := t.Context()
	cfg.Logger = slog.New(slog.DiscardHandler)
	db, err := opendb.Open(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	require.NoError(t, db.Store.Migrate(ctx))
	ids := writeEvents(t, db.Store, "bad-1", "bad-1", "bad-2", "bad-3", "good-1", "good-2")
	store := db.Store
	_, err = store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "seed"})
	require.NoError(t, err)
	pub, err := store.Generation(ctx)
	require.NoError(t, err)
	leases, err := store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "seed", Max: 1000, TTL: time.Minute})
	require.NoError(t, err)
	recs, err := store.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 100})
	require.NoError(t, err)
	require.Len(t, recs, len(ids))
	p := driver.SettleParams{Leases: leases}
	for _, r := range recs {
		switch {
		case r.ID == ids[1]: // bad-1's second event: left pending, blocked behind the first
		case strings.HasPrefix(r.PartitionKey, "bad-"):
			p.Failed = append(p.Failed, driver.Failure{Seq: r.Seq, Lane: r.Lane, Error: parkError, Park: true})
		default:
			p.Published = append(p.Published, r.Seq)
		}
	}
	require.NoError(t, store.Settle(ctx, p))
	require.NoError(t, store.ReleaseLanes(ctx, leases))
	require.Equal(t, parkedKeys, parkedNow(t, db))
	return db
}

// writeEvents writes one event per key through the adapter's own transaction type and returns
// their IDs in order.
func writeEvents(t *testing.T, store opendb.Store, keys ...string) []string {
	t.Helper()
	ctx := t.Context()
	var write func(ctx context.Context, key string) ([]string, error)
	switch s := store.(type) {
	case *postgres.Store[pgx.Tx]:
		ob, err := core.NewOutbox(ctx, s, nil)
		require.NoError(t, err)
		write = testkit.Writer(s, ob, 1, []byte(`{"total":42}`))
	case *mysql.Store:
		ob, err := core.NewOutbox(ctx, s, nil)
		require.NoError(t, err)
		write = testkit.Writer(s, ob, 1, []byte(`{"total":42}`))
	case *sqlite.Store:
		ob, err := core.NewOutbox(ctx, s, nil)
		require.NoError(t, err)
		write = testkit.Writer(s, ob, 1, []byte(`{"total":42}`))
	default:
		t.Fatalf("no writer for %T", store)
	}
	var ids []string
	for _, k := range keys {
		got, err := write(ctx, k)
		require.NoError(t, err)
		ids = append(ids, got...)
	}
	return ids
}

// parkedNow is the keys with a parked event, read from the database (not through the console).
func parkedNow(t *testing.T, db *opendb.DB) []string {
	t.Helper()
	keys, err := db.Store.ParkedKeys(t.Context())
	require.NoError(t, err)
	slices.Sort(keys)
	return keys
}

// serve serves the console of db under /console on a loopback test server.
func serve(t *testing.T, db *opendb.DB, auth console.Auth) string {
	t.Helper()
	c, err := console.New(t.Context(), db, &console.Options{Auth: auth, BasePath: base, SampleInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(func() {
		srv.Close()
		_ = c.Close()
	})
	return srv.URL + base
}

// pageSel is the selector of the main element of page name.
func pageSel(name string) chromedp.CSS { return chromedp.CSS(`main#page[data-page="` + name + `"]`) }

// login logs p in through the form and waits for the page it goes on to (next).
func login(t *testing.T, p *browsertest.Page, url, name, password, next string) {
	t.Helper()
	p.Do(chromedp.Navigate(url+"/login?next="+base+"/"+next), chromedp.WaitVisible(pageSel("login")),
		chromedp.SendKeys(chromedp.CSS("#l-name"), name), chromedp.SendKeys(chromedp.CSS("#l-password"), password),
		chromedp.Submit(chromedp.CSS("#login-form")))
	if next == "" {
		next = "overview"
	}
	p.Do(chromedp.WaitVisible(pageSel(next)))
	who, err := browsertest.Run(p, chromedp.Text(chromedp.CSS("header .who span")))
	require.NoError(t, err)
	require.Contains(t, who, name, "the header names who is logged in")
}

// The pages and the path of each, as the nav links them.
var pages = []struct{ name, path string }{
	{"overview", "/"}, {"lanes", "/lanes"}, {"parked", "/parked"}, {"replay", "/replay"}, {"audit", "/audit"},
}

// Every page renders (its main#page) with no console error, no CSP refusal and no failed
// request, on each database.
func TestBrowserPagesRenderOnEveryDatabase(t *testing.T) {
	b := browsertest.Start(t, nil)
	auth := browserAuth(t)
	for _, d := range browserDBs {
		t.Run(d.name, func(t *testing.T) {
			db := seed(t, d.cfg(t))
			url := serve(t, db, auth)
			p := b.NewPage(t)
			p.Do(chromedp.Navigate(url+"/login"), chromedp.WaitVisible(pageSel("login")))
			shot(t, p, d.name+"-login", docIf(d.name == "sqlite", "login"))
			login(t, p, url, operatorName, operatorPassword, "")
			for _, pg := range pages {
				p.Do(chromedp.Navigate(url+pg.path), chromedp.WaitVisible(pageSel(pg.name)))
				h1, err := browsertest.Run(p, chromedp.Text(chromedp.CSS("main#page h1")))
				require.NoError(t, err)
				require.NotEmpty(t, h1, "%s has a heading", pg.name)
				if pg.name == "parked" {
					text, err := browsertest.Run(p, chromedp.Text(chromedp.CSS("#parked-table")))
					require.NoError(t, err)
					for _, k := range parkedKeys {
						require.Contains(t, text, k)
					}
					require.Contains(t, text, parkError)
				}
				// The docs' lanes and audit come from the tests below, with a relay's lanes and an
				// operator's action in them.
				shot(t, p, d.name+"-"+pg.name, docIf(d.name == "sqlite" && pg.name != "lanes" && pg.name != "audit", pg.name))
			}
			p.RequireNoProblems()
		})
	}
}

// An operator logs in, selects two parked keys, sees the dry run's count with nothing changed,
// confirms, and the database and the audit page show the unpark with the operator's name.
// Then the refusals: a viewer's POST (403), an anonymous POST (401) and the operator's POST
// without or with a wrong csrf field (403) change nothing.
func TestBrowserOperatorUnparksAndOthersAreRefused(t *testing.T) {
	b := browsertest.Start(t, nil)
	db := seed(t, browserDBs[0].cfg(t))
	url := serve(t, db, browserAuth(t))

	op := b.NewPage(t)
	login(t, op, url, operatorName, operatorPassword, "parked")
	op.Do(chromedp.Click(chromedp.CSS(`#unpark-selected input[name="key"][value="bad-1"]`)),
		chromedp.Click(chromedp.CSS(`#unpark-selected input[name="key"][value="bad-2"]`)),
		chromedp.Click(chromedp.CSS(`#unpark-selected button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#unpark-count")))
	dry, err := browsertest.Run(op, chromedp.Text(chromedp.CSS("#unpark-count")))
	require.NoError(t, err)
	require.Contains(t, dry, "2 partition keys would be unparked", dry)
	shot(t, op, "sqlite-unpark", "unpark")
	require.Equal(t, parkedKeys, parkedNow(t, db), "the dry run changed nothing")

	op.Do(chromedp.Click(chromedp.CSS(`#unpark-confirm button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#result")))
	result, err := browsertest.Run(op, chromedp.Text(chromedp.CSS("#result")))
	require.NoError(t, err)
	t.Logf("result: %s", result)
	shot(t, op, "sqlite-result", "")
	require.Equal(t, []string{"bad-3"}, parkedNow(t, db), "bad-1 and bad-2 unparked, bad-3 not")

	audit, err := db.Store.ListAudit(t.Context(), driver.AuditListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, "unpark", audit[0].Command)
	require.Contains(t, audit[0].Actor, operatorName)
	require.Equal(t, 2, int(audit[0].Rows), "the two keys' parked events")

	op.Do(chromedp.Navigate(url+"/audit"), chromedp.WaitVisible(pageSel("audit")))
	row, err := browsertest.Run(op, chromedp.Text(chromedp.CSS("#audit-table tbody tr")))
	require.NoError(t, err)
	require.Contains(t, row, operatorName)
	require.Contains(t, row, "unpark")
	require.Contains(t, row, "console")
	shot(t, op, "sqlite-audit", "audit")
	op.RequireNoProblems()

	// post sends the unpark of bad-3 from the page's own JavaScript (the session's cookies go
	// with it), with the page's csrf field when csrf is "page", and returns the status.
	post := func(p *browsertest.Page, csrf string) int {
		t.Helper()
		status, err := browsertest.Run(p, chromedp.Evaluate[int](fmt.Sprintf(`(async () => {
			const f = new URLSearchParams({key: "bad-3", confirm: "1"});
			const csrf = %q;
			if (csrf === "page") { f.set("csrf", document.querySelector('input[name="csrf"]').value); }
			else if (csrf !== "") { f.set("csrf", csrf); }
			const r = await fetch(%q, {method: "POST", body: f});
			return r.status;
		})()`, csrf, base+"/parked/unpark"), chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		return status
	}
	// refused requires the page's problems to be exactly the refused request (its status, and
	// the browser's log line about it), and forgets them.
	refused := func(p *browsertest.Page, status int) {
		t.Helper()
		for _, pr := range p.TakeProblems() {
			switch pr.Kind {
			case "http":
				require.True(t, strings.HasPrefix(pr.Text, fmt.Sprint(status)), "%v", pr)
				require.True(t, strings.HasSuffix(pr.URL, base+"/parked/unpark"), "%v", pr)
			case "log":
				require.Contains(t, pr.Text, fmt.Sprint(status), "%v", pr)
			default:
				t.Fatalf("unexpected problem %v", pr)
			}
		}
	}
	unchanged := func() {
		t.Helper()
		require.Equal(t, []string{"bad-3"}, parkedNow(t, db), "nothing unparked")
		audit, err := db.Store.ListAudit(t.Context(), driver.AuditListParams{Limit: 10})
		require.NoError(t, err)
		require.Len(t, audit, 1, "nothing audited")
	}

	viewer := b.NewPage(t)
	login(t, viewer, url, viewerName, viewerPassword, "parked")
	n, err := browsertest.Run(viewer, chromedp.Evaluate[int](`document.querySelectorAll('input[name="key"], #unpark-all, #unpark-selected button').length`))
	require.NoError(t, err)
	require.Zero(t, n, "a viewer is offered no unpark control")
	require.Equal(t, 403, post(viewer, "page"), "a viewer's POST, with its valid csrf")
	refused(viewer, 403)
	unchanged()

	anonymous := b.NewPage(t)
	anonymous.Do(chromedp.Navigate(url+"/login"), chromedp.WaitVisible(pageSel("login")))
	require.Equal(t, 401, post(anonymous, "page"), "an anonymous POST (with the login form's csrf)")
	refused(anonymous, 401)
	unchanged()

	require.Equal(t, 403, post(op, ""), "the operator's POST without the csrf field")
	refused(op, 403)
	require.Equal(t, 403, post(op, "not-the-session-token"), "the operator's POST with a wrong csrf")
	refused(op, 403)
	unchanged()
	// The safety check of the above: the same POST with the page's csrf is the operator's, and
	// goes through.
	require.Equal(t, 200, post(op, "page"))
	require.Empty(t, parkedNow(t, db))
	op.RequireNoProblems()
}

// The lane grid follows a relay that starts after the page loaded: the page's script refreshes
// it (no reload) until the relay's owner shows.
func TestBrowserLaneGridUpdatesLive(t *testing.T) {
	b := browsertest.Start(t, nil)
	db := seed(t, browserDBs[0].cfg(t))
	url := serve(t, db, browserAuth(t))
	p := b.NewPage(t)
	login(t, p, url, viewerName, viewerPassword, "lanes")
	const owner = "browser-test-relay"
	summary, err := browsertest.Run(p, chromedp.Text(chromedp.CSS("#lane-summary")))
	require.NoError(t, err)
	require.Contains(t, summary, "0 held", "no lane is held before the relay starts")
	// A mark on the window: a reload would drop it.
	p.Do(chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))

	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error { return make([]error, len(msgs)) })
	r, err := core.NewRelay(db.Store, sink, core.StaticRouter{Default: "q"}, &core.RelayOptions{Owner: owner,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = r.Shutdown(sctx)
		cancel()
		<-done
	})

	_, err = browsertest.Run(p, chromedp.Poll[bool](`document.querySelector("#lane-grid").textContent.includes(`+fmt.Sprintf("%q", owner)+`)`,
		chromedp.WithPollingTimeout(25*time.Second), chromedp.WithPollingInterval(200*time.Millisecond)))
	require.NoError(t, err, "the grid never showed the relay's lanes")
	still, err := browsertest.Run(p, chromedp.Evaluate[bool](`window.notReloaded === true`))
	require.NoError(t, err)
	require.True(t, still, "the grid changed without a reload")
	summary, err = browsertest.Run(p, chromedp.Text(chromedp.CSS("#lane-summary")))
	require.NoError(t, err)
	require.NotContains(t, summary, "0 held", summary)
	shot(t, p, "sqlite-lanes-live", "lanes")
	p.RequireNoProblems()
}

// shot saves the screenshot of p as name.png in the test's artefacts; with
// OUTBOXKIT_UPDATE_DOCS_IMG=1 it also copies it to docs/img/console-<doc>.png when doc is set.
func shot(t *testing.T, p *browsertest.Page, name, doc string) {
	t.Helper()
	path := p.Screenshot(name)
	if doc == "" || os.Getenv("OUTBOXKIT_UPDATE_DOCS_IMG") != "1" {
		return
	}
	png, err := os.ReadFile(path)
	require.NoError(t, err)
	dst := filepath.Join("..", "..", "docs", "img", "console-"+doc+".png")
	require.NoError(t, os.WriteFile(dst, png, 0o644))
	t.Logf("copied to %s", dst)
}

// docIf is doc when cond holds, else "".
func docIf(cond bool, doc string) string {
	if cond {
		return doc
	}
	return ""
}
