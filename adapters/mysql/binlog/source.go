package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/mysql/internal/bridge"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// GTIDMode selects how a ChangeSource encodes and resumes positions.
type GTIDMode int

const (
	// GTIDAuto (default) uses GTIDs when the server has them: MariaDB with a non-empty
	// @@gtid_binlog_pos, MySQL with @@gtid_mode = ON; binary log file and offset otherwise.
	GTIDAuto GTIDMode = iota
	// GTIDOn requires GTIDs (Start and Resume fail without them).
	GTIDOn
	// GTIDOff always uses binary log file and offset.
	GTIDOff
)

// Options configures a ChangeSource (NewChangeSource). The zero value (or nil) takes every
// default.
type Options struct {
	// DSN is the go-sql-driver/mysql DSN of the binlog connection: it takes the address (tcp or
	// unix), user, password and TLS configuration. The user needs REPLICATION SLAVE and
	// REPLICATION CLIENT (BINLOG MONITOR on MariaDB). Default: the Store's mysql.Options.DSN (a
	// *sql.DB does not reveal the address and credentials it connects with). Set it to read the
	// log as another user.
	DSN string
	// ServerID is the replica server id the binlog connection registers with. It must differ
	// from the server's @@server_id and from every other replica or binlog reader of the
	// server: the server disconnects an older connection with the same id. Default: a random
	// id in [2^31, 2^31+2^30) drawn for every stream (Start or Resume), never the server's
	// own; set it only when one stream of this source runs at a time.
	ServerID uint32
	// Flavor is "mysql" or "mariadb". Default: "mariadb" when VERSION() contains "MariaDB",
	// else "mysql".
	Flavor string
	// GTID selects the position encoding. Default GTIDAuto.
	GTID GTIDMode
	// HeartbeatPeriod is how often an idle server sends a heartbeat on the binlog connection.
	// It sets the stream's liveness bound: a connection on which nothing at all arrives for
	// three periods (a silent server or network, the socket left open) is closed and Next
	// returns an error wrapping core.ErrStreamStalled; a CDC relay then resumes from its
	// checkpoint on a new connection. Opening a connection is bounded by 10 s. Default 5s (a
	// 15 s bound).
	HeartbeatPeriod time.Duration
	// Logger receives the source's own logs. Default: the Store's logger (mysql.Options.Logger).
	Logger *slog.Logger
	// SyncerLogger receives the logs of the go-mysql binlog syncer (verbose: every connect
	// and rotation at Info). Default: discarded.
	SyncerLogger *slog.Logger
}

// ChangeSource reads the outbox table's inserts from the server's binary log
// (driver.ChangeSource). It needs binlog_format=ROW and binlog_row_image=FULL;
// binlog_row_metadata=FULL is recommended (column names in the log; without it the column
// order of information_schema at the source's first use is assumed, so an ALTER TABLE of
// the outbox needs a restart).
//
// Positions are strings, resumable by any ChangeSource of the same server and table:
//
//	file:<binlog file>:<offset>                       without GTIDs
//	gtid:<GTID set>;file:<binlog file>:<offset>       with GTIDs
//
// The offset is the end of the transaction's commit event (XID, or the COMMIT / DDL query)
// in that file. A GTID position resumes by its GTID set (it survives a failover to a replica
// with the same GTIDs); the file part, kept alongside, measures Retention. Each ChangeTx
// holds one committed transaction; runs of transactions that wrote no outbox row and are
// already received are coalesced into one empty ChangeTx (at most 1,000 of them). A
// transaction that wrote only the CDC checkpoint table (the relay's own SaveCheckpoint) is
// skipped: its position alone would make an idle relay checkpoint again and again.
// UPDATE and DELETE rows events (the relay's own marks) are ignored.
type ChangeSource struct {
	store bridge.Store
	o     Options
	cfg   *mysqldrv.Config
	log   *slog.Logger

	mu       sync.Mutex
	detected bool
	info     serverInfo
}

type serverInfo struct {
	flavor   string
	serverID uint32
	identity string
	gtid     bool
	columns  []string // information_schema column order of the outbox table
}

// coalesceEmpty bounds the empty transactions one Next coalesces.
const coalesceEmpty = 1000

// NewChangeSource returns the change log of store's outbox: its inserts in the server's binary
// log. opts may be nil. It does not touch the database: the server is inspected on the first
// call that needs it. Without a DSN (here or in the Store's mysql.Options) it fails with a
// *core.OptionError naming DSN.
func NewChangeSource(store *mysql.Store, opts *Options) (*ChangeSource, error) {
	if store == nil {
		return nil, &core.OptionError{Field: "store", Reason: "must not be nil"}
	}
	s := bridge.Of(store)
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.DSN == "" {
		o.DSN = s.DSN
	}
	if o.DSN == "" {
		return nil, &core.OptionError{Field: "DSN", Reason: "is required here or in the Store's Options: the binlog connection needs the address and credentials a *sql.DB does not reveal"}
	}
	cfg, err := mysqldrv.ParseDSN(o.DSN)
	if err != nil {
		return nil, &core.OptionError{Field: "DSN", Reason: err.Error()}
	}
	if cfg.Net != "tcp" && cfg.Net != "unix" {
		return nil, &core.OptionError{Field: "DSN", Reason: "network must be tcp or unix"}
	}
	switch o.Flavor {
	case "", gomysql.MySQLFlavor, gomysql.MariaDBFlavor:
	default:
		return nil, &core.OptionError{Field: "Flavor", Reason: `must be "mysql" or "mariadb"`}
	}
	if o.GTID < GTIDAuto || o.GTID > GTIDOff {
		return nil, &core.OptionError{Field: "GTID", Reason: "unknown GTID mode"}
	}
	if o.HeartbeatPeriod < 0 {
		return nil, &core.OptionError{Field: "HeartbeatPeriod", Reason: "must not be negative"}
	}
	if o.HeartbeatPeriod == 0 {
		o.HeartbeatPeriod = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = s.Logger
	}
	if o.SyncerLogger == nil {
		o.SyncerLogger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &ChangeSource{store: s, o: o, cfg: cfg, log: o.Logger}, nil
}

// detect inspects the server once: flavor, identity, GTIDs, binlog settings, columns.
func (c *ChangeSource) detect(ctx context.Context) (serverInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.detected {
		return c.info, nil
	}
	db := c.store.DB
	var info serverInfo
	var version, format, image string
	var logBin int
	if err := db.QueryRowContext(ctx, `SELECT VERSION(), @@server_id, @@log_bin, @@binlog_format, @@binlog_row_image`).
		Scan(&version, &info.serverID, &logBin, &format, &image); err != nil {
		return serverInfo{}, c.store.Wrap("cdc: inspect server", err)
	}
	if logBin != 1 {
		return serverInfo{}, fmt.Errorf("mysql: cdc: the server has no binary log (start it with --log-bin)")
	}
	if !strings.EqualFold(format, "ROW") || !strings.EqualFold(image, "FULL") {
		return serverInfo{}, fmt.Errorf("mysql: cdc: binlog_format is %s and binlog_row_image %s; ROW and FULL are required", format, image)
	}
	info.flavor = c.o.Flavor
	if info.flavor == "" {
		info.flavor = gomysql.MySQLFlavor
		if strings.Contains(strings.ToLower(version), "mariadb") {
			info.flavor = gomysql.MariaDBFlavor
		}
	}
	ident := strconv.FormatUint(uint64(info.serverID), 10)
	hasGTID := false
	if info.flavor == gomysql.MariaDBFlavor {
		var pos string
		if err := db.QueryRowContext(ctx, `SELECT @@gtid_binlog_pos`).Scan(&pos); err != nil {
			return serverInfo{}, c.store.Wrap("cdc: inspect server", err)
		}
		hasGTID = pos != ""
	} else {
		var mode string
		if err := db.QueryRowContext(ctx, `SELECT @@server_uuid, @@gtid_mode`).Scan(&ident, &mode); err != nil {
			return serverInfo{}, c.store.Wrap("cdc: inspect server", err)
		}
		hasGTID = strings.EqualFold(mode, "ON")
	}
	switch c.o.GTID {
	case GTIDAuto:
		info.gtid = hasGTID
	case GTIDOn:
		if !hasGTID {
			return serverInfo{}, fmt.Errorf("mysql: cdc: GTIDOn, but the server has no GTIDs")
		}
		info.gtid = true
	}
	info.identity = "mysql:" + ident + "/" + c.store.Database + "." + c.store.Outbox
	cols, err := queryStrings(ctx, db, `SELECT COLUMN_NAME FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, c.store.Database, c.store.Outbox)
	if err != nil {
		return serverInfo{}, c.store.Wrap("cdc: outbox columns", err)
	}
	if len(cols) == 0 {
		return serverInfo{}, fmt.Errorf("mysql: cdc: %w", &core.NotMigratedError{Missing: "table " + c.store.Outbox})
	}
	info.columns = cols
	c.info, c.detected = info, true
	return info, nil
}

// Identity implements driver.ChangeSource: "mysql:<server>/<database>.<table>", where server
// is @@server_uuid (MySQL) or @@server_id (MariaDB, which has no server UUID).
func (c *ChangeSource) Identity(ctx context.Context) (string, error) {
	info, err := c.detect(ctx)
	if err != nil {
		return "", err
	}
	return info.identity, nil
}

// position is a decoded position string.
type position struct {
	gtid    string // "" without GTIDs
	hasGTID bool
	file    string
	offset  uint32
}

func (p position) String() string {
	f := "file:" + p.file + ":" + strconv.FormatUint(uint64(p.offset), 10)
	if p.hasGTID {
		return "gtid:" + p.gtid + ";" + f
	}
	return f
}

func parsePosition(s string) (position, error) {
	var p position
	rest := s
	if g, ok := strings.CutPrefix(s, "gtid:"); ok {
		i := strings.LastIndex(g, ";file:")
		if i < 0 {
			return position{}, fmt.Errorf("mysql: cdc: position %q: no file part", s)
		}
		p.gtid, p.hasGTID, rest = g[:i], true, g[i+1:]
	}
	f, ok := strings.CutPrefix(rest, "file:")
	if !ok {
		return position{}, fmt.Errorf("mysql: cdc: position %q: want gtid:<set>;file:<name>:<offset> or file:<name>:<offset>", s)
	}
	i := strings.LastIndexByte(f, ':')
	if i <= 0 {
		return position{}, fmt.Errorf("mysql: cdc: position %q: no offset", s)
	}
	off, err := strconv.ParseUint(f[i+1:], 10, 32)
	if err != nil {
		return position{}, fmt.Errorf("mysql: cdc: position %q: offset: %v", s, err)
	}
	p.file, p.offset = f[:i], uint32(off)
	return p, nil
}

// Start implements driver.ChangeSource. On MariaDB the position is that of a consistent
// snapshot (binlog_snapshot_file/position), so every transaction before it is committed in
// the engine, and its GTID set is BINLOG_GTID_POS of that position. On MySQL it is SHOW
// BINARY LOG STATUS (or SHOW MASTER STATUS); a transaction written to the binary log but not
// yet committed in the engine when Start reads it may then be invisible to a query begun at
// once (a window of microseconds).
func (c *ChangeSource) Start(ctx context.Context) (driver.ChangeStream, string, error) {
	info, err := c.detect(ctx)
	if err != nil {
		return nil, "", err
	}
	pos, err := c.head(ctx, info)
	if err != nil {
		return nil, "", err
	}
	st, err := c.open(ctx, info, pos)
	if err != nil {
		return nil, "", err
	}
	// Opening the stream takes a while (a connection, a replica registration). The position
	// returned is the head once the stream is open, so that fewer transactions are both
	// visible to the caller's next queries and streamed; the stream skips what lies between.
	later, err := c.head(ctx, info)
	if err != nil {
		_ = st.Close()
		return nil, "", err
	}
	if later != pos {
		st.skipTo = &later
	}
	return st, later.String(), nil
}

// head reads the current end of the binary log.
func (c *ChangeSource) head(ctx context.Context, info serverInfo) (position, error) {
	db := c.store.DB
	var p position
	if info.flavor == gomysql.MariaDBFlavor {
		conn, err := db.Conn(ctx)
		if err != nil {
			return position{}, c.store.Wrap("cdc: start", err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `START TRANSACTION WITH CONSISTENT SNAPSHOT`); err != nil {
			return position{}, c.store.Wrap("cdc: start", err)
		}
		rows, err := conn.QueryContext(ctx, `SHOW STATUS LIKE 'binlog_snapshot_%'`)
		if err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
			return position{}, c.store.Wrap("cdc: start", err)
		}
		var off string
		for rows.Next() {
			var name, value string
			if err := rows.Scan(&name, &value); err != nil {
				rows.Close()
				return position{}, c.store.Wrap("cdc: start", err)
			}
			switch strings.ToLower(name) {
			case "binlog_snapshot_file":
				p.file = value
			case "binlog_snapshot_position":
				off = value
			}
		}
		rows.Close()
		if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
			return position{}, c.store.Wrap("cdc: start", err)
		}
		n, err := strconv.ParseUint(off, 10, 32)
		if err != nil || p.file == "" {
			return position{}, fmt.Errorf("mysql: cdc: start: no binlog snapshot position (file %q, offset %q)", p.file, off)
		}
		p.offset = uint32(n)
		if info.gtid {
			var g sql.NullString
			if err := conn.QueryRowContext(ctx, `SELECT BINLOG_GTID_POS(?, ?)`, p.file, p.offset).Scan(&g); err != nil {
				return position{}, c.store.Wrap("cdc: start: gtid position", err)
			}
			if !g.Valid {
				return position{}, fmt.Errorf("mysql: cdc: start: BINLOG_GTID_POS(%s, %d) is NULL", p.file, p.offset)
			}
			p.gtid, p.hasGTID = g.String, true
		}
		return p, nil
	}
	rows, err := db.QueryContext(ctx, `SHOW BINARY LOG STATUS`)
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) && me.Number == 1064 { // a parse error: before MySQL 8.2
		rows, err = db.QueryContext(ctx, `SHOW MASTER STATUS`)
	}
	if err != nil {
		return position{}, c.store.Wrap("cdc: start", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return position{}, c.store.Wrap("cdc: start", err)
	}
	if !rows.Next() {
		return position{}, fmt.Errorf("mysql: cdc: start: SHOW MASTER STATUS is empty (binary log disabled?)")
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return position{}, c.store.Wrap("cdc: start", err)
	}
	p.file = vals[0].String
	n, err := strconv.ParseUint(vals[1].String, 10, 32)
	if err != nil {
		return position{}, fmt.Errorf("mysql: cdc: start: offset %q: %v", vals[1].String, err)
	}
	p.offset = uint32(n)
	if info.gtid && len(vals) >= 5 {
		p.gtid, p.hasGTID = strings.ReplaceAll(vals[4].String, "\n", ""), true
	}
	return p, rows.Err()
}

// Resume implements driver.ChangeSource. A position with a GTID set resumes by GTID (unless
// GTIDOff); otherwise by file and offset, and a file no longer among SHOW BINARY LOGS is
// reported here. A purged GTID position is reported by the first Next (the server answers
// error 1236 to the dump request).
func (c *ChangeSource) Resume(ctx context.Context, pos string) (driver.ChangeStream, error) {
	info, err := c.detect(ctx)
	if err != nil {
		return nil, err
	}
	p, err := parsePosition(pos)
	if err != nil {
		return nil, err
	}
	if !info.gtid || !p.hasGTID {
		p.hasGTID, p.gtid = false, ""
		logs, err := c.binaryLogs(ctx)
		if err != nil {
			return nil, err
		}
		found := false
		for _, l := range logs {
			found = found || l.name == p.file
		}
		if !found {
			return nil, c.lost(ctx, info, pos, fmt.Sprintf("binary log %s is no longer on the server", p.file))
		}
	}
	return c.open(ctx, info, p)
}

type binaryLog struct {
	name string
	size int64
}

// binaryLogs is SHOW BINARY LOGS, oldest first.
func (c *ChangeSource) binaryLogs(ctx context.Context) ([]binaryLog, error) {
	rows, err := c.store.DB.QueryContext(ctx, `SHOW BINARY LOGS`)
	if err != nil {
		return nil, c.store.Wrap("cdc: show binary logs", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, c.store.Wrap("cdc: show binary logs", err)
	}
	var out []binaryLog
	for rows.Next() {
		var l binaryLog
		dest := []any{&l.name, &l.size}
		for range len(cols) - 2 {
			dest = append(dest, new(sql.RawBytes))
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, c.store.Wrap("cdc: show binary logs", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, c.store.Wrap("cdc: show binary logs", err)
	}
	return out, nil
}

// lost builds the *core.PositionLostError of checkpoint; Available is the start of the oldest
// binary log still on the server (with its GTID set on MariaDB in GTID mode).
func (c *ChangeSource) lost(ctx context.Context, info serverInfo, checkpoint, reason string) error {
	e := &core.PositionLostError{Source: info.identity, Checkpoint: checkpoint, Reason: reason}
	ctx = context.WithoutCancel(ctx)
	if logs, err := c.binaryLogs(ctx); err == nil && len(logs) > 0 {
		p := position{file: logs[0].name, offset: 4}
		if info.gtid && info.flavor == gomysql.MariaDBFlavor {
			var g sql.NullString
			if err := c.store.DB.QueryRowContext(ctx, `SELECT BINLOG_GTID_POS(?, 4)`, p.file).Scan(&g); err == nil && g.Valid {
				p.gtid, p.hasGTID = g.String, true
			}
		}
		e.Available = p.String()
	}
	return e
}

// Retention implements driver.ChangeSource from SHOW BINARY LOGS and the file part of pos:
// RetainedBytes from pos to the end of the newest log, HeadroomBytes from the start of the
// oldest log to pos. A position whose file is gone reports all logs retained and no headroom.
func (c *ChangeSource) Retention(ctx context.Context, pos string) (core.Retention, error) {
	p, err := parsePosition(pos)
	if err != nil {
		return core.Retention{}, err
	}
	logs, err := c.binaryLogs(ctx)
	if err != nil {
		return core.Retention{}, err
	}
	var r core.Retention
	found := false
	for _, l := range logs {
		switch {
		case found:
			r.RetainedBytes += l.size
		case l.name == p.file:
			found = true
			r.RetainedBytes += max(l.size-int64(p.offset), 0)
			r.HeadroomBytes += min(int64(p.offset), l.size)
		default:
			r.HeadroomBytes += l.size
		}
	}
	if !found {
		var total int64
		for _, l := range logs {
			total += l.size
		}
		return core.Retention{RetainedBytes: total, HeadroomBytes: 0}, nil
	}
	return r, nil
}

// open starts a binlog stream after p.
func (c *ChangeSource) open(ctx context.Context, info serverInfo, p position) (*changeStream, error) {
	id := c.o.ServerID
	for id == 0 || id == info.serverID {
		id = 1<<31 + rand.Uint32N(1<<30)
	}
	var host string
	var port uint16
	var dial func(ctx context.Context, network, address string) (net.Conn, error)
	if c.cfg.Net == "unix" {
		sock := c.cfg.Addr
		host, port = "localhost", 0
		dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
	} else {
		h, ps, err := net.SplitHostPort(c.cfg.Addr)
		if err != nil {
			return nil, &core.OptionError{Field: "DSN", Reason: "address: " + err.Error()}
		}
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil {
			return nil, &core.OptionError{Field: "DSN", Reason: "port: " + err.Error()}
		}
		host, port = h, uint16(n)
	}
	st := &changeStream{
		src:        c,
		info:       info,
		from:       p.String(),
		file:       p.file,
		schema:     []byte(c.store.Database),
		table:      []byte(c.store.Outbox),
		checkpoint: []byte(c.store.Checkpoint),
		fallback:   info.columns,
	}
	cfg := replication.BinlogSyncerConfig{
		ServerID:                id,
		Flavor:                  info.flavor,
		Host:                    host,
		Port:                    port,
		User:                    c.cfg.User,
		Password:                c.cfg.Passwd,
		Charset:                 "utf8mb4",
		TLSConfig:               c.cfg.TLS,
		ParseTime:               true,
		TimestampStringLocation: time.UTC,
		HeartbeatPeriod:         c.o.HeartbeatPeriod,
		ReadTimeout:             3 * c.o.HeartbeatPeriod,
		DisableRetrySync:        true, // a broken stream is an error: the relay resumes from its checkpoint
		Logger:                  c.o.SyncerLogger,
		Dialer:                  dial,
		RowsEventDecodeFunc:     st.decodeRows,
	}
	st.syncer = replication.NewBinlogSyncer(cfg)
	var err error
	if p.hasGTID {
		var set gomysql.GTIDSet
		set, err = gomysql.ParseGTIDSet(info.flavor, p.gtid)
		if err != nil {
			st.syncer.Close()
			return nil, fmt.Errorf("mysql: cdc: position %q: gtid set: %v", st.from, err)
		}
		st.streamer, err = st.syncer.StartSyncGTID(set)
	} else {
		st.streamer, err = st.syncer.StartSync(gomysql.Position{Name: p.file, Pos: p.offset})
	}
	if err != nil {
		st.syncer.Close()
		if isPositionLost(err) {
			return nil, c.lost(ctx, info, st.from, err.Error())
		}
		return nil, fmt.Errorf("mysql: cdc: start binlog stream: %w", err)
	}
	c.log.Debug("mysql_cdc_stream_open", "position", st.from, "server_id", id, "flavor", info.flavor)
	return st, nil
}

func isPositionLost(err error) bool {
	var me *gomysql.MyError
	if errors.As(err, &me) {
		return me.Code == gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG
	}
	return strings.Contains(err.Error(), "ERROR 1236 ")
}

// changeStream is one binlog connection (driver.ChangeStream). Next is not safe for concurrent
// use; Close may be called at any time.
type changeStream struct {
	src      *ChangeSource
	info     serverInfo
	from     string // the position the stream started at
	syncer   *replication.BinlogSyncer
	streamer *replication.BinlogStreamer

	schema, table, checkpoint []byte
	fallback                  []string // information_schema column order

	// The current transaction's rows events: of the checkpoint table (own) and of others.
	own, other bool

	buf  []*replication.BinlogEvent
	next int // index of the next event of buf

	file    string // current binlog file (from the last Rotate)
	inTx    bool
	records []driver.Record
	err     error // sticky

	skipTo *position // Start: transactions ending at or before it are dropped

	cols     [][]byte // column names the last mapping was built from
	colIndex [numFields]int

	closeOnce sync.Once
}

// decodeRows is the syncer's RowsEventDecodeFunc: only the outbox table's inserts are
// decoded; every other rows event keeps its header and no rows.
func (st *changeStream) decodeRows(re *replication.RowsEvent, data []byte) error {
	pos, err := re.DecodeHeader(data)
	if err != nil {
		return err
	}
	if re.Type() != replication.EnumRowsEventTypeInsert || string(re.Table.Table) != string(st.table) ||
		string(re.Table.Schema) != string(st.schema) {
		return nil
	}
	return re.DecodeData(pos, data)
}

// event returns the next binlog event: from what the syncer has buffered, else blocking.
func (st *changeStream) event(ctx context.Context) (*replication.BinlogEvent, error) {
	if st.next < len(st.buf) {
		e := st.buf[st.next]
		st.buf[st.next] = nil
		st.next++
		return e, nil
	}
	st.refill()
	if st.next < len(st.buf) {
		return st.event(ctx)
	}
	return st.streamer.GetEvent(ctx)
}

// refill takes every event the syncer has buffered, without blocking.
func (st *changeStream) refill() {
	st.buf = append(st.buf[:0], st.streamer.DumpEvents()...)
	st.next = 0
}

// pending reports whether an event is available without blocking.
func (st *changeStream) pending() bool {
	if st.next < len(st.buf) {
		return true
	}
	st.refill()
	return len(st.buf) > 0
}

// Next implements driver.ChangeStream.
func (st *changeStream) Next(ctx context.Context) (driver.ChangeTx, error) {
	if st.err != nil {
		return driver.ChangeTx{}, st.err
	}
	var empty string // position of the last coalesced empty transaction
	coalesced := 0
	for {
		ev, err := st.event(ctx)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				if empty != "" {
					return driver.ChangeTx{Position: empty}, nil
				}
				return driver.ChangeTx{}, err
			}
			st.err = st.streamError(err)
			return driver.ChangeTx{}, st.err
		}
		var commit bool
		var gset gomysql.GTIDSet
		switch e := ev.Event.(type) {
		case *replication.RotateEvent:
			st.file = string(e.NextLogName)
		case *replication.MariadbGTIDEvent:
			st.startTx()
			st.inTx = !e.IsStandalone()
		case *replication.GTIDEvent:
			st.startTx()
		case *replication.QueryEvent:
			switch q := string(e.Query); {
			case strings.EqualFold(q, "BEGIN"):
				st.startTx()
				st.inTx = true
			case strings.EqualFold(q, "COMMIT"):
				commit, gset = true, e.GSet
			case strings.EqualFold(q, "ROLLBACK"):
				// Non-transactional changes of a rolled back transaction: never outbox rows.
				st.records = st.records[:0]
				commit, gset = true, e.GSet
			case !st.inTx:
				commit, gset = true, e.GSet // DDL and other standalone statements
			}
		case *replication.XIDEvent:
			commit, gset = true, e.GSet
		case *replication.TransactionPayloadEvent:
			// MySQL binlog transaction compression: the transaction's events, in order.
			inner := make([]*replication.BinlogEvent, 0, len(e.Events)+len(st.buf)-st.next)
			inner = append(inner, e.Events...)
			inner = append(inner, st.buf[st.next:]...)
			st.buf, st.next = inner, 0
		case *replication.RowsEvent:
			if e.Table != nil && string(e.Table.Table) == string(st.checkpoint) && string(e.Table.Schema) == string(st.schema) {
				st.own = true
			} else {
				st.other = true
			}
			if len(e.Rows) > 0 {
				if err := st.appendRows(e); err != nil {
					st.err = err
					return driver.ChangeTx{}, err
				}
			}
		}
		if !commit {
			continue
		}
		st.inTx = false
		ownOnly := st.own && !st.other && len(st.records) == 0
		st.own, st.other = false, false
		if ownOnly {
			// A CDC relay's own checkpoint write: returning its position would make the relay
			// checkpoint again, and so on for ever (the idle relay writing the binary log).
			if empty != "" && !st.pending() {
				return driver.ChangeTx{Position: empty}, nil
			}
			continue
		}
		p := position{file: st.file, offset: ev.Header.LogPos}
		if st.skipTo != nil {
			if !fileAfter(p, *st.skipTo) {
				st.records = st.records[:0]
				continue
			}
			st.skipTo = nil
		}
		if gset != nil {
			p.gtid, p.hasGTID = gset.String(), true
		}
		pos := p.String()
		if len(st.records) > 0 {
			recs := st.records
			st.records = nil
			return driver.ChangeTx{Records: recs, Position: pos}, nil
		}
		empty = pos
		coalesced++
		if coalesced >= coalesceEmpty || !st.pending() {
			return driver.ChangeTx{Position: empty}, nil
		}
	}
}

// fileAfter reports whether the file part of a is after that of b. Binary log files share
// their base name and number their extension (binlog.000009 < binlog.000010 <
// binlog.1000000).
func fileAfter(a, b position) bool {
	if a.file != b.file {
		return binlogSeq(a.file) > binlogSeq(b.file)
	}
	return a.offset > b.offset
}

func binlogSeq(name string) uint64 {
	n, _ := strconv.ParseUint(name[strings.LastIndexByte(name, '.')+1:], 10, 64)
	return n
}

func (st *changeStream) startTx() {
	st.inTx = false
	st.own, st.other = false, false
	st.records = st.records[:0]
}

// streamError maps a syncer error: error 1236 is a lost position, a read deadline that passed
// (the syncer's ReadTimeout) a stalled stream.
func (st *changeStream) streamError(err error) error {
	if isPositionLost(err) {
		return st.src.lost(context.Background(), st.info, st.from, err.Error())
	}
	if isReadTimeout(err) {
		return fmt.Errorf("mysql: cdc: binlog stream: nothing received for %v (3 × HeartbeatPeriod): %w (%w)",
			3*st.src.o.HeartbeatPeriod, core.ErrStreamStalled, err)
	}
	return fmt.Errorf("mysql: cdc: binlog stream: %w", err)
}

// isReadTimeout reports whether err is the binlog connection's read deadline passing. The
// syncer formats the network error into its own (%v), so only the text is left of it.
func isReadTimeout(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return strings.Contains(err.Error(), "i/o timeout")
}

// Confirm implements driver.ChangeStream: the server keeps binary logs by its own expiry
// (binlog_expire_logs_seconds / expire_logs_days), not by its readers, so there is nothing to
// confirm.
func (st *changeStream) Confirm(context.Context, string) error { return nil }

// Close implements driver.ChangeStream: it closes the binlog connection.
func (st *changeStream) Close() error {
	st.closeOnce.Do(func() { st.syncer.Close() })
	return nil
}

func queryStrings(ctx context.Context, db *sql.DB, query string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

var (
	_ driver.ChangeSource = (*ChangeSource)(nil)
	_ driver.ChangeStream = (*changeStream)(nil)
)
