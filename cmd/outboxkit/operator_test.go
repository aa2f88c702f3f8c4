package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// operatorOf is the core.Operator of the operator commands on s.
func operatorOf(t testing.TB, s driver.OperatorStore) *core.Operator {
	t.Helper()
	op, err := core.NewOperator(s, nil)
	require.NoError(t, err)
	return op
}
