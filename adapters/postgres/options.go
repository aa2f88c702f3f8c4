package postgres

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"

	"github.com/outboxkit/outbox/core"
)

// ClaimStrategy says how ClaimLanes keeps two relays from taking the same lane.
type ClaimStrategy int

const (
	// ClaimSkipLocked locks the free lane rows with SELECT ... FOR UPDATE SKIP LOCKED (default).
	ClaimSkipLocked ClaimStrategy = iota
	// ClaimAdvisoryLock takes a transaction-scoped advisory lock (pg_try_advisory_xact_lock)
	// per lane before updating its row. Leases are still fenced by their generation. It never
	// uses session-scoped locks, so it works behind transaction-pooling proxies.
	ClaimAdvisoryLock
)

func (s ClaimStrategy) String() string {
	switch s {
	case ClaimSkipLocked:
		return "skip_locked"
	case ClaimAdvisoryLock:
		return "advisory_lock"
	}
	return fmt.Sprintf("ClaimStrategy(%d)", int(s))
}

// Options configures a Store. The zero value (or nil) takes every default.
type Options struct {
	// Schema holds every table. It must exist. Default "public".
	Schema string
	// Table is the outbox table. The lanes, workers and meta tables, the indexes, the trigger
	// and the fetch function are named after it (Table+"_lanes", Table+"_workers",
	// Table+"_meta", Table+"_fetch", ...), so it may be at most 51 bytes. Default "outbox".
	Table string
	// InboxTable is the inbox table; InboxTable+"_horizons" and InboxTable+"_versions" go with
	// it (at most 50 bytes, for the suffixes). Default "inbox".
	InboxTable string
	// Lanes is the lane count Migrate records. Migrating an existing outbox with another count
	// fails with an error wrapping core.ErrSchemaMismatch. Writers and relays read the recorded
	// count, not this option. Default core.DefaultLanes.
	Lanes int
	// ClaimStrategy decides how lanes are claimed. Default ClaimSkipLocked.
	ClaimStrategy ClaimStrategy
	// UniqueAggregateVersion makes Migrate add a unique index on (aggregate_type, aggregate_id,
	// aggregate_version, type) for aggregate_version > 0: a second event for the same entity
	// version fails with core.ErrDuplicateEvent. Migrate never drops the index. Default false.
	UniqueAggregateVersion bool
	// NotifyChannel is the LISTEN/NOTIFY channel of Notify and Wakeups. Default
	// Schema+"."+Table (cut to 63 bytes).
	NotifyChannel string
	// Logger receives the store's logs (wake-up connection failures). Default slog.Default().
	Logger *slog.Logger
}

var (
	identRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	channelRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]{0,62}$`)
)

// names holds every identifier, validated and quoted once.
type names struct {
	schema, outbox, lanes, workers, meta      string // quoted and schema-qualified
	inbox, horizons, versions                 string
	fn, fetchFn                               string // functions, qualified
	trigger, pendingIdx, failedIdx, aggverIdx string // bare quoted names
	seqName                                   string // the serial sequence, qualified
	inboxIdx                                  string
	channel                                   string // quoted identifier
	rawSchema, rawTable, rawInbox, rawChannel string
	lockKey                                   int32 // advisory lock class of this outbox
	migrateKey                                int64 // advisory lock of Migrate
}

func quote(s string) string { return `"` + s + `"` }

func (o *Options) resolve() (Options, names, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Schema == "" {
		r.Schema = "public"
	}
	if r.Table == "" {
		r.Table = "outbox"
	}
	if r.InboxTable == "" {
		r.InboxTable = "inbox"
	}
	if r.Lanes == 0 {
		r.Lanes = core.DefaultLanes
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	bad := func(field, reason string) (Options, names, error) {
		return Options{}, names{}, &core.OptionError{Field: field, Reason: reason}
	}
	if r.Lanes < 1 || r.Lanes > core.MaxLanes {
		return bad("Lanes", fmt.Sprintf("must be between 1 and %d", core.MaxLanes))
	}
	if r.ClaimStrategy != ClaimSkipLocked && r.ClaimStrategy != ClaimAdvisoryLock {
		return bad("ClaimStrategy", "unknown claim strategy")
	}
	if !identRE.MatchString(r.Schema) {
		return bad("Schema", "must match "+identRE.String())
	}
	for _, suffix := range []string{"", "_lanes", "_workers", "_meta", "_immutable", "_fetch", "_pending_idx", "_failed_idx", "_aggver_key", "_seq_seq"} {
		if !identRE.MatchString(r.Table + suffix) {
			return bad("Table", fmt.Sprintf("must match %s with room for the suffix %q", identRE, suffix))
		}
	}
	for _, suffix := range []string{"", "_horizons", "_versions", "_occurred_idx"} {
		if !identRE.MatchString(r.InboxTable + suffix) {
			return bad("InboxTable", fmt.Sprintf("must match %s with room for the suffix %q", identRE, suffix))
		}
	}
	if r.NotifyChannel == "" {
		r.NotifyChannel = r.Schema + "." + r.Table
		if len(r.NotifyChannel) > 63 {
			r.NotifyChannel = r.NotifyChannel[:63]
		}
	}
	if !channelRE.MatchString(r.NotifyChannel) {
		return bad("NotifyChannel", "must match "+channelRE.String())
	}
	s := quote(r.Schema) + "."
	n := names{
		schema:     quote(r.Schema),
		outbox:     s + quote(r.Table),
		lanes:      s + quote(r.Table+"_lanes"),
		workers:    s + quote(r.Table+"_workers"),
		meta:       s + quote(r.Table+"_meta"),
		fn:         s + quote(r.Table+"_immutable"),
		fetchFn:    s + quote(r.Table+"_fetch"),
		trigger:    quote(r.Table + "_immutable"),
		pendingIdx: quote(r.Table + "_pending_idx"),
		failedIdx:  quote(r.Table + "_failed_idx"),
		aggverIdx:  quote(r.Table + "_aggver_key"),
		seqName:    s + quote(r.Table+"_seq_seq"),
		inbox:      s + quote(r.InboxTable),
		horizons:   s + quote(r.InboxTable+"_horizons"),
		versions:   s + quote(r.InboxTable+"_versions"),
		inboxIdx:   quote(r.InboxTable + "_occurred_idx"),
		channel:    quote(r.NotifyChannel),
		rawSchema:  r.Schema, rawTable: r.Table, rawInbox: r.InboxTable, rawChannel: r.NotifyChannel,
	}
	h := fnv.New64a()
	h.Write([]byte(r.Schema + "." + r.Table))
	sum := h.Sum64()
	n.lockKey = int32(uint32(sum))
	n.migrateKey = int64(sum >> 1)
	return r, n, nil
}
