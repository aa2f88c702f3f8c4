// Package opendb opens an outbox store of any SQL adapter (PostgreSQL, MySQL/MariaDB, SQLite)
// from a driver name and a connection string: the one way the relay daemon and the operator
// commands of cmd/outboxkit open their database.
package opendb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/mysql/binlog"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/postgres/logical"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Drivers are the supported driver names.
var Drivers = []string{"postgres", "mysql", "sqlite"}

// ErrBadDSN is wrapped by ParseDSN's errors.
var ErrBadDSN = errors.New("bad database address")

// Config selects the outbox to open.
type Config struct {
	// Driver is "postgres", "mysql" or "sqlite".
	Driver string
	// DSN is the connection string: a pgx connection string (postgres), a go-sql-driver/mysql
	// DSN with parseTime=true (mysql) or a file path (sqlite). ParseDSN makes Driver and DSN of
	// an operator's address.
	DSN string
	// Schema is the PostgreSQL schema (default "public"); other drivers ignore it.
	Schema string
	// Table is the outbox table (default "outbox").
	Table string
	// Lanes is the lane count Migrate records (default the adapter's).
	Lanes int
	// Slot is the PostgreSQL replication slot of the change source (default the adapter's).
	Slot string
	// ServerID is the MySQL replica server id of the change source (default random).
	ServerID uint32
	// Logger receives the store's logs. Default slog.Default().
	Logger *slog.Logger
}

// Store is what the daemon and the operator commands use of an adapter's store.
type Store interface {
	driver.RelayStore
	driver.Admin
	driver.Pruner
	driver.OperatorStore
	Migrate(ctx context.Context) error
}

// DB is an opened database.
type DB struct {
	Store Store
	// Ping checks that the database answers.
	Ping func(ctx context.Context) error
	// ChangeSource builds the store's change source; nil when the driver has no CDC (sqlite).
	ChangeSource func() (driver.ChangeSource, error)
	// SlotSource builds the change source of another replication slot than Config.Slot (a
	// checkpoint's, logical.IdentitySlot); nil for drivers without slots (mysql, sqlite).
	SlotSource func(slot string) (driver.ChangeSource, error)
	// SQL is the same database through database/sql, for the caller's own queries (for
	// PostgreSQL, over the store's pgx pool).
	SQL *sql.DB
	// Close closes the connection pool.
	Close func()
}

// FieldError is a bad field of a Config that Check found: Field names it ("Driver", "DSN",
// "Schema", "Table" or "Lanes"), Reason says what is wrong.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Check reports, without connecting or touching a file, what Open (and the store's Migrate)
// would refuse in cfg, one *FieldError per bad field: an unknown driver, a DSN that does not
// parse (pgxpool.ParseConfig for postgres, as Open's pgxpool.New; go-sql-driver's ParseDSN for
// mysql, which must also set parseTime=true and keep loc=UTC; an empty SQLite path), and the adapter's options (schema and table identifiers, lane
// count), by the adapter's own rules: its MigrationSQL, which checks them and builds the
// migration script without a database.
func Check(cfg Config) []*FieldError {
	var out []*FieldError
	switch cfg.Driver {
	case "postgres":
		if _, err := pgxpool.ParseConfig(cfg.DSN); err != nil {
			out = append(out, &FieldError{Field: "DSN", Reason: oneLine(err)})
		}
	case "mysql":
		if c, err := gomysql.ParseDSN(cfg.DSN); err != nil {
			out = append(out, &FieldError{Field: "DSN", Reason: oneLine(err)})
		} else if !c.ParseTime || c.Loc != time.UTC {
			// The adapter's rule (mysql.New refuses such a *sql.DB with ErrConnection once
			// connected): DATETIME values must come back as time.Time in UTC.
			out = append(out, &FieldError{Field: "DSN", Reason: "the mysql adapter needs parseTime=true and loc=UTC (the default)"})
		}
	case "sqlite":
		if cfg.DSN == "" {
			out = append(out, &FieldError{Field: "DSN", Reason: "needs a file path"})
		}
	default:
		return []*FieldError{{Field: "Driver", Reason: fmt.Sprintf("%q unsupported", cfg.Driver)}}
	}
	// The adapters report their first bad option: report it, clear that field and ask again,
	// so that every bad field is named, each by the rule that refused it.
	opts := cfg
	for range 4 {
		var err error
		switch cfg.Driver {
		case "postgres":
			_, err = postgres.MigrationSQL(&postgres.Options{Schema: opts.Schema, Table: opts.Table, Lanes: opts.Lanes})
		case "mysql":
			_, err = mysql.MigrationSQL(&mysql.Options{Table: opts.Table, Lanes: opts.Lanes})
		case "sqlite":
			_, err = sqlite.MigrationSQL(&sqlite.Options{Table: opts.Table, Lanes: opts.Lanes})
		}
		if err == nil {
			break
		}
		var oe *core.OptionError
		if !errors.As(err, &oe) {
			return append(out, &FieldError{Field: "Table", Reason: oneLine(err)})
		}
		switch oe.Field {
		case "Schema":
			opts.Schema = ""
		case "Table":
			opts.Table = ""
		case "Lanes":
			opts.Lanes = 0
		default: // an option Config does not set: the adapter's rule for one it does
			return append(out, &FieldError{Field: oe.Field, Reason: oe.Reason})
		}
		out = append(out, &FieldError{Field: oe.Field, Reason: oe.Reason})
	}
	slices.SortStableFunc(out, func(a, b *FieldError) int { return strings.Compare(a.Field, b.Field) })
	return out
}

// oneLine is err's text on one line.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// ClassifyError maps a database error of any supported driver with its adapter's mapping
// (postgres.ClassifyError, mysql.ClassifyError, sqlite.ClassifyError; each recognises only its
// own driver's errors): a missing table or schema wraps core.ErrSchemaMismatch, missing
// privileges core.ErrPermissionDenied. The stores' own errors are mapped already; this is for
// the errors of everything else (connecting, Ping, statements run on DB.SQL).
func ClassifyError(err error) error {
	return sqlite.ClassifyError(mysql.ClassifyError(postgres.ClassifyError(err)))
}

// Open connects to the database of cfg and builds its store. It creates and migrates nothing
// (sqlite.OpenDB creates a missing file: callers that must not create one check first). Its
// errors and the returned DB's Ping errors went through ClassifyError.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	db, err := open(ctx, cfg)
	if err != nil {
		return nil, ClassifyError(err)
	}
	ping := db.Ping
	db.Ping = func(ctx context.Context) error { return ClassifyError(ping(ctx)) }
	return db, nil
}

func open(ctx context.Context, cfg Config) (*DB, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	switch cfg.Driver {
	case "postgres":
		pool, err := pgxpool.New(ctx, cfg.DSN)
		if err != nil {
			return nil, fmt.Errorf("database: %w", err)
		}
		store, err := postgres.New(pool, &postgres.Options{Schema: cfg.Schema, Table: cfg.Table, Lanes: cfg.Lanes, Logger: log})
		if err != nil {
			pool.Close()
			return nil, err
		}
		sqlDB := stdlib.OpenDBFromPool(pool)
		slotSource := func(slot string) (driver.ChangeSource, error) {
			return logical.NewChangeSource(store, &logical.Options{Slot: slot, Logger: log})
		}
		return &DB{Store: store, Ping: pool.Ping, SQL: sqlDB, Close: func() { _ = sqlDB.Close(); pool.Close() },
			ChangeSource: func() (driver.ChangeSource, error) { return slotSource(cfg.Slot) }, SlotSource: slotSource}, nil
	case "mysql":
		db, err := sql.Open("mysql", cfg.DSN)
		if err != nil {
			return nil, fmt.Errorf("database: %w", err)
		}
		store, err := mysql.New(ctx, db, &mysql.Options{Table: cfg.Table, Lanes: cfg.Lanes, DSN: cfg.DSN, Logger: log})
		if err != nil {
			db.Close()
			return nil, err
		}
		return &DB{Store: store, Ping: db.PingContext, SQL: db, Close: func() { _ = db.Close() }, ChangeSource: func() (driver.ChangeSource, error) {
			return binlog.NewChangeSource(store, &binlog.Options{ServerID: cfg.ServerID, Logger: log})
		}}, nil
	case "sqlite":
		db, err := sqlite.OpenDB(ctx, cfg.DSN)
		if err != nil {
			return nil, err
		}
		store, err := sqlite.New(db, &sqlite.Options{Table: cfg.Table, Lanes: cfg.Lanes, Logger: log})
		if err != nil {
			db.Close()
			return nil, err
		}
		return &DB{Store: store, Ping: db.PingContext, SQL: db, Close: func() { _ = db.Close() }}, nil
	}
	return nil, fmt.Errorf("database.driver: %q unsupported", cfg.Driver)
}

// Forms lists the database addresses ParseDSN accepts, for usage messages.
const Forms = `a URL: postgres://user:pass@host:5432/db (or postgresql://), mysql://user:pass@host:3306/db, sqlite:PATH or file:PATH; ` +
	`or the driver's own DSN with the driver named (--driver, database.driver): postgres "host=H dbname=D ...", ` +
	`mysql "user:pass@tcp(host:3306)/db?parseTime=true", sqlite a file path`

// ParseDSN turns a database address into a driver name and the DSN Open takes for it: the one
// parser of the operator commands' --db (with --driver) and the relay daemon's database.dsn
// (with database.driver). It accepts
//
//	postgres://user:pass@host:port/db?sslmode=disable   (or postgresql://): passed to pgx as it is, once pgx parsed it
//	mysql://user:pass@host:port/db?param=value          made a go-sql-driver/mysql DSN with parseTime=true, loc=UTC
//	sqlite:PATH, file:PATH                              a SQLite file (sqlite:///abs and file:///abs: /abs)
//
// and, when driverName names the driver, that driver's own DSN: a pgx keyword/value string
// (postgres, "host=h dbname=d"), a go-sql-driver/mysql DSN (mysql), a file path (sqlite). A
// URL whose scheme names another driver than driverName is refused. Anything else (a bare word
// such as "app", "host:port/db", an unknown scheme, an unknown driver) is an error wrapping
// ErrBadDSN that lists the accepted forms: nothing is ever read as a SQLite file by default.
func ParseDSN(driverName, s string) (driver, dsn string, err error) {
	bad := func(format string, a ...any) (string, string, error) {
		return "", "", fmt.Errorf("%w: %s (want %s)", ErrBadDSN, fmt.Sprintf(format, a...), Forms)
	}
	if driverName != "" && !slices.Contains(Drivers, driverName) {
		return bad("unknown driver %q, not one of %s", driverName, strings.Join(Drivers, ", "))
	}
	scheme := ""
	switch {
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		scheme = "postgres"
	case strings.HasPrefix(s, "mysql://"):
		scheme = "mysql"
	case strings.HasPrefix(s, "sqlite:"), strings.HasPrefix(s, "file:"):
		scheme = "sqlite"
	case strings.Contains(s, "://"):
		name, _, _ := strings.Cut(s, "://")
		return bad("unknown scheme %q", name)
	}
	if scheme != "" && driverName != "" && scheme != driverName {
		return bad("the URL is a %s address but the driver named is %s", scheme, driverName)
	}
	switch {
	case s == "":
		return bad("empty")
	case scheme == "postgres":
		// pgx's own parser (Open's pgxpool.New parses it again): a bad port, an unknown sslmode
		// or a malformed URL is the operator's mistake, refused before anything connects.
		if _, err := pgxpool.ParseConfig(s); err != nil {
			return "", "", fmt.Errorf("%w: %s", ErrBadDSN, oneLine(err))
		}
		return "postgres", s, nil
	case scheme == "mysql":
		dsn, err := mysqlDSN(s)
		return "mysql", dsn, err
	case scheme == "sqlite":
		_, path, _ := strings.Cut(s, ":")
		path = strings.TrimPrefix(path, "//")
		if path == "" {
			return bad("%q names no file path", s)
		}
		if strings.ContainsAny(path, "?#") {
			return bad("%q: a SQLite path takes no query (the adapter sets its pragmas)", s)
		}
		return "sqlite", path, nil
	}
	switch driverName {
	case "":
		return bad("%q names no driver", Redact(s))
	case "postgres":
		if !strings.Contains(s, "=") {
			return bad("%q is not a postgres keyword/value DSN", Redact(s))
		}
		if _, err := pgxpool.ParseConfig(s); err != nil {
			return "", "", fmt.Errorf("%w: %s", ErrBadDSN, oneLine(err))
		}
	case "mysql":
		if _, err := gomysql.ParseDSN(s); err != nil {
			return "", "", fmt.Errorf("%w: %s", ErrBadDSN, oneLine(err))
		}
	}
	return driverName, s, nil
}

// mysqlDSN converts mysql://user:pass@host:port/db?params to a go-sql-driver/mysql DSN.
func mysqlDSN(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // its message holds the whole URL, password included
			err = ue.Err
		}
		return "", fmt.Errorf("%w: %q: %v", ErrBadDSN, Redact(s), err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return "", fmt.Errorf("%w: mysql:// needs a database name as its path", ErrBadDSN)
	}
	c := gomysql.NewConfig()
	if u.User != nil {
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
	}
	c.Net, c.Addr, c.DBName = "tcp", u.Host, db
	if u.Port() == "" {
		c.Addr = u.Host + ":3306"
	}
	c.ParseTime, c.Loc = true, time.UTC
	// Other query parameters are the driver's own (tls, timeout, ...).
	if q := u.Query(); len(q) > 0 {
		parsed, err := gomysql.ParseDSN(c.FormatDSN() + "&" + q.Encode())
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrBadDSN, err)
		}
		c = parsed
	}
	return c.FormatDSN(), nil
}
