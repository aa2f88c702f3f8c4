// Package bridge is what package postgres and its change source (adapters/postgres/logical)
// share without adding it to the adapter's public API, so that a program that only polls does
// not link the logical replication client (github.com/jackc/pglogrepl): the Store's internals a
// change source reads (Of), and the rules both packages apply (identifiers, partition names).
//
// Package postgres sets Of in its init; package logical imports package postgres, so Of is set
// before logical can call it.
package bridge

import (
	"context"
	"errors"
	"log/slog"
	"regexp"

	"github.com/jackc/pgx/v5/pgconn"
)

// Store is what a change source reads from its Store.
type Store struct {
	Schema, Table string // the outbox's schema and table, unquoted
	Outbox        string // the outbox, quoted and schema-qualified
	Partitioned   bool   // Options.Partitioning is set
	Logger        *slog.Logger

	// Exec runs a statement on the Store's pool (autocommit) and returns the rows it affected.
	Exec func(ctx context.Context, sql string, args ...any) (int64, error)
	// QueryRow scans the first row of a statement on the Store's pool into dest; no row
	// returns ErrNoRows.
	QueryRow func(ctx context.Context, sql string, args []any, dest ...any) error
	// ConnConfig returns a copy of the connection settings of the Store's pool or database.
	ConnConfig func(ctx context.Context) (*pgconn.Config, error)
	// Classify maps a missing table or function to core.ErrSchemaMismatch and an ended
	// transaction to core.ErrInvalidTx, as the Store's own calls do.
	Classify func(error) error
}

// ErrNoRows is what Store.QueryRow returns for a statement without rows.
var ErrNoRows = errors.New("postgres: no rows")

// IdentRE is an identifier the adapter accepts (schema, table, publication): it is then quoted
// as it is.
var IdentRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// PartitionLayout is the time part of a partition name (<table>_p<layout>): its lower bound,
// UTC, to the hour.
const PartitionLayout = "2006010215"

// Of returns the Store internals of store, which must be a *postgres.Store[TTx] (it panics
// otherwise). Set by package postgres.
var Of func(store any) Store
