package rabbitmq

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Redial backoff: after a failed dial, no new dial is tried for this long (doubling per
// failure up to maxRedialBackoff); calls in between fail at once with ErrUnavailable.
const (
	minRedialBackoff = 100 * time.Millisecond
	maxRedialBackoff = 5 * time.Second
)

// dialer keeps one connection to the broker and dials a new one when it closed: amqp091's
// own recovery (Config.Recovery) stays off, so that a closed channel or connection is seen by
// the messages in flight on it, never hidden by a silent reconnect.
type dialer struct {
	url  string
	cfg  amqp.Config
	log  *slog.Logger
	name string // log prefix: "rabbitmq" or "rabbitmq_consumer"

	mu       sync.Mutex
	conn     *amqp.Connection
	dialing  chan struct{} // non-nil while a dial runs; closed when it ends
	lastErr  error
	nextDial time.Time
	backoff  time.Duration
	closed   bool
}

// connection returns the open connection, dialing one when there is none. It waits for a
// dial in progress until ctx ends (the dial itself goes on and its connection is kept).
func (d *dialer) connection(ctx context.Context) (*amqp.Connection, error) {
	for {
		d.mu.Lock()
		switch {
		case d.closed:
			d.mu.Unlock()
			return nil, ErrClosed
		case d.conn != nil && !d.conn.IsClosed():
			c := d.conn
			d.mu.Unlock()
			return c, nil
		}
		if d.dialing == nil {
			if time.Now().Before(d.nextDial) {
				err := d.lastErr
				d.mu.Unlock()
				return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			d.dialing = make(chan struct{})
			go d.dial(d.dialing)
		}
		wait := d.dialing
		d.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (d *dialer) dial(done chan struct{}) {
	defer close(done)
	conn, err := amqp.DialConfig(d.url, d.cfg)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dialing = nil
	if err != nil {
		d.backoff = min(max(2*d.backoff, minRedialBackoff), maxRedialBackoff)
		d.nextDial = time.Now().Add(d.backoff)
		d.lastErr = err
		d.log.Warn(d.name+"_dial_failed", "retry_in", d.backoff, "error", err)
		return
	}
	if d.closed {
		_ = conn.Close()
		return
	}
	if d.conn != nil {
		d.log.Info(d.name + "_reconnected")
	}
	d.conn, d.backoff, d.lastErr = conn, 0, nil
}

// close closes the connection; later calls of connection fail with ErrClosed.
func (d *dialer) close() error {
	d.mu.Lock()
	d.closed = true
	c := d.conn
	d.conn = nil
	d.mu.Unlock()
	if c != nil && !c.IsClosed() {
		return c.Close()
	}
	return nil
}
