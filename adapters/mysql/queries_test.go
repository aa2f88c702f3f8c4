package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core/driver"
)

// TestListParameters: a list parameter (queries.sql, internal/sqlfile) is one ? per element on
// the server, and an empty list is valid SQL that matches nothing, also beside another
// condition (ResetLanes' "(:all OR lane IN (:lanes))").
func TestListParameters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, &mysql.Options{Lanes: 8})
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 3, TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, leases, 3)

	owned, err := s.OwnedLanes(ctx, []int{0, 1, 2, 5})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2}, owned)
	owned, err = s.OwnedLanes(ctx, []int{2})
	require.NoError(t, err)
	require.Equal(t, []int{2}, owned)
	for _, lanes := range [][]int{nil, {}, {5}} {
		owned, err = s.OwnedLanes(ctx, lanes)
		require.NoError(t, err, lanes)
		require.Empty(t, owned, lanes)
	}

	// Every lane: the list is empty.
	var n int64
	require.NoError(t, s.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
		n, err = tx.ResetLanes(ctx, driver.ResetLanesParams{Owner: "w"})
		return err
	}))
	require.EqualValues(t, 3, n)
	owned, err = s.OwnedLanes(ctx, []int{0, 1, 2})
	require.NoError(t, err)
	require.Empty(t, owned)
}
