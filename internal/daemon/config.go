// Package daemon is the `outboxkit relay` process: its configuration (YAML, environment,
// flags), the wiring of store, sink and relays, health endpoints, metrics and graceful stop.
package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/sinks/awssink"
	"github.com/outboxkit/outbox/sinks/stdout"
)

// Config is the relay daemon's configuration. Every leaf key can be set in the YAML file, by an
// environment variable OUTBOXKIT_<PATH> (the key's path in upper case, "." as "_") and by a flag
// --<path> ("." and "_" as "-"); a flag wins over the environment, which wins over the file.
// Map-valued keys (routes.by_type, routes.by_destination) come from the file only.
type Config struct {
	Database        Database `yaml:"database"`
	Mode            string   `yaml:"mode" help:"polling | cdc"`
	CDC             CDC      `yaml:"cdc"`
	Relay           Relay    `yaml:"relay"`
	AWS             AWS      `yaml:"aws"`
	Sink            string   `yaml:"sink" help:"the sink: sqs | sns | kafka | rabbitmq | nats | redis | webhook (signed HTTP POSTs to the URLs the routes name) | stdout (one CloudEvents JSON line per message on standard output; the logs stay on standard error)"`
	Sinks           Sinks    `yaml:"sinks"`
	Routes          Routes   `yaml:"routes"`
	Cleanup         Cleanup  `yaml:"cleanup"`
	HTTP            HTTP     `yaml:"http"`
	Metrics         Metrics  `yaml:"metrics"`
	OTLP            OTLP     `yaml:"otlp"`
	Console         Console  `yaml:"console"`
	Log             Log      `yaml:"log"`
	Migrate         bool     `yaml:"migrate" help:"create or upgrade the outbox tables at start"`
	ShutdownTimeout Duration `yaml:"shutdown_timeout" help:"how long a graceful stop may take before it becomes a hard stop"`
}

// Database selects the outbox.
type Database struct {
	Driver string `yaml:"driver" help:"postgres | mysql | sqlite: names the driver of a dsn that is not a URL (a URL names its own)"`
	DSN    string `yaml:"dsn" help:"the database: a URL (postgres://, postgresql://, mysql://, sqlite:PATH, file:PATH) or, with database.driver, the driver's own DSN (postgres host=H dbname=D, mysql user:pass@tcp(host:3306)/db?parseTime=true, sqlite a file path)"`
	Schema string `yaml:"schema" help:"postgres schema of the outbox (default public)"`
	Table  string `yaml:"table" help:"outbox table (default outbox)"`
	Lanes  int    `yaml:"lanes" help:"lane count recorded by --migrate on a new outbox"`
}

// DriverName is the database's driver: database.driver, else the one its dsn's URL names ("" when
// neither names one).
func (d Database) DriverName() string {
	if name, _, err := opendb.ParseDSN(d.Driver, d.DSN); err == nil {
		return name
	}
	return d.Driver
}

// CDC configures mode cdc.
type CDC struct {
	Slot             string `yaml:"slot" help:"postgres replication slot (default outboxkit_<schema>_<table>)"`
	ServerID         uint32 `yaml:"server_id" help:"mysql replica server id (default random per stream)"`
	MaxRetainedBytes int64  `yaml:"max_retained_bytes" help:"cap of the log the database retains for the relay (0: none)"`
	ReleaseOverCap   bool   `yaml:"release_over_cap" help:"release the slot and stop when over the cap"`
}

// Relay tunes the relays.
type Relay struct {
	Workers         int      `yaml:"workers" help:"polling relays in this process"`
	BatchSize       int      `yaml:"batch_size" help:"most records fetched and sent at once, at most 100000"`
	InFlight        int      `yaml:"in_flight" help:"batches each polling relay keeps in flight, over disjoint lanes"`
	MaxRate         int      `yaml:"max_rate" help:"most events per second each polling relay sends (default 0: no limit)"`
	FixedRate       bool     `yaml:"fixed_rate" help:"turn the adaptive drain off: each polling relay sends as fast as it can, up to max_rate"`
	LeaseTTL        Duration `yaml:"lease_ttl" help:"lane lease lifetime"`
	PollInterval    Duration `yaml:"poll_interval" help:"sleep when nothing was found"`
	DeleteOnPublish bool     `yaml:"delete_on_publish" help:"delete rows once acknowledged instead of marking them"`
	Retry           Retry    `yaml:"retry"`
}

// Retry is core.RetryPolicy.
type Retry struct {
	Initial    Duration `yaml:"initial" help:"delay after the first failure, at most relay.retry.max"`
	Max        Duration `yaml:"max" help:"cap of one delay"`
	Multiplier float64  `yaml:"multiplier" help:"growth of the delay, 1 or more"`
	Jitter     float64  `yaml:"jitter" help:"spread of each delay, 0.2 = ±20%, at most 1; negative: none"`
	Deadline   Duration `yaml:"deadline" help:"retry budget of one event before it is parked"`
}

// AWS overrides the SDK's default configuration chain.
type AWS struct {
	Region   string `yaml:"region" help:"AWS region (default: the SDK's chain)"`
	Endpoint string `yaml:"endpoint" help:"endpoint override (an emulator, a VPC endpoint)"`
}

// Sinks holds each sink's settings; Config.Sink selects one.
type Sinks struct {
	SQS      AWSSink  `yaml:"sqs"`
	SNS      AWSSink  `yaml:"sns"`
	Kafka    Kafka    `yaml:"kafka"`
	NATS     NATS     `yaml:"nats"`
	Stdout   Stdout   `yaml:"stdout"`
	Webhook  Webhook  `yaml:"webhook"`
	Redis    Redis    `yaml:"redis"`
	RabbitMQ RabbitMQ `yaml:"rabbitmq"`
}

// Stdout tunes the stdout sink (package sinks/stdout).
type Stdout struct {
	Source string `yaml:"source" help:"the CloudEvents source attribute of every line"`
}

// AWSSink tunes the SQS or SNS sink.
type AWSSink struct {
	Concurrency     int `yaml:"concurrency" help:"requests in flight per send"`
	MaxBatchEntries int `yaml:"max_batch_entries" help:"entries per batch request, 1-10 (default 10)"`
	// UnorderedStandard is awssink.Options.UnorderedStandard.
	UnorderedStandard bool `yaml:"unordered_standard" help:"let a partition key have several requests in flight to a standard (non-FIFO) queue or topic, which keeps no order anyway (default false)"`
}

// Routes maps events to sink addresses (queue URLs, topic ARNs): by destination, else by type,
// else Default. Trusted configuration only: an address is used as it is.
type Routes struct {
	Default       string            `yaml:"default" help:"address of events no other route matches"`
	ByType        map[string]string `yaml:"by_type"`
	ByDestination map[string]string `yaml:"by_destination"`
}

// Cleanup deletes published rows; one process of a fleet runs it at a time.
type Cleanup struct {
	Enabled   bool     `yaml:"enabled" help:"run the cleanup schedule"`
	Retention Duration `yaml:"retention" help:"keep published rows this long"`
	Interval  Duration `yaml:"interval" help:"time between cleanups"`
}

// HTTP serves /healthz, /readyz and /metrics.
type HTTP struct {
	Listen string `yaml:"listen" help:"address of the health and metrics server (default 127.0.0.1:9464; empty string keeps the default)"`
}

// Metrics tunes what /metrics (and the OTLP push) measure.
type Metrics struct {
	StatsInterval Duration `yaml:"stats_interval" help:"least time between two backlog queries (Admin.Stats); collections in between reuse the last answer"`
}

// OTLP pushes the metrics to an OpenTelemetry collector as well (they are served at /metrics
// either way).
type OTLP struct {
	Endpoint string   `yaml:"endpoint" help:"OTLP/HTTP metrics URL, e.g. http://collector:4318/v1/metrics (empty: no push)"`
	Interval Duration `yaml:"interval" help:"push interval"`
}

// Log configures the logs.
type Log struct {
	Format string `yaml:"format" help:"json | text"`
	Level  string `yaml:"level" help:"debug | info | warn | error"`
}

// Duration is a time.Duration written as "30s" or "1h30m".
type Duration time.Duration

// D returns the duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Defaults returns the configuration every file starts from.
func Defaults() Config {
	return Config{
		Mode: "polling", Sink: "sqs",
		Relay:           Relay{Workers: 1},
		Cleanup:         Cleanup{Retention: Duration(core.DefaultCleanupRetention), Interval: Duration(time.Hour)},
		HTTP:            HTTP{Listen: "127.0.0.1:9464"},
		Metrics:         Metrics{StatsInterval: Duration(5 * time.Second)},
		OTLP:            OTLP{Interval: Duration(30 * time.Second)},
		Log:             Log{Format: "json", Level: "info"},
		ShutdownTimeout: Duration(30 * time.Second),
	}
}

// ConfigError lists every bad key of a configuration, one per line: "path: problem".
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string { return strings.Join(e.Problems, "\n") }

// leaf is one settable key.
type leaf struct {
	path string
	help string
	typ  reflect.Type
}

var durationType = reflect.TypeFor[Duration]()

// leaves lists the keys of t that env and flags can set (every non-map leaf).
func leaves(t reflect.Type, prefix string) []leaf {
	var out []leaf
	for i := range t.NumField() {
		f := t.Field(i)
		path := prefix + f.Tag.Get("yaml")
		switch {
		case f.Type.Kind() == reflect.Struct:
			out = append(out, leaves(f.Type, path+".")...)
		case f.Type.Kind() == reflect.Map:
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct: // a list of mappings: the file's only
		default:
			out = append(out, leaf{path: path, help: f.Tag.Get("help"), typ: f.Type})
		}
	}
	return out
}

// field finds the value of path in v (a struct), or reports false.
func field(v reflect.Value, path string) (reflect.Value, bool) {
	for part := range strings.SplitSeq(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		found := false
		for i := range v.NumField() {
			if v.Type().Field(i).Tag.Get("yaml") == part {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}, false
		}
	}
	return v, true
}

// EnvName returns the environment variable of a key.
func EnvName(path string) string {
	return "OUTBOXKIT_" + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// FlagName returns the flag of a key.
func FlagName(path string) string {
	return strings.NewReplacer(".", "-", "_", "-").Replace(path)
}

// setString parses s into v (a leaf).
func setString(v reflect.Value, s string) error {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("not a duration: %q", s)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("not a boolean: %q", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer: %q", s)
		}
		v.SetInt(n)
	case reflect.Uint32:
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return fmt.Errorf("not an unsigned 32-bit integer: %q", s)
		}
		v.SetUint(n)
	case reflect.Float64:
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("not a number: %q", s)
		}
		v.SetFloat(n)
	case reflect.Slice:
		var parts []string
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("unsupported key type %s", v.Type())
	}
	return nil
}

// removedKeys are keys of earlier versions, with what to do instead.
var removedKeys = map[string]string{
	"relay.adaptive_rate": "the adaptive drain is now the default; delete the key (relay.fixed_rate: true turns it off)",
}

// decodeNode sets v from a YAML node, recording one problem per bad key.
func decodeNode(n *yaml.Node, v reflect.Value, path string, problems *[]string) {
	bad := func(format string, args ...any) {
		*problems = append(*problems, fmt.Sprintf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch {
	case v.Kind() == reflect.Struct && v.Type() != durationType:
		if n.Kind != yaml.MappingNode {
			if n.Tag == "!!null" {
				return
			}
			bad("must be a mapping (line %d)", n.Line)
			return
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			sub := key
			if path != "" {
				sub = path + "." + key
			}
			if first, dup := seen[key]; dup {
				*problems = append(*problems, fmt.Sprintf("%s: duplicate key (line %d; first at line %d)", sub, n.Content[i].Line, first))
				continue
			}
			seen[key] = n.Content[i].Line
			fv, ok := field(v, key)
			if !ok {
				if why, gone := removedKeys[sub]; gone {
					*problems = append(*problems, fmt.Sprintf("%s: removed (line %d): %s", sub, n.Content[i].Line, why))
					continue
				}
				*problems = append(*problems, fmt.Sprintf("%s: unknown key (line %d)", sub, n.Content[i].Line))
				continue
			}
			decodeNode(n.Content[i+1], fv, sub, problems)
		}
	case v.Kind() == reflect.Map:
		if n.Kind == yaml.MappingNode {
			seen := map[string]int{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if first, dup := seen[k.Value]; dup {
					*problems = append(*problems, fmt.Sprintf("%s.%s: duplicate key (line %d; first at line %d)", path, k.Value, k.Line, first))
					return
				}
				seen[k.Value] = k.Line
			}
		}
		m := map[string]string{}
		if err := n.Decode(&m); err != nil {
			bad("must be a mapping of strings to strings (line %d)", n.Line)
			return
		}
		v.Set(reflect.ValueOf(m))
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
		if n.Kind != yaml.SequenceNode {
			if n.Tag != "!!null" {
				bad("must be a list of mappings (line %d)", n.Line)
			}
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content)))
		for i, item := range n.Content {
			decodeNode(item, v.Index(i), fmt.Sprintf("%s[%d]", path, i), problems)
		}
	case v.Kind() == reflect.Slice:
		var s []string
		if err := n.Decode(&s); err != nil {
			bad("must be a list of strings (line %d)", n.Line)
			return
		}
		v.Set(reflect.ValueOf(s))
	default:
		if n.Kind != yaml.ScalarNode {
			bad("must be a single value (line %d)", n.Line)
			return
		}
		if n.Tag == "!!null" || (n.Value == "" && emptyKeepsDefault[path]) {
			return // unset: the default (or what the environment or a flag sets)
		}
		var f float64
		if v.Kind() == reflect.Float64 && n.Decode(&f) == nil { // YAML's spellings too: .nan, .inf
			v.SetFloat(f)
			return
		}
		if err := setString(v, n.Value); err != nil {
			bad("%v (line %d)", err, n.Line)
		}
	}
}

// Flags registers one flag per leaf key on fs; Load applies the ones that were set.
func Flags(fs *pflag.FlagSet) {
	for _, l := range leaves(reflect.TypeFor[Config](), "") {
		name := FlagName(l.path)
		help := l.help
		if help == "" {
			help = l.path
		}
		if l.typ.Kind() == reflect.Slice {
			help += "; comma-separated, or repeat the flag: its values add up"
		}
		if d := defaultText(l.path); d != "" {
			help += " (default " + d + ")"
		}
		help += " (" + l.path + ", $" + EnvName(l.path) + ")"
		fs.Var(&rawFlag{typ: flagType(l.typ)}, name, help)
		if l.typ.Kind() == reflect.Bool {
			fs.Lookup(name).NoOptDefVal = "true"
		}
	}
}

// libraryDefaults are the keys whose zero value means a library default, with that default: the
// help prints them from the library's constants, so that it cannot drift from what runs.
var libraryDefaults = map[string]string{
	"database.lanes":              strconv.Itoa(core.DefaultLanes),
	"relay.batch_size":            strconv.Itoa(core.DefaultBatchSize),
	"relay.in_flight":             strconv.Itoa(core.DefaultInFlight),
	"relay.lease_ttl":             core.DefaultLeaseTTL.String(),
	"relay.poll_interval":         core.DefaultPollInterval.String(),
	"relay.retry.initial":         core.DefaultRetryInitial.String(),
	"relay.retry.max":             core.DefaultRetryMax.String(),
	"relay.retry.multiplier":      strconv.FormatFloat(core.DefaultRetryMultiplier, 'g', -1, 64),
	"relay.retry.jitter":          strconv.FormatFloat(core.DefaultRetryJitter, 'g', -1, 64),
	"relay.retry.deadline":        core.DefaultRetryDeadline.String(),
	"sinks.sqs.concurrency":       strconv.Itoa(awssink.DefaultConcurrency),
	"sinks.sns.concurrency":       strconv.Itoa(awssink.DefaultConcurrency),
	"sinks.sqs.max_batch_entries": "10",
	"sinks.sns.max_batch_entries": "10",
	"sinks.stdout.source":         stdout.DefaultSource,
}

// defaultText is the default the help prints for path: the library's (libraryDefaults), else
// Defaults()'s value when it is not zero, else "".
func defaultText(path string) string {
	if d, ok := libraryDefaults[path]; ok {
		return d
	}
	v, ok := field(reflect.ValueOf(Defaults()), path)
	if !ok || v.IsZero() || v.Kind() == reflect.Bool {
		return ""
	}
	if d, ok := v.Interface().(Duration); ok {
		return d.D().String()
	}
	return fmt.Sprint(v.Interface())
}

// rawFlag keeps a flag's text; Load parses it after the file and the environment. A list flag
// given more than once keeps every value (comma-joined), not only the last.
type rawFlag struct {
	s, typ string
	set    bool
}

func (f *rawFlag) String() string { return f.s }
func (f *rawFlag) Type() string   { return f.typ }
func (f *rawFlag) Set(s string) error {
	if f.typ == "list" && f.set {
		s = f.s + "," + s
	}
	f.s, f.set = s, true
	return nil
}

// emptyKeepsDefault lists the keys whose empty value, from any source, is the same as no value:
// the default stays (or the value of a source of lower precedence).
var emptyKeepsDefault = map[string]bool{"http.listen": true}

func flagType(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t.Kind() == reflect.Slice:
		return "list"
	}
	return t.Kind().String()
}

// Load reads the YAML file at path (none when empty), then the environment (getenv), then the
// flags of fs that were set, over Defaults, and validates the result. Every problem is reported,
// one per bad key, in a *ConfigError.
func Load(path string, getenv func(string) string, fs *pflag.FlagSet) (Config, error) {
	cfg := Defaults()
	v := reflect.ValueOf(&cfg).Elem()
	var problems []string
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return cfg, &ConfigError{Problems: []string{fmt.Sprintf("config: %v", err)}}
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
			return cfg, &ConfigError{Problems: []string{fmt.Sprintf("config: %v", err)}}
		}
		var next yaml.Node
		switch err := dec.Decode(&next); {
		case err == nil:
			return cfg, &ConfigError{Problems: []string{fmt.Sprintf("config: a second YAML document (line %d): the file holds one configuration", docLine(&next))}}
		case !errors.Is(err, io.EOF):
			return cfg, &ConfigError{Problems: []string{fmt.Sprintf("config: %v", err)}}
		}
		if len(doc.Content) > 0 {
			root := doc.Content[0]
			if root.Kind != yaml.MappingNode && root.Tag != "!!null" {
				problems = append(problems, fmt.Sprintf("config: must be a mapping (line %d)", root.Line))
			} else {
				decodeNode(root, v, "", &problems)
			}
		}
	}
	for _, l := range leaves(v.Type(), "") {
		fv, _ := field(v, l.path)
		if s := getenv(EnvName(l.path)); s != "" {
			if err := setString(fv, s); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v (from $%s)", l.path, err, EnvName(l.path)))
			}
		}
		if fs != nil {
			if f := fs.Lookup(FlagName(l.path)); f != nil && f.Changed && (f.Value.String() != "" || !emptyKeepsDefault[l.path]) {
				if err := setString(fv, f.Value.String()); err != nil {
					problems = append(problems, fmt.Sprintf("%s: %v (from --%s)", l.path, err, f.Name))
				}
			}
		}
	}
	problems = append(problems, cfg.validate()...)
	if len(problems) > 0 {
		return cfg, &ConfigError{Problems: byKey(problems)}
	}
	return cfg, nil
}

// docLine is the line a YAML document starts on.
func docLine(doc *yaml.Node) int {
	if len(doc.Content) > 0 {
		return doc.Content[0].Line
	}
	return doc.Line
}

// byKey merges the problems ("path: problem") of each key into one line, "path: problem;
// problem" (in the order found: file, environment, flag, checks; each once), sorted by path: a
// key bad in the file, the environment and a flag at once is one line.
func byKey(problems []string) []string {
	var keys []string
	of := map[string][]string{}
	for _, p := range problems {
		key, text, _ := strings.Cut(p, ": ")
		if _, ok := of[key]; !ok {
			keys = append(keys, key)
		}
		if !slices.Contains(of[key], text) {
			of[key] = append(of[key], text)
		}
	}
	slices.Sort(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + ": " + strings.Join(of[k], "; ")
	}
	return out
}

func oneOf(path, got string, allowed ...string) []string {
	if slices.Contains(allowed, got) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %q is not one of %s", path, got, strings.Join(allowed, ", "))}
}

// validate returns the problems of c, each "path: problem". Beyond the daemon's own rules it
// asks the library, without a database, what it would refuse at start: core's relay
// constructors the relay options (checkRelayOptions), the adapter the DSN, identifiers and lane
// count (opendb.Check). A configuration that passes starts unless the database, the sink or the
// listen address cannot be reached.
func (c *Config) validate() []string {
	var p []string
	add := func(path, format string, args ...any) { p = append(p, path+": "+fmt.Sprintf(format, args...)) }
	if c.Database.Driver != "" {
		p = append(p, oneOf("database.driver", c.Database.Driver, opendb.Drivers...)...)
	}
	driverName, dsn, dsnErr := opendb.ParseDSN(c.Database.Driver, c.Database.DSN)
	switch {
	case c.Database.DSN == "":
		add("database.dsn", "required")
	case dsnErr != nil && (c.Database.Driver == "" || slices.Contains(opendb.Drivers, c.Database.Driver)):
		add("database.dsn", "%s", strings.TrimPrefix(dsnErr.Error(), opendb.ErrBadDSN.Error()+": "))
	}
	if c.Database.Schema != "" && driverName != "" && driverName != "postgres" {
		add("database.schema", "only for driver postgres")
	}
	if dsnErr == nil {
		d := c.Database
		for _, fe := range opendb.Check(opendb.Config{Driver: driverName, DSN: dsn, Schema: d.Schema, Table: d.Table, Lanes: d.Lanes}) {
			if key, ok := map[string]string{"DSN": "database.dsn", "Schema": "database.schema", "Table": "database.table", "Lanes": "database.lanes"}[fe.Field]; ok {
				if key != "database.dsn" || d.DSN != "" {
					add(key, "%s", fe.Reason)
				}
			} else {
				add("database", "%s: %s", fe.Field, fe.Reason)
			}
		}
	}
	p = append(p, oneOf("mode", c.Mode, "polling", "cdc")...)
	if c.Mode == "cdc" && driverName == "sqlite" {
		add("mode", "cdc needs driver postgres or mysql")
	}
	if c.Relay.Workers < 1 {
		add("relay.workers", "must be at least 1")
	}
	if c.Mode == "cdc" && c.Relay.Workers > 1 {
		add("relay.workers", "must be 1 in mode cdc (one CDC relay publishes for the whole outbox)")
	}
	p = append(p, c.checkRelayOptions()...)
	for path, n := range map[string]int{"sinks.sqs.concurrency": c.Sinks.SQS.Concurrency, "sinks.sns.concurrency": c.Sinks.SNS.Concurrency} {
		if n < 0 {
			add(path, "must not be negative")
		}
	}
	for path, n := range map[string]int{"sinks.sqs.max_batch_entries": c.Sinks.SQS.MaxBatchEntries, "sinks.sns.max_batch_entries": c.Sinks.SNS.MaxBatchEntries} {
		if n < 0 || n > 10 {
			add(path, "must be 1 to 10 (0: default)")
		}
	}
	for path, d := range map[string]Duration{"cleanup.retention": c.Cleanup.Retention, "cleanup.interval": c.Cleanup.Interval,
		"shutdown_timeout": c.ShutdownTimeout, "otlp.interval": c.OTLP.Interval, "metrics.stats_interval": c.Metrics.StatsInterval} {
		if d <= 0 {
			add(path, "must be positive")
		}
	}
	p = append(p, oneOf("sink", c.Sink, "sqs", "sns", "kafka", "rabbitmq", "nats", "redis", "webhook", "stdout")...)
	if c.Sink == "rabbitmq" {
		p = append(p, c.Sinks.RabbitMQ.validate()...)
	}
	if c.Sink == "kafka" {
		p = append(p, c.Sinks.Kafka.validate()...)
	}
	if c.Sink == "nats" {
		p = append(p, c.Sinks.NATS.validate()...)
	}
	if c.Sink == "webhook" {
		p = append(p, c.Sinks.Webhook.validate(c.Routes)...)
	}
	if c.Sink == "redis" {
		p = append(p, c.Sinks.Redis.validate()...)
	}
	if c.Routes.Default == "" && len(c.Routes.ByType) == 0 && len(c.Routes.ByDestination) == 0 {
		add("routes", "at least one route is required (routes.default, routes.by_type or routes.by_destination)")
	}
	for k, v := range c.Routes.ByType {
		if v == "" {
			add("routes.by_type."+k, "empty address")
		}
	}
	for k, v := range c.Routes.ByDestination {
		if v == "" {
			add("routes.by_destination."+k, "empty address")
		}
	}
	for path, u := range map[string]string{"otlp.endpoint": c.OTLP.Endpoint, "aws.endpoint": c.AWS.Endpoint} {
		if problem := urlProblem(u); u != "" && problem != "" {
			add(path, "%s", problem)
		}
	}
	if problem := listenProblem(c.HTTP.Listen); problem != "" {
		add("http.listen", "%s", problem)
	}
	p = append(p, c.Console.validate(c.HTTP.Listen)...)
	p = append(p, oneOf("log.format", c.Log.Format, "json", "text")...)
	p = append(p, oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")...)
	return p
}

// policy is the core.RetryPolicy of relay.retry.
func (r Retry) policy() core.RetryPolicy {
	return core.RetryPolicy{Initial: r.Initial.D(), Max: r.Max.D(), Multiplier: r.Multiplier, Jitter: r.Jitter, Deadline: r.Deadline.D()}
}

// listenProblem says what is wrong with a TCP listen address (host:port; the host may be empty
// for every interface, else an IP address or a DNS name; the port a number or a service name),
// or returns "" when net.Listen could take it. The host is not resolved here: the daemon
// listens before it opens the database, so a name that does not resolve fails before anything
// is touched.
func listenProblem(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("not a host:port address: %q", addr)
	}
	if host != "" {
		if problem := hostProblem(host); problem != "" {
			return fmt.Sprintf("bad host %q in %q: %s", host, addr, problem)
		}
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Sprintf("bad port %q in %q", port, addr)
	}
	return ""
}

// hostProblem says why host is neither an IP address nor a DNS name, or returns "". A name
// whose last label is all digits (999.999.999.999, 0x7f.0.0.1) is a malformed address, not a
// name (RFC 3696 section 2).
func hostProblem(host string) string {
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	const problem = "not an IP address or a DNS name"
	name := strings.TrimSuffix(host, ".")
	if name == "" || len(name) > 253 {
		return problem
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return problem
		}
		for _, c := range []byte(l) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return problem
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return problem
	}
	return ""
}

// urlProblem says what is wrong with an endpoint URL (an absolute http or https URL with a
// valid host and, if it has one, a port from 1 to 65535), or returns "".
func urlProblem(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Opaque != "" {
		return fmt.Sprintf("must be an absolute http or https URL with a host, got %q", s)
	}
	if problem := hostProblem(u.Hostname()); problem != "" {
		return fmt.Sprintf("bad host %q in %q: %s", u.Hostname(), s, problem)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("bad port %q in %q: want 1 to 65535", port, s)
		}
	}
	return ""
}

// IsConfigError reports whether err is a bad configuration (exit status 2).
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}
