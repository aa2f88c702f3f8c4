package sqsdeploy

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/postgres/logical"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/sns"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// EventStatusChanged is the type of the event the producer writes.
const EventStatusChanged = "order.status_changed"

// Config is the deployment's configuration; in a service it comes from flags or environment.
type Config struct {
	// OutboxSchema holds the producer's tables (orders and the outbox). It must exist.
	// Default "public".
	OutboxSchema string
	// InboxSchema holds the consumer's tables (order_views and the inbox). It must exist.
	// Default "public".
	InboxSchema string
	// Topics routes event types to SNS FIFO topic ARNs. Required by the relay.
	Topics map[string]string
	// QueueURL is the SQS FIFO queue subscribed to the topic with raw message delivery.
	// Required by the consumer.
	QueueURL string
	// Consumer is the consumer's name in the inbox. Default "order-views".
	Consumer string
	// Relay tunes the relay (lease TTL, batch size, ...). Default nil: core's defaults.
	Relay *core.RelayOptions
	// CDC, when set, makes RunRelay publish with a CDC relay that reads the outbox's logical
	// replication slot instead of polling (Relay is then unused). Starting it takes the outbox
	// over from running polling relays; starting a polling relay takes it back. Default nil.
	CDC *CDC
	// SNS tunes the SNS sink. Default nil: the sink's defaults.
	SNS *sns.Options
	// SQS tunes the consumer (visibility timeout, concurrency, ...). Default nil: the
	// consumer's defaults.
	SQS *sqs.ConsumerOptions
}

// CDC configures the CDC relay of a deployment.
type CDC struct {
	// Source sets the slot and publication (logical.Options). Default nil: the change source's
	// defaults, slot outboxkit_<schema>_outbox.
	Source *logical.Options
	// Relay tunes the CDC relay. Default nil: core's defaults.
	Relay *core.CDCOptions
}

func (c Config) outboxSchema() string { return cmp.Or(c.OutboxSchema, "public") }
func (c Config) inboxSchema() string  { return cmp.Or(c.InboxSchema, "public") }
func (c Config) consumer() string     { return cmp.Or(c.Consumer, "order-views") }

// Router maps event types to topics from configuration, never from the payload.
func (c Config) Router() core.Router { return core.StaticRouter{ByType: c.Topics} }

// orderChange is the event payload.
type orderChange struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
	Version int64  `json:"version"`
}

// OutboxStore returns the producer's outbox store (it is also the relay's store).
func OutboxStore(pool *pgxpool.Pool, cfg Config) (*postgres.Store[pgx.Tx], error) {
	return postgres.New(pool, &postgres.Options{Schema: cfg.outboxSchema()})
}

// InboxStore returns the consumer's inbox store.
func InboxStore(pool *pgxpool.Pool, cfg Config) (*postgres.Store[pgx.Tx], error) {
	return postgres.New(pool, &postgres.Options{Schema: cfg.inboxSchema()})
}

// MigrateProducer creates the producer's tables: the outbox and orders.
func MigrateProducer(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	return migrate(ctx, pool, cfg.outboxSchema(), `CREATE TABLE IF NOT EXISTS %s (
		id text PRIMARY KEY, status text NOT NULL, version bigint NOT NULL)`, "orders")
}

// MigrateConsumer creates the consumer's tables: the inbox and order_views.
func MigrateConsumer(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	return migrate(ctx, pool, cfg.inboxSchema(), `CREATE TABLE IF NOT EXISTS %s (
		id text PRIMARY KEY, status text NOT NULL, version bigint NOT NULL, changes bigint NOT NULL)`, "order_views")
}

func migrate(ctx context.Context, pool *pgxpool.Pool, schema, ddl, table string) error {
	store, err := postgres.New(pool, &postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, fmt.Sprintf(ddl, pgx.Identifier{schema, table}.Sanitize()))
	return err
}

// Producer changes orders and records each change as an outbox event, atomically.
type Producer struct {
	pool   *pgxpool.Pool
	outbox *core.Outbox[pgx.Tx]
	orders string // quoted table name
}

// NewProducer returns a producer writing to cfg.OutboxSchema.
func NewProducer(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Producer, error) {
	store, err := OutboxStore(pool, cfg)
	if err != nil {
		return nil, err
	}
	outbox, err := core.NewOutbox(ctx, store, nil)
	if err != nil {
		return nil, err
	}
	return &Producer{pool: pool, outbox: outbox, orders: pgx.Identifier{cfg.outboxSchema(), "orders"}.Sanitize()}, nil
}

// SetStatus sets an order's status and appends the matching event in ONE transaction, then
// wakes the relays. It returns the order's new version (1 for a new order).
func (p *Producer) SetStatus(ctx context.Context, orderID, status string) (int64, error) {
	var version int64
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO `+p.orders+` AS o (id, status, version) VALUES ($1, $2, 1)
			ON CONFLICT (id) DO UPDATE SET status = excluded.status, version = o.version + 1
			RETURNING version`, orderID, status).Scan(&version)
		if err != nil {
			return err
		}
		payload, err := json.Marshal(orderChange{OrderID: orderID, Status: status, Version: version})
		if err != nil {
			return err
		}
		_, err = p.outbox.Write(ctx, tx, core.Event{
			AggregateType: "order", AggregateID: orderID, AggregateVersion: version,
			Type: EventStatusChanged, Payload: payload,
		})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqsdeploy: set status of order %s: %w", orderID, err)
	}
	_ = p.outbox.Notify(ctx) // after commit; a lost wake-up only costs the relay's poll interval
	return version, nil
}

// NewSink returns the SNS sink the relay publishes through.
func NewSink(client *awssns.Client, cfg Config) (*sns.Sink, error) { return sns.New(client, cfg.SNS) }

// NewRelay returns a relay from the PostgreSQL outbox to the SNS topics of cfg.Topics.
func NewRelay(pool *pgxpool.Pool, client *awssns.Client, cfg Config) (*core.Relay, error) {
	if len(cfg.Topics) == 0 {
		return nil, &core.OptionError{Field: "Topics", Reason: "required"}
	}
	store, err := OutboxStore(pool, cfg)
	if err != nil {
		return nil, err
	}
	sink, err := NewSink(client, cfg)
	if err != nil {
		return nil, err
	}
	return core.NewRelay(store, sink, cfg.Router(), cfg.Relay)
}

// NewCDCRelay returns a CDC relay from the outbox's logical replication slot to the SNS topics
// of cfg.Topics, and its change source (drop its slot with DropSlot when CDC is retired).
func NewCDCRelay(pool *pgxpool.Pool, client *awssns.Client, cfg Config) (*core.CDCRelay, *logical.ChangeSource, error) {
	if len(cfg.Topics) == 0 {
		return nil, nil, &core.OptionError{Field: "Topics", Reason: "required"}
	}
	store, err := OutboxStore(pool, cfg)
	if err != nil {
		return nil, nil, err
	}
	var c CDC
	if cfg.CDC != nil {
		c = *cfg.CDC
	}
	src, err := logical.NewChangeSource(store, c.Source)
	if err != nil {
		return nil, nil, err
	}
	sink, err := NewSink(client, cfg)
	if err != nil {
		return nil, nil, err
	}
	relay, err := core.NewCDCRelay(store, src, sink, cfg.Router(), c.Relay)
	return relay, src, err
}

// RunRelay publishes committed events until ctx is cancelled: with a polling relay, or with a
// CDC relay when cfg.CDC is set.
func RunRelay(ctx context.Context, pool *pgxpool.Pool, client *awssns.Client, cfg Config) error {
	if cfg.CDC != nil {
		relay, _, err := NewCDCRelay(pool, client, cfg)
		if err != nil {
			return err
		}
		return relay.Run(ctx)
	}
	relay, err := NewRelay(pool, client, cfg)
	if err != nil {
		return err
	}
	return relay.Run(ctx)
}

// ProjectOrders returns the consumer's handler: it applies one order event to order_views in
// tx, the inbox's transaction. The inbox already skipped duplicates and versions older than the
// applied one, so the handler only writes. An event it cannot read returns an error: the message
// stays on the queue and, after maxReceiveCount attempts, moves to the dead-letter queue.
func ProjectOrders(cfg Config) sqs.Handler[pgx.Tx] {
	views := pgx.Identifier{cfg.inboxSchema(), "order_views"}.Sanitize()
	return func(ctx context.Context, tx pgx.Tx, d *sqs.Delivery) error {
		if d.Event.Type != EventStatusChanged {
			return nil // not ours; recorded in the inbox and deleted
		}
		var c orderChange
		if err := json.Unmarshal(d.Event.Payload, &c); err != nil {
			return fmt.Errorf("sqsdeploy: event %s: %w", d.Event.ID, err)
		}
		if c.OrderID != d.Event.AggregateID || c.Version != d.Event.AggregateVersion {
			return fmt.Errorf("sqsdeploy: event %s: payload does not match its aggregate", d.Event.ID)
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+views+` AS v (id, status, version, changes) VALUES ($1, $2, $3, 1)
			ON CONFLICT (id) DO UPDATE SET status = excluded.status, version = excluded.version, changes = v.changes + 1`,
			c.OrderID, c.Status, c.Version)
		return err
	}
}

// NewConsumer returns the consumer of cfg.QueueURL: each message goes through the PostgreSQL
// inbox and handler (nil means ProjectOrders(cfg)) in one transaction.
func NewConsumer(ctx context.Context, pool *pgxpool.Pool, client *awssqs.Client, cfg Config, handler sqs.Handler[pgx.Tx]) (*sqs.Consumer[pgx.Tx], error) {
	if cfg.QueueURL == "" {
		return nil, &core.OptionError{Field: "QueueURL", Reason: "required"}
	}
	store, err := InboxStore(pool, cfg)
	if err != nil {
		return nil, err
	}
	inbox, err := core.NewInbox(ctx, store, nil)
	if err != nil {
		return nil, err
	}
	if handler == nil {
		handler = ProjectOrders(cfg)
	}
	return sqs.NewConsumer(client, cfg.QueueURL, inbox, cfg.consumer(), handler, cfg.SQS)
}

// RunConsumer consumes cfg.QueueURL into order_views until ctx is cancelled.
func RunConsumer(ctx context.Context, pool *pgxpool.Pool, client *awssqs.Client, cfg Config) error {
	c, err := NewConsumer(ctx, pool, client, cfg, nil)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// ErrNoOrder is returned by ReadView for an order the consumer has not seen.
var ErrNoOrder = errors.New("sqsdeploy: no such order")

// View is an order as the consumer's projection sees it.
type View struct {
	Status  string
	Version int64 // the last applied version
	Changes int64 // how many events were applied
}

// ReadView reads one order's projection.
func ReadView(ctx context.Context, pool *pgxpool.Pool, cfg Config, orderID string) (View, error) {
	var v View
	err := pool.QueryRow(ctx, `SELECT status, version, changes FROM `+pgx.Identifier{cfg.inboxSchema(), "order_views"}.Sanitize()+
		` WHERE id = $1`, orderID).Scan(&v.Status, &v.Version, &v.Changes)
	if errors.Is(err, pgx.ErrNoRows) {
		return View{}, ErrNoOrder
	}
	return v, err
}
