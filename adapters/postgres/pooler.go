package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/adapters/postgres/internal/backend"
)

// sessionPID returns the server process of conn's session, or an error wrapping
// ErrPooledConnection when conn goes through a pooler (unless Options.PoolerKeepsSessions).
//
// PostgreSQL's BackendKeyData, sent once at connection start, carries the process id of the
// connection's server process, which is pg_backend_pid() for every statement of that
// connection. A pooler answers the connection start itself and sends a key of its own
// (PgBouncer: random), so the two differ through it whatever its pool mode. A TCP proxy that
// passes the server's messages through (HAProxy) keeps them equal, and it keeps the session.
// The check is exact and costs one round trip, once per connection; it needs no pooler
// credentials and no knowledge of the pooler. It cannot tell a session-mode pooler (which
// does keep one server session per client connection, and so the session features) from a
// transaction-mode one: Options.PoolerKeepsSessions says so. Then the pid of the next
// statement must still be the same (tripwire for a pooler that does not keep the session).
func (s *Store[TTx]) sessionPID(ctx context.Context, conn *pgconn.PgConn) (uint32, error) {
	pid, err := backend.PID(ctx, conn)
	if err != nil {
		return 0, err
	}
	if pid == conn.PID() {
		return pid, nil
	}
	if !s.o.PoolerKeepsSessions {
		return 0, fmt.Errorf("%w: the server's key names process %d but the statement ran in process %d; "+
			"this feature needs a session of its own: connect it directly to PostgreSQL, or set "+
			"Options.PoolerKeepsSessions if the pooler keeps one server session per connection (PgBouncer pool_mode=session)",
			ErrPooledConnection, conn.PID(), pid)
	}
	again, err := backend.PID(ctx, conn)
	if err != nil {
		return 0, err
	}
	if again != pid {
		return 0, movedError(pid, again)
	}
	return pid, nil
}

// movedError is the error of a session seen in two server processes: a transaction pooler.
func movedError(from, to uint32) error {
	return fmt.Errorf("%w that does not keep sessions (pool_mode=transaction): its statements ran in server process %d, then %d "+
		"(Options.PoolerKeepsSessions is set, but the pooler does not keep sessions)", ErrPooledConnection, from, to)
}
