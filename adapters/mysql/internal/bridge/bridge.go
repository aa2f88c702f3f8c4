// Package bridge is what package mysql and its change source (adapters/mysql/binlog) share
// without adding it to the adapter's public API, so that a program that only polls does not
// link the binlog reader (go-mysql and its logger and SQL parser): the Store's internals a
// change source reads (Of), and the decoding of the headers column (DecodeHeaders).
//
// Package mysql sets Of in its init; package binlog imports package mysql, so Of is set
// before binlog can call it.
package bridge

import (
	"database/sql"
	"log/slog"
)

// Store is what a change source reads from its Store.
type Store struct {
	DB         *sql.DB      // the Store's pool
	DSN        string       // Options.DSN ("" when not set)
	Database   string       // the database the pool's DSN selects (DATABASE() when New ran)
	Outbox     string       // the outbox table, unquoted
	Checkpoint string       // the CDC checkpoint table, unquoted
	Logger     *slog.Logger // the Store's logger

	// Wrap prefixes err with "mysql: <op>: " and maps driver errors to the adapter's sentinels
	// (ErrDeadlock, ErrLockWaitTimeout, core.ErrSchemaMismatch, ...), as the Store's own calls do.
	Wrap func(op string, err error) error
}

// Of returns the Store internals of store, which must be a *mysql.Store (it panics otherwise).
// Set by package mysql.
var Of func(store any) Store
