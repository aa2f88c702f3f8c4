package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

// TestDaemonRedis: the daemon appends to a Redis stream as an ACL user of its own (username and
// password), through graceful restarts under traffic, resending nothing.
func TestDaemonRedis(t *testing.T) {
	t.Parallel()
	runDaemonE2E(t, sqliteBackend(t), redisE2ESink(t), 3, 0)
}

// Daemons killed with SIGKILL mid-traffic lose nothing: the last one delivers every event.
func TestDaemonRedisKill(t *testing.T) {
	t.Parallel()
	runDaemonKillE2E(t, sqliteBackend(t), redisE2ESink(t), 2)
}

// redisE2ESink is a fresh stream of the test server, written by a fresh ACL user and read back
// with go-redis.
func redisE2ESink(t *testing.T) e2eSink {
	addr := testkit.Need(t, testkit.RedisAddr)
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = admin.Close() })
	suffix := randSuffix()
	stream, user, password := "daemon-"+suffix, "relay-"+suffix, "pw-"+suffix
	require.NoError(t, admin.Do(t.Context(), "ACL", "SETUSER", user, "on", ">"+password, "~"+stream, "+xadd").Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	return e2eSink{
		config: fmt.Sprintf("sink: redis\nsinks:\n  redis:\n    addr: %s\n    username: %s\n    password: %s\n    max_len: 1000000\nroutes:\n  default: %s\n",
			addr, user, password, stream),
		receive: func(t *testing.T, want int) map[string]int {
			got := map[string]int{}
			n := 0
			last := "-"
			deadline := time.Now().Add(60 * time.Second)
			quiet := time.Time{}
			for time.Now().Before(deadline) {
				msgs, err := admin.XRange(t.Context(), stream, last, "+").Result()
				require.NoError(t, err)
				for _, m := range msgs {
					id, ok := m.Values["ce_id"].(string)
					require.True(t, ok, "entry %s has no ce_id: %v", m.ID, m.Values)
					got[id]++
					n++
					last = "(" + m.ID
				}
				// Once every event arrived, a quiet second shows there is no late duplicate.
				if len(got) >= want {
					if len(msgs) > 0 || quiet.IsZero() {
						quiet = time.Now()
					} else if time.Since(quiet) >= time.Second {
						break
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("redis: %d entries, %d event ids", n, len(got))
			return got
		},
	}
}
