// Package backend reads which PostgreSQL server process runs a connection's statements: the
// pooler check of the store (package postgres) and of the replication connection (package
// logical).
package backend

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// PID returns pg_backend_pid() of the server process that ran the statement on conn (a
// regular or a replication connection: simple protocol).
func PID(ctx context.Context, conn *pgconn.PgConn) (uint32, error) {
	res, err := conn.Exec(ctx, `SELECT pg_backend_pid()`).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return 0, errors.New("pg_backend_pid: unexpected result")
	}
	pid, err := strconv.ParseUint(string(res[0].Rows[0][0]), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("pg_backend_pid: %w", err)
	}
	return uint32(pid), nil
}
