package main

import (
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

// The daemon with sink rabbitmq against the test node, routing through amq.direct to a bound
// queue: graceful restarts resend nothing, every event is delivered.
func TestDaemonRabbitMQ(t *testing.T) {
	t.Parallel()
	runDaemonE2E(t, sqliteBackend(t), rabbitmqE2ESink(t), 3, 0)
}

// Daemons killed with SIGKILL mid-traffic lose nothing: the last one delivers every event.
func TestDaemonRabbitMQKill(t *testing.T) {
	t.Parallel()
	runDaemonKillE2E(t, sqliteBackend(t), rabbitmqE2ESink(t), 2)
}

// rabbitmqE2ESink is a fresh queue of the test node bound to amq.direct; the route is
// "amq.direct/<routing key>". receive reads it back with amqp091 (basic.get), counting the
// message-id of each message (the event ID, also its cloudEvents:id header).
func rabbitmqE2ESink(t *testing.T) e2eSink {
	url := testkit.Need(t, testkit.RabbitMQURL)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	q := "daemon-" + randSuffix()
	_, err = ch.QueueDeclare(q, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q, "rk-"+q, "amq.direct", false, nil))
	t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	return e2eSink{
		config: fmt.Sprintf("sink: rabbitmq\nsinks:\n  rabbitmq:\n    url: %q\n    confirm_timeout: 10s\nroutes:\n  default: amq.direct/rk-%s\n", url, q),
		receive: func(t *testing.T, want int) map[string]int {
			got := map[string]int{}
			n := 0
			deadline := time.Now().Add(60 * time.Second)
			quietSince := time.Time{}
			for time.Now().Before(deadline) {
				d, ok, err := ch.Get(q, true)
				require.NoError(t, err)
				if !ok {
					// Once every event arrived, a quiet second shows there is no late duplicate.
					if len(got) >= want {
						if quietSince.IsZero() {
							quietSince = time.Now()
						} else if time.Since(quietSince) > time.Second {
							break
						}
					}
					select {
					case <-t.Context().Done():
						return got
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				quietSince = time.Time{}
				require.Equal(t, d.MessageId, d.Headers["cloudEvents:id"], "message-id is the event ID")
				require.Equal(t, amqp.Persistent, d.DeliveryMode)
				got[d.MessageId]++
				n++
			}
			t.Logf("rabbitmq: %d messages, %d event ids", n, len(got))
			return got
		},
	}
}
