package logical

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/outboxkit/outbox/adapters/postgres/internal/backend"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/postgres/internal/bridge"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Options configures a ChangeSource (NewChangeSource). The zero value (or nil) takes every
// default.
type Options struct {
	// Slot is the logical replication slot (pgoutput) the source streams from. Lower-case
	// letters, digits and underscores, at most 63 bytes. Two sources of one outbox must use two
	// slots. Default "outboxkit_<schema>_<table>", lower-cased (shortened, with a hash of the
	// names, when that is longer than 63 bytes or the names have upper-case letters).
	Slot string
	// Publication is the publication the slot decodes: FOR TABLE <outbox> WITH (publish =
	// 'insert'), plus publish_via_partition_root = true for a partitioned outbox. Start creates
	// it when it does not exist, which needs ownership of the outbox table (see grants.sql);
	// sources of one outbox may share it. Default: the default Slot name.
	Publication string
	// StandbyTimeout is the interval of the stream's status updates to the server (each one
	// reports the last confirmed position and asks for a keepalive, whose position Next returns
	// when no transaction is in progress). It must stay below the server's wal_sender_timeout
	// (60 s by default). Default 10 s.
	StandbyTimeout time.Duration
	// StallTimeout is the stream's liveness bound: after a status update that asks the server
	// for a reply (one every StandbyTimeout), a stream that waits for the server and receives
	// nothing at all within StallTimeout fails with an error wrapping core.ErrStreamStalled,
	// and a CDC relay resumes from its checkpoint on a new connection. A silent server or
	// network (a black-holed route, a vanished host, a stuck walsender) is so noticed within
	// StandbyTimeout + StallTimeout (40 s by default) instead of when TCP gives up. It also
	// bounds opening a replication connection (ConnectTimeout, when the connection settings
	// have none) and resuming a stream. The closed stream's server process, when the server
	// still holds the slot for it a second later, is ended with pg_terminate_backend (its own
	// pid only; it needs the rights of its role), so that the new stream need not wait for
	// wal_sender_timeout. Keep it above what the server may take to answer while it decodes a
	// long stretch of log. Default 3 × StandbyTimeout (30 s).
	StallTimeout time.Duration
	// SlotBusyTimeout is how long Start and Resume wait for a slot that another connection
	// streams from to be released before failing with an error wrapping
	// postgres.ErrSlotActive. Default 2 s.
	SlotBusyTimeout time.Duration
	// ConnString is the replication connection's connection string; "replication=database" is
	// added. The role needs the REPLICATION attribute. Default: the Store's own connection
	// settings (its pool's, or for postgres.NewSQL those of a connection of its *sql.DB).
	ConnString string
	// Logger receives the source's logs. Default: the Store's logger (postgres.Options.Logger).
	Logger *slog.Logger
}

var slotRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// ChangeSource is the outbox's change log: PostgreSQL logical replication (the pgoutput plugin)
// of the outbox table's inserts, through a replication slot. It implements driver.ChangeSource.
// Positions are LSNs in PostgreSQL's text form ("16/B374D848"): a position is just after a
// transaction's commit (or a keepalive between transactions), and resuming from it streams the
// transactions that committed after it.
//
// The slot retains WAL from the oldest position not yet confirmed (ChangeStream.Confirm): a
// relay that stops for good must have its slot dropped (DropSlot), or the server keeps WAL
// until its disk fills. Retention reports how much the slot holds.
type ChangeSource struct {
	o          Options
	db         bridge.Store // the Store's outbox and pool
	schema     string       // raw
	table      string       // raw
	connConfig func(ctx context.Context) (*pgconn.Config, error)
	log        *slog.Logger

	mu    sync.Mutex
	sysID string // IDENTIFY_SYSTEM's systemid, once known
}

var _ driver.ChangeSource = (*ChangeSource)(nil)

// NewChangeSource returns the change log of store's outbox (a *postgres.Store[pgx.Tx] from
// postgres.New or a *postgres.Store[*sql.Tx] from postgres.NewSQL). opts may be nil. It does not
// touch the database.
func NewChangeSource[TTx any](store *postgres.Store[TTx], opts *Options) (*ChangeSource, error) {
	if store == nil {
		return nil, &core.OptionError{Field: "store", Reason: "must not be nil"}
	}
	s := bridge.Of(store)
	var o Options
	if opts != nil {
		o = *opts
	}
	def := defaultSlotName(s.Schema, s.Table)
	if o.Slot == "" {
		o.Slot = def
	}
	if o.Publication == "" {
		o.Publication = def
	}
	if o.StandbyTimeout == 0 {
		o.StandbyTimeout = 10 * time.Second
	}
	if o.SlotBusyTimeout == 0 {
		o.SlotBusyTimeout = 2 * time.Second
	}
	if o.StallTimeout == 0 && o.StandbyTimeout > 0 {
		o.StallTimeout = 3 * o.StandbyTimeout
	}
	if o.Logger == nil {
		o.Logger = s.Logger
	}
	if !slotRE.MatchString(o.Slot) {
		return nil, &core.OptionError{Field: "Slot", Reason: "must match " + slotRE.String()}
	}
	if !bridge.IdentRE.MatchString(o.Publication) {
		return nil, &core.OptionError{Field: "Publication", Reason: "must match " + bridge.IdentRE.String()}
	}
	if o.StandbyTimeout < 0 {
		return nil, &core.OptionError{Field: "StandbyTimeout", Reason: "must not be negative"}
	}
	if o.SlotBusyTimeout < 0 {
		return nil, &core.OptionError{Field: "SlotBusyTimeout", Reason: "must not be negative"}
	}
	if o.StallTimeout < 0 {
		return nil, &core.OptionError{Field: "StallTimeout", Reason: "must not be negative"}
	}
	c := &ChangeSource{o: o, db: s, schema: s.Schema, table: s.Table, connConfig: s.ConnConfig, log: o.Logger}
	if o.ConnString != "" {
		if _, err := pgconn.ParseConfig(o.ConnString); err != nil {
			return nil, &core.OptionError{Field: "ConnString", Reason: err.Error()}
		}
		c.connConfig = func(context.Context) (*pgconn.Config, error) { return pgconn.ParseConfig(o.ConnString) }
	}
	return c, nil
}

// defaultSlotName is "outboxkit_<schema>_<table>" when that is a valid slot name, else a
// lower-cased prefix of it and a hash of the exact names.
func defaultSlotName(schema, table string) string {
	base := "outboxkit_" + schema + "_" + table
	if len(base) <= 63 && base == strings.ToLower(base) {
		return base
	}
	h := fnv.New32a()
	h.Write([]byte(schema + "." + table))
	low := strings.ToLower(base)
	if len(low) > 54 {
		low = low[:54]
	}
	return fmt.Sprintf("%s_%08x", low, h.Sum32())
}

// Slot returns the replication slot's name.
func (c *ChangeSource) Slot() string { return c.o.Slot }

// Publication returns the publication's name.
func (c *ChangeSource) Publication() string { return c.o.Publication }

// Identity is "postgres:<system identifier>/<slot>/<schema>.<table>": a checkpoint of another
// server (a restored backup keeps the identifier, a new cluster does not), slot or table is
// never resumed. The first call opens a replication connection for IDENTIFY_SYSTEM.
func (c *ChangeSource) Identity(ctx context.Context) (string, error) {
	id, err := c.systemID(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("postgres: cdc identity: %w", err)
	}
	return c.identity(id), nil
}

func (c *ChangeSource) identity(sysID string) string {
	return "postgres:" + sysID + "/" + c.o.Slot + "/" + c.schema + "." + c.table
}

// IdentitySlot returns the replication slot named by a ChangeSource's Identity (the Source of
// its checkpoints), and false for an identity of another form.
func IdentitySlot(identity string) (string, bool) {
	rest, ok := strings.CutPrefix(identity, "postgres:")
	if !ok {
		return "", false
	}
	parts := strings.SplitN(rest, "/", 3) // the system identifier and the slot have no "/"
	if len(parts) != 3 || !slotRE.MatchString(parts[1]) {
		return "", false
	}
	return parts[1], true
}

// systemID returns the cached system identifier, or asks the server on conn (or on a new
// replication connection when conn is nil).
func (c *ChangeSource) systemID(ctx context.Context, conn *pgconn.PgConn) (string, error) {
	c.mu.Lock()
	id := c.sysID
	c.mu.Unlock()
	if id != "" {
		return id, nil
	}
	if conn == nil {
		nc, err := c.connect(ctx)
		if err != nil {
			return "", err
		}
		defer nc.Close(context.WithoutCancel(ctx))
		conn = nc
	}
	res, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return "", fmt.Errorf("identify system: %w", err)
	}
	c.mu.Lock()
	c.sysID = res.SystemID
	c.mu.Unlock()
	return res.SystemID, nil
}

// connect opens a replication connection. The session settings make the text output of the
// decoded columns (servers before 14, where pgoutput has no binary tuples) unambiguous:
// timestamps in UTC and ISO style, bytea in hex.
func (c *ChangeSource) connect(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := c.connConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("replication connection settings: %w", err)
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["TimeZone"] = "UTC"
	cfg.RuntimeParams["DateStyle"] = "ISO, MDY"
	cfg.RuntimeParams["bytea_output"] = "hex"
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = c.o.StallTimeout // a black-holed server must not hold the relay
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		// PgBouncer refuses the startup parameters of a replication connection (FATAL
		// "unsupported startup parameter: replication"); PostgreSQL never says that.
		var pe *pgconn.PgError
		if errors.As(err, &pe) && strings.HasPrefix(pe.Message, "unsupported startup parameter") {
			return nil, fmt.Errorf("replication connection: %w, which refuses replication connections (%s): "+
				"set logical.Options.ConnString to a connection string that reaches PostgreSQL directly", postgres.ErrPooledConnection, pe.Message)
		}
		return nil, fmt.Errorf("replication connection: %w", err)
	}
	// A proxy that accepted it would stream from another server process than conn.PID(), the
	// process the source ends with pg_terminate_backend when it replaces a stream.
	if pid, err := backend.PID(ctx, conn); err != nil || pid != conn.PID() {
		_ = conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return nil, fmt.Errorf("replication connection: %w", err)
		}
		return nil, fmt.Errorf("replication connection: %w: the server's key names process %d but the statement ran in process %d: "+
			"set logical.Options.ConnString to a connection string that reaches PostgreSQL directly", postgres.ErrPooledConnection, conn.PID(), pid)
	}
	return conn, nil
}

// Start creates the publication when it does not exist, drops the slot when it exists (and is
// not active: an active slot fails with postgres.ErrSlotActive after SlotBusyTimeout), creates it anew
// (CREATE_REPLICATION_SLOT ... LOGICAL pgoutput NOEXPORT_SNAPSHOT) and streams from its
// consistent point, which it returns as the position: every transaction committed before it is
// visible to queries begun after Start returns, and every one committed after it is streamed.
func (c *ChangeSource) Start(ctx context.Context) (driver.ChangeStream, string, error) {
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: cdc start: %w", err)
	}
	st, pos, err := c.start(ctx, conn)
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, "", fmt.Errorf("postgres: cdc start: %w", err)
	}
	return st, pos.String(), nil
}

func (c *ChangeSource) start(ctx context.Context, conn *pgconn.PgConn) (*changeStream, pglogrepl.LSN, error) {
	sysID, err := c.systemID(ctx, conn)
	if err != nil {
		return nil, 0, err
	}
	if err := c.ensurePublication(ctx); err != nil {
		return nil, 0, err
	}
	slot, err := c.waitSlot(ctx)
	if err != nil {
		return nil, 0, err
	}
	if slot != nil {
		if err := pglogrepl.DropReplicationSlot(ctx, conn, c.o.Slot, pglogrepl.DropReplicationSlotOptions{}); err != nil {
			return nil, 0, c.slotErr("drop replication slot", err)
		}
		c.log.Info("postgres_cdc_slot_dropped", "slot", c.o.Slot)
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, c.o.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil {
		return nil, 0, c.slotErr("create replication slot", err)
	}
	pos, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return nil, 0, fmt.Errorf("create replication slot: consistent point %q: %w", res.ConsistentPoint, err)
	}
	c.log.Info("postgres_cdc_slot_created", "slot", c.o.Slot, "position", pos.String())
	st, err := c.stream(ctx, conn, sysID, pos)
	if err != nil {
		return nil, 0, err
	}
	return st, pos, nil
}

// Resume streams the transactions committed after position from the existing slot. A missing
// slot, an invalidated one (wal_status lost), a slot whose confirmed position is already past
// position (it was re-created after the checkpoint: the transactions in between are not in it)
// or a missing publication returns a *core.PositionLostError. A slot active in another
// connection fails with postgres.ErrSlotActive after SlotBusyTimeout.
func (c *ChangeSource) Resume(ctx context.Context, position string) (driver.ChangeStream, error) {
	pos, err := pglogrepl.ParseLSN(position)
	if err != nil {
		return nil, fmt.Errorf("postgres: cdc resume: position %q: %w", position, err)
	}
	// Resuming is a few quick exchanges: a silent server or network must not hold it.
	ctx, cancel := context.WithTimeoutCause(ctx, c.o.StallTimeout+c.o.SlotBusyTimeout,
		fmt.Errorf("postgres: cdc resume took longer than StallTimeout + SlotBusyTimeout: %w", core.ErrStreamStalled))
	defer cancel()
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: cdc resume: %w", err)
	}
	st, err := c.resume(ctx, conn, pos)
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		if cause := context.Cause(ctx); ctx.Err() != nil && errors.Is(cause, core.ErrStreamStalled) {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		return nil, fmt.Errorf("postgres: cdc resume: %w", err)
	}
	return st, nil
}

func (c *ChangeSource) resume(ctx context.Context, conn *pgconn.PgConn, pos pglogrepl.LSN) (*changeStream, error) {
	sysID, err := c.systemID(ctx, conn)
	if err != nil {
		return nil, err
	}
	lost := func(available, reason string) error {
		return &core.PositionLostError{Source: c.identity(sysID), Checkpoint: pos.String(), Available: available, Reason: reason}
	}
	ok, err := c.publicationExists(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, lost("", fmt.Sprintf("publication %s does not exist (the slot cannot decode the log without it)", c.o.Publication))
	}
	slot, err := c.waitSlot(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.checkSlot(slot, pos, lost); err != nil {
		return nil, err
	}
	st, err := c.stream(ctx, conn, sysID, pos)
	if err != nil {
		if pe := pgError(err); pe != nil && pe.Code == "42704" { // dropped since the check
			return nil, lost("", pe.Message)
		}
		return nil, err
	}
	return st, nil
}

func (c *ChangeSource) checkSlot(slot *slotState, pos pglogrepl.LSN, lost func(available, reason string) error) error {
	switch {
	case slot == nil:
		return lost("", fmt.Sprintf("replication slot %s does not exist", c.o.Slot))
	case !slot.thisDB || slot.plugin != "pgoutput":
		return fmt.Errorf("replication slot %s belongs to another database or plugin (%s)", c.o.Slot, slot.plugin)
	case slot.walStatus == "lost" || slot.confirmed == 0:
		return lost("", fmt.Sprintf("replication slot %s was invalidated (wal_status %s): the WAL it needed was removed", c.o.Slot, slot.walStatus))
	case pos < slot.confirmed:
		return lost(slot.confirmed.String(), fmt.Sprintf("replication slot %s starts at %s, after the checkpoint (it was re-created)", c.o.Slot, slot.confirmed))
	}
	return nil
}

// Retention reports the WAL the slot retains: from its restart_lsn to the current WAL
// position. HeadroomBytes is -1: the slot pins the WAL. A missing or invalidated slot returns a
// *core.PositionLostError.
func (c *ChangeSource) Retention(ctx context.Context, position string) (core.Retention, error) {
	var retained int64
	var status string
	err := c.db.QueryRow(ctx, `SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), -1)::bigint,
		coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1`, []any{c.o.Slot}, &retained, &status)
	if errors.Is(err, bridge.ErrNoRows) || (err == nil && (status == "lost" || retained < 0)) {
		sysID, _ := c.systemID(ctx, nil)
		reason := fmt.Sprintf("replication slot %s does not exist", c.o.Slot)
		if err == nil {
			reason = fmt.Sprintf("replication slot %s was invalidated (wal_status %s)", c.o.Slot, status)
		}
		return core.Retention{}, fmt.Errorf("postgres: cdc retention: %w",
			&core.PositionLostError{Source: c.identity(sysID), Checkpoint: position, Reason: reason})
	}
	if err != nil {
		return core.Retention{}, fmt.Errorf("postgres: cdc retention: %w", err)
	}
	return core.Retention{RetainedBytes: retained, HeadroomBytes: -1}, nil
}

// DropSlot drops the replication slot, so that the server no longer retains WAL for it. A
// missing slot is not an error; an active one waits SlotBusyTimeout and then fails with
// postgres.ErrSlotActive. Run it when a CDC relay is retired (or moved to another slot).
func (c *ChangeSource) DropSlot(ctx context.Context) error {
	slot, err := c.waitSlot(ctx)
	if err != nil {
		return fmt.Errorf("postgres: cdc drop slot: %w", err)
	}
	if slot == nil {
		return nil
	}
	if _, err := c.db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, c.o.Slot); err != nil {
		if pe := pgError(err); pe != nil && pe.Code == "42704" {
			return nil
		}
		return fmt.Errorf("postgres: cdc drop slot: %w", c.slotErr("drop replication slot", err))
	}
	return nil
}

// Release implements driver.LogReleaser: it drops the slot (DropSlot). A CDC relay with
// ReleaseOverCap calls it when the WAL the slot retains goes over its cap.
func (c *ChangeSource) Release(ctx context.Context) error { return c.DropSlot(ctx) }

var _ driver.LogReleaser = (*ChangeSource)(nil)

// slotErr marks "slot is active" (55006) with postgres.ErrSlotActive.
func (c *ChangeSource) slotErr(what string, err error) error {
	if pe := pgError(err); pe != nil && pe.Code == "55006" {
		return fmt.Errorf("%s: %w: %s", what, postgres.ErrSlotActive, pe.Message)
	}
	return fmt.Errorf("%s: %w", what, err)
}

type slotState struct {
	activePID int64 // 0 when inactive
	walStatus string
	plugin    string
	thisDB    bool
	confirmed pglogrepl.LSN // 0 when NULL (invalidated)
}

func (c *ChangeSource) slot(ctx context.Context) (*slotState, error) {
	var s slotState
	var confirmed string
	err := c.db.QueryRow(ctx, `SELECT coalesce(active_pid, 0)::bigint, coalesce(wal_status, ''), coalesce(plugin::text, ''),
		coalesce(database = current_database(), false), coalesce(confirmed_flush_lsn::text, '')
		FROM pg_replication_slots WHERE slot_name = $1`, []any{c.o.Slot},
		&s.activePID, &s.walStatus, &s.plugin, &s.thisDB, &confirmed)
	if errors.Is(err, bridge.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replication slot state: %w", err)
	}
	if confirmed != "" {
		if s.confirmed, err = pglogrepl.ParseLSN(confirmed); err != nil {
			return nil, fmt.Errorf("replication slot state: confirmed_flush_lsn %q: %w", confirmed, err)
		}
	}
	return &s, nil
}

// waitSlot returns the slot's state once no connection streams from it (nil when it does not
// exist), waiting at most SlotBusyTimeout: a stream that just closed releases its slot a moment
// later.
func (c *ChangeSource) waitSlot(ctx context.Context) (*slotState, error) {
	deadline := time.Now().Add(c.o.SlotBusyTimeout)
	for {
		s, err := c.slot(ctx)
		if err != nil || s == nil || s.activePID == 0 {
			return s, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: slot %s is streamed by server process %d", postgres.ErrSlotActive, c.o.Slot, s.activePID)
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (c *ChangeSource) publicationExists(ctx context.Context) (bool, error) {
	var ok bool
	if err := c.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`,
		[]any{c.o.Publication}, &ok); err != nil {
		return false, fmt.Errorf("publication: %w", err)
	}
	return ok, nil
}

// ensurePublication creates the publication unless it exists, and checks that it publishes the
// outbox's inserts.
func (c *ChangeSource) ensurePublication(ctx context.Context) error {
	ok, err := c.publicationExists(ctx)
	if err != nil {
		return err
	}
	if !ok {
		with := "publish = 'insert'"
		if c.db.Partitioned {
			with += ", publish_via_partition_root = true"
		}
		_, err := c.db.Exec(ctx, `CREATE PUBLICATION `+pgx.Identifier{c.o.Publication}.Sanitize()+` FOR TABLE `+c.db.Outbox+` WITH (`+with+`)`)
		if pe := pgError(err); pe != nil && (pe.Code == "42710" || pe.Code == "23505") {
			err = nil // created concurrently by another source of this outbox
		}
		if err != nil {
			return fmt.Errorf("create publication %s (it needs ownership of the outbox table): %w", c.o.Publication, err)
		}
		c.log.Info("postgres_cdc_publication_created", "publication", c.o.Publication)
	}
	var publishes bool
	if err := c.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables AS t JOIN pg_publication AS p
		ON p.pubname = t.pubname WHERE t.pubname = $1 AND t.schemaname = $2 AND t.tablename = $3 AND p.pubinsert)`,
		[]any{c.o.Publication, c.schema, c.table}, &publishes); err != nil {
		return fmt.Errorf("publication: %w", err)
	}
	if !publishes {
		return fmt.Errorf("publication %s does not publish the inserts of %s (for a partitioned outbox it needs publish_via_partition_root)",
			c.o.Publication, c.db.Outbox)
	}
	return nil
}

// binaryTuples reports whether pgoutput can send tuples in binary (server 14 or newer).
func binaryTuples(conn *pgconn.PgConn) bool {
	// server_version ("15.18 (Debian 15.18-0+deb12u1)") is reported at connect;
	// server_version_num is not.
	v := conn.ParameterStatus("server_version")
	major, _, _ := strings.Cut(v, ".")
	major, _, _ = strings.Cut(major, " ")
	m, err := strconv.Atoi(major)
	return err == nil && m >= 14
}

// stream starts replication at pos on conn and returns the running stream.
func (c *ChangeSource) stream(ctx context.Context, conn *pgconn.PgConn, sysID string, pos pglogrepl.LSN) (*changeStream, error) {
	args := []string{"proto_version '1'", `publication_names '"` + c.o.Publication + `"'`}
	if binaryTuples(conn) {
		// Column values in their binary send format (PostgreSQL 14+): no hex text for the
		// payload on either side.
		args = append(args, "binary 'true'")
	}
	err := pglogrepl.StartReplication(ctx, conn, c.o.Slot, pos, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: args,
	})
	if err != nil {
		return nil, c.slotErr("start replication", err)
	}
	st := &changeStream{
		src:       c,
		conn:      conn,
		pid:       conn.PID(),
		identity:  c.identity(sysID),
		start:     pos,
		confirmed: pos,
		out:       make(chan driver.ChangeTx, 16),
		kick:      make(chan struct{}, 1),
		closing:   make(chan struct{}),
		readDone:  make(chan struct{}),
		writeDone: make(chan struct{}),
	}
	go st.read()
	go st.write()
	return st, nil
}

// changeStream is one replication connection. A reader goroutine decodes the stream into
// transactions (and answers nothing itself); a writer goroutine sends the status updates (every
// StandbyTimeout, and at once after Confirm or when the server asks for one). Writes go
// straight to the connection's socket, which is safe beside the reader.
type changeStream struct {
	src      *ChangeSource
	conn     *pgconn.PgConn
	pid      uint32
	identity string
	start    pglogrepl.LSN

	mu        sync.Mutex
	confirmed pglogrepl.LSN
	err       error // the first failure
	closed    bool

	// waiting is when the reader began to wait for the server's next message (unix ns); 0
	// while it is decoding or handing a transaction over. The writer's liveness check reads it.
	waiting atomic.Int64

	out       chan driver.ChangeTx // closed by the reader when it ends
	kick      chan struct{}
	closing   chan struct{}
	readDone  chan struct{}
	writeDone chan struct{}
	closeOnce sync.Once

	visMu  sync.Mutex  // AwaitVisible's state
	unseen []streamed  // handed out, not yet shown by a snapshot, in stream order
	snap   *pgSnapshot // the last snapshot read
}

var errStreamClosed = errors.New("postgres: change stream closed")

// Next returns the next committed transaction, or a keepalive position (no records).
func (st *changeStream) Next(ctx context.Context) (driver.ChangeTx, error) {
	st.mu.Lock()
	closed := st.closed
	st.mu.Unlock()
	if closed {
		return driver.ChangeTx{}, errStreamClosed
	}
	select {
	case tx, ok := <-st.out:
		if !ok {
			return driver.ChangeTx{}, st.failure()
		}
		return tx, nil
	case <-ctx.Done():
		return driver.ChangeTx{}, ctx.Err()
	}
}

func (st *changeStream) failure() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return errStreamClosed
	}
	if st.err != nil {
		return st.err
	}
	return errStreamClosed
}

// Confirm records position as the slot's flushed position; the status update that tells the
// server is sent at once by the writer goroutine. Positions never move backwards.
func (st *changeStream) Confirm(_ context.Context, position string) error {
	pos, err := pglogrepl.ParseLSN(position)
	if err != nil {
		return fmt.Errorf("postgres: cdc confirm: position %q: %w", position, err)
	}
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return errStreamClosed
	}
	if pos > st.confirmed {
		st.confirmed = pos
	}
	st.mu.Unlock()
	select {
	case st.kick <- struct{}{}:
	default:
	}
	return nil
}

// Close sends a last status update, closes the connection and waits (at most 5 s) until the
// server has released the slot, so that the next Start or Resume finds it free.
func (st *changeStream) Close() error {
	st.closeOnce.Do(func() {
		st.mu.Lock()
		st.closed = true
		st.mu.Unlock()
		close(st.closing)
		<-st.writeDone
		_ = st.sendStatus(false, time.Second) // the last confirmed position
		_ = st.conn.Conn().Close()
		<-st.readDone
		_ = st.conn.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		terminateAt := time.Now().Add(time.Second)
		for ctx.Err() == nil {
			s, err := st.src.slot(ctx)
			if err != nil || s == nil || s.activePID != int64(st.pid) {
				return
			}
			if !terminateAt.IsZero() && time.Now().After(terminateAt) {
				// The server did not notice the close (a silent network holds the FIN): end
				// this stream's own walsender rather than wait for wal_sender_timeout.
				terminateAt = time.Time{}
				st.src.terminate(ctx, st.pid)
			}
			t := time.NewTimer(20 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	})
	return nil
}

// terminate ends the server process of a closed stream of this source that still holds the
// slot (pid is that stream's own walsender).
func (c *ChangeSource) terminate(ctx context.Context, pid uint32) {
	var done bool
	err := c.db.QueryRow(ctx, `SELECT coalesce(bool_or(pg_terminate_backend(active_pid)), false)
		FROM pg_replication_slots WHERE slot_name = $1 AND active_pid = $2`, []any{c.o.Slot, int64(pid)}, &done)
	c.log.Warn("postgres_cdc_walsender_terminated", "slot", c.o.Slot, "pid", pid, "terminated", done, "error", err)
}

// fail records the stream's first failure and closes the socket, which ends the reader.
func (st *changeStream) fail(err error) {
	st.mu.Lock()
	if st.err == nil && !st.closed {
		st.err = err
	}
	st.mu.Unlock()
	_ = st.conn.Conn().Close()
}

// write sends the status updates, and checks the stream's liveness: a reply-requested update
// that the server leaves unanswered for StallTimeout, while the reader waits for it, fails the
// stream with ErrStreamStalled.
func (st *changeStream) write() {
	defer close(st.writeDone)
	t := time.NewTicker(st.src.o.StandbyTimeout)
	defer t.Stop()
	timeout := st.src.o.StandbyTimeout + 10*time.Second
	if err := st.sendStatus(false, timeout); err != nil { // report the start position at once
		st.fail(fmt.Errorf("postgres: cdc status update: %w", err))
		return
	}
	var (
		check *time.Timer      // armed after a reply-requested update, until StallTimeout
		due   <-chan time.Time // check's channel, nil when none is armed
		asked time.Time        // when the update check waits on was sent
	)
	defer func() {
		if check != nil {
			check.Stop()
		}
	}()
	for {
		var err error
		select {
		case <-st.closing:
			return
		case <-t.C:
			now := time.Now()
			err = st.sendStatus(true, timeout) // ask for a keepalive: its position lets the checkpoint move
			if err == nil && due == nil {
				asked = now
				check = time.NewTimer(st.src.o.StallTimeout)
				due = check.C
			}
		case <-st.kick:
			err = st.sendStatus(false, timeout)
		case <-due:
			due = nil
			// Stalled: the reader has waited since before the update asked for a reply, and
			// nothing came. A reader busy handing transactions over is not waiting.
			if w := st.waiting.Load(); w != 0 && w <= asked.UnixNano() {
				err = fmt.Errorf("postgres: cdc stream: nothing received from the server for %v after asking for a reply (StallTimeout %v): %w",
					time.Since(time.Unix(0, w)).Round(time.Millisecond), st.src.o.StallTimeout, core.ErrStreamStalled)
				st.src.log.Warn("postgres_cdc_stream_stalled", "slot", st.src.o.Slot, "pid", st.pid, "error", err)
				st.fail(err)
				return
			}
		}
		if err != nil {
			st.fail(fmt.Errorf("postgres: cdc status update: %w", err))
			return
		}
	}
}

// sendStatus sends a standby status update whose written, flushed and applied positions are all
// the last confirmed position (never one the relay has not checkpointed).
func (st *changeStream) sendStatus(replyRequested bool, timeout time.Duration) error {
	st.mu.Lock()
	pos := st.confirmed
	st.mu.Unlock()
	data := make([]byte, 0, 34)
	data = append(data, pglogrepl.StandbyStatusUpdateByteID)
	data = binary.BigEndian.AppendUint64(data, uint64(pos))
	data = binary.BigEndian.AppendUint64(data, uint64(pos))
	data = binary.BigEndian.AppendUint64(data, uint64(pos))
	data = binary.BigEndian.AppendUint64(data, uint64(time.Since(pgEpoch).Microseconds()))
	if replyRequested {
		data = append(data, 1)
	} else {
		data = append(data, 0)
	}
	msg, err := (&pgproto3.CopyData{Data: data}).Encode(nil)
	if err != nil {
		return err
	}
	nc := st.conn.Conn()
	if err := nc.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err = nc.Write(msg)
	return err
}

var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// read decodes the replication stream until the connection ends.
func (st *changeStream) read() {
	defer close(st.readDone)
	defer close(st.out)
	err := st.decode()
	if err == nil {
		return
	}
	st.mu.Lock()
	closed, first := st.closed, st.err
	st.mu.Unlock()
	if closed {
		return
	}
	if first != nil {
		return
	}
	st.fail(st.src.streamErr(st.identity, st.start, err))
}

// streamErr turns a failed stream into a *core.PositionLostError when the slot is gone or
// invalidated, or the publication is.
func (c *ChangeSource) streamErr(identity string, start pglogrepl.LSN, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lost := func(available, reason string) error {
		return fmt.Errorf("postgres: cdc stream: %w (%w)",
			&core.PositionLostError{Source: identity, Checkpoint: start.String(), Available: available, Reason: reason}, err)
	}
	if slot, serr := c.slot(ctx); serr == nil {
		if slot == nil {
			return lost("", fmt.Sprintf("replication slot %s does not exist", c.o.Slot))
		}
		if slot.walStatus == "lost" {
			return lost("", fmt.Sprintf("replication slot %s was invalidated (wal_status lost)", c.o.Slot))
		}
	}
	if ok, perr := c.publicationExists(ctx); perr == nil && !ok {
		return lost("", fmt.Sprintf("publication %s does not exist", c.o.Publication))
	}
	return fmt.Errorf("postgres: cdc stream: %w", err)
}

func (st *changeStream) decode() error {
	d := decoder{schema: st.src.schema, table: st.src.table, partitioned: st.src.db.Partitioned, rels: map[uint32]*relation{}}
	last := st.start        // the last position handed out (or the start)
	var lastEmpty time.Time // when the last position-only ChangeTx was handed out
	throttle := st.src.o.StandbyTimeout / 2
	emit := func(tx driver.ChangeTx) bool {
		select {
		case st.out <- tx:
			return true
		case <-st.closing:
			return false
		}
	}
	for {
		st.waiting.Store(time.Now().UnixNano())
		msg, err := st.conn.ReceiveMessage(context.Background())
		st.waiting.Store(0)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("keepalive: %w", err)
				}
				if ka.ReplyRequested {
					select {
					case st.kick <- struct{}{}:
					default:
					}
				}
				// Between transactions the server's WAL position is a transaction boundary
				// for this stream: every transaction that committed before it was sent.
				if !d.inTx && ka.ServerWALEnd > last && time.Since(lastEmpty) >= throttle {
					last, lastEmpty = ka.ServerWALEnd, time.Now()
					if !emit(driver.ChangeTx{Position: last.String()}) {
						return nil
					}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return fmt.Errorf("xlog data: %w", err)
				}
				tx, done, err := d.message(xld.WALData)
				if err != nil {
					return err
				}
				if !done {
					continue
				}
				pos, err := pglogrepl.ParseLSN(tx.Position)
				if err != nil {
					return err
				}
				if len(tx.Records) == 0 { // a transaction without outbox rows moves the position only
					if pos <= last || time.Since(lastEmpty) < throttle {
						continue
					}
					lastEmpty = time.Now()
				} else {
					st.noteStreamed(pos, d.xid)
				}
				last = max(last, pos)
				if !emit(tx) {
					return nil
				}
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		case *pgproto3.CopyDone:
			return errors.New("the server ended the replication stream")
		}
	}
}

// pgError returns the server error in err's chain, if any.
func pgError(err error) *pgconn.PgError {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}
