package readme

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/memory"
)

// quickStart is the README's "Quick start" block, whole: nothing in it is defined elsewhere.
func quickStart(ctx context.Context) error {
	// readme:begin
	// Open a SQLite file and create the outbox and inbox tables (embedded, idempotent migrations).
	db, err := sqlite.OpenDB(ctx, "app.db")
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlite.New(db, nil)
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, balance INTEGER);
		CREATE TABLE IF NOT EXISTS audit_log (event TEXT PRIMARY KEY)`); err != nil { // the application's tables
		return err
	}

	// Producer: the domain change and its event commit in ONE transaction, or neither does.
	ob, err := core.NewOutbox[*sql.Tx](ctx, store, nil)
	if err != nil {
		return err
	}
	err = store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO accounts VALUES ('a1', 10)`); err != nil {
			return err // the event is not written either
		}
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "account", AggregateID: "a1",
			Type: "account.opened", Destination: "accounts", Payload: []byte(`{"balance":10}`)})
		return err
	})
	if err != nil {
		return err
	}

	// Relay: publishes committed events to a broker (here the in-process one of sinks/memory;
	// in production sinks/sqs, sinks/kafka, ...) and marks them published after its ack.
	broker, err := memory.NewBroker(nil)
	if err != nil {
		return err
	}
	router := core.StaticRouter{ByDestination: map[string]string{"accounts": "accounts-queue"}}
	relay, err := core.NewRelay(store, broker, router, nil)
	if err != nil {
		return err
	}
	// Run in the background; at the end, stop gracefully: settle what is in flight, release the lanes.
	running := core.Start(ctx, relay)
	defer func() {
		if err := running.Stop(context.WithoutCancel(ctx)); err != nil {
			log.Print(err)
		}
	}()

	// Consumer: applies each delivery once, in its own transaction, through the inbox.
	inbox, err := core.NewInbox[*sql.Tx](ctx, store, nil)
	if err != nil {
		return err
	}
	msg := <-broker.Deliveries()
	for range 2 { // a broker may deliver twice: the second time is a no-op
		in := core.InboxMessageOf(&msg.Event, msg.CreatedAt, "") // id, payload, version gate
		res, err := inbox.Process(ctx, "audit-log", in, func(ctx context.Context, tx *sql.Tx, m core.InboxMessage) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO audit_log (event) VALUES (?)`, m.EventID)
			return err
		})
		if err != nil {
			return err
		}
		fmt.Println(msg.Type, "->", msg.Destination, res.Outcome) // applied, then duplicate
	}
	// readme:end
	return nil
}

// TestQuickStart runs the quick start in a fresh directory: the event reaches the broker, the
// consumer applies it once although it is delivered twice, and both sides' rows are there.
func TestQuickStart(t *testing.T) {
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, quickStart(ctx))

	db, err := sqlite.OpenDB(ctx, "app.db")
	require.NoError(t, err)
	defer db.Close()
	var balance, applied int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = 'a1'`).Scan(&balance))
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM audit_log`).Scan(&applied))
	require.Equal(t, 10, balance)
	require.Equal(t, 1, applied, "the redelivery applied nothing")
	var published int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM outbox_publications`).Scan(&published))
	require.Equal(t, 1, published, "the relay marked the event published before stopping")
}

var (
	mdBlock      = regexp.MustCompile("(?ms)^```go\n(.*?)^```\n")
	snippetBlock = regexp.MustCompile(`(?ms)^([ \t]*)// readme:begin( [^\n]+)?\n(.*?)^[ \t]*// readme:end\n`)
)

// snippets returns the readme:begin ... readme:end regions of the files by the page they belong
// to (README.md unless the begin line names one), in order, dedented by the indentation of their
// begin line and without surrounding blank lines.
func snippets(t *testing.T, files ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range snippetBlock.FindAllStringSubmatch(string(src), -1) {
			indent, page, body := m[1], strings.TrimSpace(m[2]), m[3]
			if page == "" {
				page = "README.md"
			}
			lines := strings.Split(strings.Trim(body, "\n"), "\n")
			for i, l := range lines {
				lines[i] = strings.TrimPrefix(l, indent)
			}
			out[page] = append(out[page], strings.Join(lines, "\n"))
		}
	}
	return out
}

// pages returns README.md and every Markdown page under docs/, relative to the repository root.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md"}
	err := filepath.WalkDir("../../docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			out = append(out, strings.TrimPrefix(filepath.ToSlash(path), "../../"))
		}
		return err
	})
	require.NoError(t, err)
	return out
}

// TestSnippets checks that the Go blocks of README.md and of every page of docs/ are exactly
// the compiled snippets of this package that name that page, so every block compiles and
// checks its errors.
func TestSnippets(t *testing.T) {
	want := snippets(t, "readme_test.go", "snippets.go", "apptest_test.go")
	seen := 0
	for _, page := range pages(t) {
		src, err := os.ReadFile("../../" + page)
		require.NoError(t, err)
		var blocks []string
		for _, m := range mdBlock.FindAllStringSubmatch(string(src), -1) {
			blocks = append(blocks, strings.Trim(m[1], "\n"))
		}
		require.Equal(t, want[page], blocks, "%s's Go blocks must be this package's snippets for it (readme_test.go, snippets.go, then apptest_test.go)", page)
		seen += len(blocks)
	}
	n := 0
	for _, b := range want {
		n += len(b)
	}
	require.Equal(t, n, seen, "a snippet names a page that does not exist: %v", keys(want))
	require.NotEmpty(t, want["README.md"], "the README has a compiled quick start")
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

var (
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdAnchor = regexp.MustCompile(`(?m)^#+ (.+)$`)
)

// anchor is GitHub's anchor of a heading: lower case, punctuation other than - and _ dropped,
// spaces as -.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocLinks checks every relative link of README.md and the pages of docs/: the file exists
// and, for a link with #anchor into a Markdown page, the page has that heading. Links with a
// scheme are not followed (the tests have no network).
func TestDocLinks(t *testing.T) {
	checked := 0
	for _, page := range pages(t) {
		src, err := os.ReadFile("../../" + page)
		require.NoError(t, err)
		text := regexp.MustCompile("(?ms)^```.*?^```").ReplaceAllString(string(src), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			target, frag, _ := strings.Cut(link, "#")
			file := page
			if target != "" {
				file = filepath.ToSlash(filepath.Join(filepath.Dir(page), target))
			}
			body, err := os.ReadFile("../../" + file)
			if err != nil {
				if info, serr := os.Stat("../../" + file); serr == nil && info.IsDir() && frag == "" {
					checked++
					continue
				}
			}
			require.NoError(t, err, "%s links to %s, which does not exist", page, link)
			if frag != "" {
				var anchors []string
				for _, h := range mdAnchor.FindAllStringSubmatch(string(body), -1) {
					anchors = append(anchors, anchor(h[1]))
				}
				require.Contains(t, anchors, frag, "%s links to %s: %s has no such heading", page, link, file)
			}
			checked++
		}
	}
	require.Greater(t, checked, 20, "the pages link each other")
}
