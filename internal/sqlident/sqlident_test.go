package sqlident_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/sqlident"
)

func TestCheckCollisions(t *testing.T) {
	t.Parallel()
	require.NoError(t, sqlident.CheckCollisions(sqlident.Ident{Field: "Table", Name: "y_horizons"}, sqlident.Ident{Field: "InboxTable", Name: "x_horizons"}))
	err := sqlident.CheckCollisions(sqlident.Ident{Field: "Table", Name: "y_horizons"}, sqlident.Ident{Field: "InboxTable", Name: "Y_Horizons"})
	var oe *core.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "InboxTable", oe.Field)
	require.ErrorIs(t, err, core.ErrInvalidOptions)
}
