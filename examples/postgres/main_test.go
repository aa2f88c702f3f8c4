package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

// TestPostgres runs the example on a database of its own, twice (a second run adds to the
// first): every order's event is applied once and nothing is left pending.
func TestPostgres(t *testing.T) {
	dsn := testkit.Need(t, testkit.PostgresDSN)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) }) // after the DROP below
	name := fmt.Sprintf("example_%d", time.Now().UnixNano())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
		require.NoError(t, err)
	})
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Path = "/" + name

	for i := 1; i <= 2; i++ {
		var out bytes.Buffer
		require.NoError(t, run(ctx, u.String(), &out), "run %d", i)
		got := out.String()
		t.Log("\n" + got)
		require.Equal(t, 2, strings.Count(got, "committed together"), got)
		require.Equal(t, 2, strings.Count(got, ": applied\n"), got)
		require.Contains(t, got, "outbox: 0 pending, 0 parked")
	}
	db, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	defer db.Close(context.Background())
	var orders, totals int
	require.NoError(t, db.QueryRow(ctx, `SELECT sum(total) FROM orders`).Scan(&orders))
	require.NoError(t, db.QueryRow(ctx, `SELECT sum(total) FROM order_totals`).Scan(&totals))
	require.Equal(t, 84, orders)
	require.Equal(t, orders, totals, "each order's event applied exactly once")
}
