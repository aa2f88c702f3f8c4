package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/conformance"
)

// newTestStore opens a fresh database file in t.TempDir(), migrates it with lanes and creates
// the domain table of the harness's Effect.
func newTestStore(t testing.TB, opts *sqlite.Options) *sqlite.Store {
	t.Helper()
	return newTestStoreSync(t, opts, false)
}

// newTestStoreSync is newTestStore; full opens the database with synchronous=FULL (an fsync
// per commit) instead of OpenDB's NORMAL.
func newTestStoreSync(t testing.TB, opts *sqlite.Options, full bool) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	var db *sql.DB
	var err error
	if full {
		db, err = sql.Open("sqlite", strings.Replace(sqlite.DSN(path), "synchronous%28NORMAL%29", "synchronous%28FULL%29", 1))
	} else {
		db, err = sqlite.OpenDB(ctx, path)
	}
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if full {
		var mode int
		if err := db.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&mode); err != nil || mode != 2 {
			t.Fatalf("synchronous = %d (%v), want 2 (FULL)", mode, err)
		}
	}
	o := sqlite.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = quiet
	}
	s, err := sqlite.New(db, &o)
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		t.Fatalf("create effects: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, conformance.Harness[*sql.Tx]{
		New: func(t *testing.T, lanes int) conformance.Adapter[*sql.Tx] {
			return newTestStore(t, &sqlite.Options{Lanes: lanes})
		},
		Effect: func(ctx context.Context, tx *sql.Tx, key string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects (key, n) VALUES (?, 1)
				ON CONFLICT (key) DO UPDATE SET n = n + 1`, key)
			return err
		},
		EffectCount: func(ctx context.Context, a conformance.Adapter[*sql.Tx], key string) (int, error) {
			s, ok := a.(*sqlite.Store)
			if !ok {
				return 0, errors.New("adapter is not a *sqlite.Store")
			}
			var n int
			err := s.DB().QueryRowContext(ctx, `SELECT n FROM effects WHERE key = ?`, key).Scan(&n)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, nil
			}
			return n, err
		},
		NewUnmigrated: func(t *testing.T) conformance.Adapter[*sql.Tx] {
			db, err := sqlite.OpenDB(t.Context(), filepath.Join(t.TempDir(), "unmigrated.db"))
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			t.Cleanup(func() { _ = db.Close() })
			s, err := sqlite.New(db, &sqlite.Options{Logger: quiet})
			if err != nil {
				t.Fatalf("new: %v", err)
			}
			return s
		},
		NewForeign: func(t *testing.T, _ conformance.Adapter[*sql.Tx]) conformance.Adapter[*sql.Tx] {
			return newTestStore(t, nil)
		},
		Capabilities: conformance.Notifier | conformance.Waker | conformance.OperatorStore |
			conformance.SingleWriter | conformance.LaneResizer | conformance.LaneInserter |
			conformance.InboxReader | conformance.IngressCounter,
	})
}
