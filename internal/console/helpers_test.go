package console

// Test helpers of the console's tests (every name starts with h, so that browser_test.go, in
// the same package, can use them without a clash): a migrated outbox on each database
// (hBackends), seeded with parked, blocked, pending and published events (hSeed), a console
// server on it (hServe) and a client with a cookie jar (hClient, hLogin, hForm).

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/internal/testkit"
)

// hBackend is one database: open returns a migrated outbox of 4 lanes on a fresh schema
// (PostgreSQL), database (MySQL/MariaDB) or file (SQLite), closed at the test's end.
type hBackend struct {
	name string
	open func(t testing.TB) *opendb.DB
}

var hBackends = []hBackend{{"sqlite", hSQLite}, {"postgres", hPostgres}, {"mysql", hMySQL}}

func hSuffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func hOpen(t testing.TB, cfg opendb.Config) *opendb.DB {
	t.Helper()
	if cfg.Lanes == 0 {
		cfg.Lanes = 4
	} else if cfg.Lanes < 0 {
		cfg.Lanes = 0 // the adapter's default
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	db, err := opendb.Open(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	require.NoError(t, db.Store.Migrate(t.Context()))
	return db
}

func hSQLite(t testing.TB) *opendb.DB {
	return hOpen(t, opendb.Config{Driver: "sqlite", DSN: filepath.Join(t.TempDir(), "outbox.db")})
}

func hPostgres(t testing.TB) *opendb.DB { return hPostgresLanes(4)(t) }

func hMySQL(t testing.TB) *opendb.DB { return hMySQLLanes(4)(t) }

// hSchemas is the PostgreSQL schema of each outbox hPostgresLanes opened.
var hSchemas sync.Map

// hSchemaOf is the PostgreSQL schema of db ("" for the other databases).
func hSchemaOf(db *opendb.DB) string {
	s, _ := hSchemas.Load(db)
	str, _ := s.(string)
	return str
}

// hPostgresLanes opens outboxes of lanes lanes (0: the adapter's default).
func hPostgresLanes(lanes int) func(t testing.TB) *opendb.DB {
	return func(t testing.TB) *opendb.DB { return hPostgresOf(t, lanes) }
}

func hMySQLLanes(lanes int) func(t testing.TB) *opendb.DB {
	return func(t testing.TB) *opendb.DB { return hMySQLOf(t, lanes) }
}

func hLanesCfg(lanes int) int {
	if lanes == 0 {
		return -1
	}
	return lanes
}

func hPostgresOf(t testing.TB, lanes int) *opendb.DB {
	dsn := testkit.Need(t, testkit.PostgresDSN)
	schema := "console_" + hSuffix()
	admin, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	_, err = admin.Exec(t.Context(), "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close(context.Background())
	})
	db := hOpen(t, opendb.Config{Driver: "postgres", DSN: dsn, Schema: schema, Lanes: hLanesCfg(lanes)})
	hSchemas.Store(db, schema)
	return db
}

func hMySQLOf(t testing.TB, lanes int) *opendb.DB {
	dsn := testkit.Need(t, testkit.MySQLDSN)
	cfg, err := gomysql.ParseDSN(dsn)
	require.NoError(t, err)
	admin, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	name := "console_" + hSuffix()
	_, err = admin.ExecContext(t.Context(), "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`")
		_ = admin.Close()
	})
	c := cfg.Clone()
	c.DBName, c.ParseTime = name, true
	return hOpen(t, opendb.Config{Driver: "mysql", DSN: c.FormatDSN(), Lanes: hLanesCfg(lanes)})
}

// hWrite writes evs in one transaction of the adapter's own type through core.NewOutbox, and
// returns their IDs.
func hWrite(t testing.TB, store opendb.Store, evs ...core.Event) []string {
	t.Helper()
	var ids []string
	var err error
	switch s := store.(type) {
	case *postgres.Store[pgx.Tx]:
		ids, err = hWriteIn(t.Context(), s, s, evs)
	case *mysql.Store:
		ids, err = hWriteIn(t.Context(), s, s, evs)
	case *sqlite.Store:
		ids, err = hWriteIn(t.Context(), s, s, evs)
	default:
		t.Fatalf("no writer for %T", store)
	}
	require.NoError(t, err)
	return ids
}

func hWriteIn[TTx any](ctx context.Context, tr driver.Transactor[TTx], st driver.OutboxStore[TTx], evs []core.Event) ([]string, error) {
	ob, err := core.NewOutbox(ctx, st, nil)
	if err != nil {
		return nil, err
	}
	var ids []string
	err = tr.InTx(ctx, func(ctx context.Context, tx TTx) error {
		ids = nil
		recs, err := ob.Write(ctx, tx, evs...)
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		return err
	})
	return ids, err
}

// hSeeded is what hSeed wrote: keys a and c each have a parked event (errors "rejected
// schema" and "timeout talking to billing") and a pending one blocked behind it; key e's one
// event is parked ("rejected schema v2"); key b's one event is published; key d has one pending
// event. A relay w1 holds every lane. So: 3 pending, 3 parked, 2 blocked, 1 published.
type hSeeded struct {
	IDs        map[string][]string // per key, in write order
	Generation int64
}

func hSeed(t testing.TB, db *opendb.DB) hSeeded {
	t.Helper()
	ctx := t.Context()
	store := db.Store
	ev := func(key, typ, dest string) core.Event {
		return core.Event{AggregateType: "order", AggregateID: key, Type: typ, PartitionKey: key, Destination: dest,
			Payload: []byte(`{"order":"` + key + `"}`), Headers: map[string]string{"trace": "t-" + key}}
	}
	ids := hWrite(t, store, ev("a", "order.created", "orders"), ev("a", "order.paid", "orders"), ev("b", "order.created", "billing"),
		ev("c", "invoice.sent", "billing"), ev("c", "invoice.paid", "billing"), ev("d", "order.created", ""), ev("e", "order.created", "orders"))
	s := hSeeded{IDs: map[string][]string{"a": ids[0:2], "b": ids[2:3], "c": ids[3:5], "d": ids[5:6], "e": ids[6:7]}}
	pub, err := store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "w1"})
	require.NoError(t, err)
	s.Generation = pub.Generation
	leases, err := store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "w1", Max: 4, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, leases, 4)
	recs, err := store.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 100})
	require.NoError(t, err)
	p := driver.SettleParams{Leases: leases}
	for _, r := range recs {
		switch r.ID {
		case s.IDs["a"][0]:
			p.Failed = append(p.Failed, driver.Failure{Seq: r.Seq, Lane: r.Lane, Error: "rejected schema", Park: true})
		case s.IDs["c"][0]:
			p.Failed = append(p.Failed, driver.Failure{Seq: r.Seq, Lane: r.Lane, Error: "timeout talking to billing", Park: true})
		case s.IDs["e"][0]:
			p.Failed = append(p.Failed, driver.Failure{Seq: r.Seq, Lane: r.Lane, Error: "rejected schema v2", Park: true})
		case s.IDs["b"][0]:
			p.Published = append(p.Published, r.Seq)
		}
	}
	require.Len(t, p.Failed, 3)
	require.Len(t, p.Published, 1)
	require.NoError(t, store.Settle(ctx, p))
	return s
}

// hParkedKeys is the parked keys, sorted.
func hParkedKeys(t testing.TB, db *opendb.DB) []string {
	t.Helper()
	keys, err := db.Store.ParkedKeys(t.Context())
	require.NoError(t, err)
	slices.Sort(keys)
	return keys
}

// hAudit is the audit log, oldest first.
func hAudit(t testing.TB, db *opendb.DB) []core.AuditEntry {
	t.Helper()
	op, err := core.NewOperator(db.Store, nil)
	require.NoError(t, err)
	e, err := op.AuditLog(t.Context(), core.AuditListParams{Limit: 1000})
	require.NoError(t, err)
	return e
}

// hHash is a bcrypt hash of password (cost 10, the lowest Validate accepts).
func hHash(t testing.TB, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), 10)
	require.NoError(t, err)
	return string(h)
}

// hAuth has alice (operator, password "alice-pw"), bob (viewer, "bob-pw") and the tokens
// ci-op (operator) and ci-view (viewer).
func hAuth(t testing.TB) Auth {
	return Auth{
		Users: []User{{Name: "alice", Role: RoleOperator, PasswordHash: hHash(t, "alice-pw")}, {Name: "bob", Role: RoleViewer, PasswordHash: hHash(t, "bob-pw")}},
		Tokens: []Token{{Name: "ci-op", Role: RoleOperator, Token: "operator-token-0123456789"},
			{Name: "ci-view", Role: RoleViewer, Token: "viewer-token-0123456789"}},
	}
}

// hServe serves a console of db with opts on a loopback httptest server.
func hServe(t testing.TB, db *opendb.DB, opts *Options) (*Console, *httptest.Server) {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := New(t.Context(), db, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return c, srv
}

// hClient is a client with a cookie jar that does not follow redirects.
func hClient(t testing.TB) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// hGet returns the status and body of a GET.
func hGet(t testing.TB, cl *http.Client, u string) (int, string) {
	t.Helper()
	res, err := cl.Get(u)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// hPost posts the form and returns the status and body.
func hPost(t testing.TB, cl *http.Client, u string, form url.Values) (int, string) {
	t.Helper()
	res, err := cl.PostForm(u, form)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

var hCSRFField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// hCSRF is the csrf field of the first form of the page at u.
func hCSRF(t testing.TB, cl *http.Client, u string) string {
	t.Helper()
	code, body := hGet(t, cl, u)
	require.Equal(t, http.StatusOK, code, body)
	m := hCSRFField.FindStringSubmatch(body)
	require.NotNil(t, m, "no csrf field in %s", u)
	return m[1]
}

// hLogin logs cl in at the console at base (the server URL with its BasePath) as name.
func hLogin(t testing.TB, cl *http.Client, base, name, password string) {
	t.Helper()
	csrf := hCSRF(t, cl, base+"/login")
	res, err := cl.PostForm(base+"/login", url.Values{"csrf": {csrf}, "name": {name}, "password": {password}})
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, strings.TrimPrefix(base, hOrigin(base))+"/", res.Header.Get("Location"))
}

func hOrigin(u string) string {
	p, _ := url.Parse(u)
	return p.Scheme + "://" + p.Host
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func bcryptHash(password string, cost int) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	return string(h), err
}

// withLocalAddr is r's context as a server listening on host:port gives it.
func withLocalAddr(r *http.Request, host string, port int) context.Context {
	return context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP(host), Port: port})
}
