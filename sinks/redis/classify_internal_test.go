package redis

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

// serverError is a reply error as go-redis reports it (a redis.Error).
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// Only the errors no retry can fix are permanent: a key of another type and an ACL refusal.
// Server states that pass (loading, a busy script, maxmemory, a replica, a resharding cluster)
// and connection failures are retryable.
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		serverError("WRONGTYPE Operation against a key holding the wrong kind of value"),
		serverError("NOPERM User app has no permissions to access the 'orders' key"),
	} {
		got := classify("e1", "orders", err)
		require.True(t, core.IsPermanent(got), "%v", err)
		require.ErrorIs(t, got, err)
	}
	for _, err := range []error{
		serverError("LOADING Redis is loading the dataset in memory"),
		serverError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT."),
		serverError("OOM command not allowed when used memory > 'maxmemory'."),
		serverError("READONLY You can't write against a read only replica."),
		serverError("TRYAGAIN Multiple keys request during rehashing of slot"),
		serverError("MOVED 3999 127.0.0.1:6381"),
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")},
		context.DeadlineExceeded,
		context.Canceled,
	} {
		got := classify("e1", "orders", err)
		require.False(t, core.IsPermanent(got), "%v", err)
		require.ErrorIs(t, got, err)
	}
}
