package daemon

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	redissink "github.com/outboxkit/outbox/sinks/redis"
)

// Redis configures the Redis streams sink (sink: redis): the go-redis client it appends with.
// Routes name stream keys.
type Redis struct {
	Addr        string   `yaml:"addr" help:"server address, host:port with a numeric port (required with sink redis)"`
	Username    string   `yaml:"username" help:"ACL user (default: none, the default user)"`
	Password    string   `yaml:"password" help:"password (prefer $OUTBOXKIT_SINKS_REDIS_PASSWORD)"`
	DB          int      `yaml:"db" help:"database number (default 0)"`
	MaxLen      int      `yaml:"max_len" help:"trim each stream to about this many entries (XADD MAXLEN ~; default 0: no trimming)"`
	Concurrency int      `yaml:"concurrency" help:"streams one send writes to at once (default 8)"`
	TLS         RedisTLS `yaml:"tls"`
}

// RedisTLS encrypts the connections to the server.
type RedisTLS struct {
	Enabled bool   `yaml:"enabled" help:"connect to the server over TLS"`
	CAFile  string `yaml:"ca_file" help:"PEM file of the CAs that sign the server's certificate (default the system's)"`
}

// validate returns one problem per bad key of r (sink redis).
func (r *Redis) validate() []string {
	var p []string
	add := func(path, format string, args ...any) {
		p = append(p, "sinks.redis."+path+": "+fmt.Sprintf(format, args...))
	}
	if r.Addr == "" {
		add("addr", "required with sink redis")
	} else {
		host, port, err := net.SplitHostPort(r.Addr)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || hostProblem(host) != "" || perr != nil || n < 1 || n > 65535 {
			add("addr", "want host:port with a port from 1 to 65535, got %q", r.Addr)
		}
	}
	if r.Username != "" && r.Password == "" {
		add("password", "required with sinks.redis.username (set $OUTBOXKIT_SINKS_REDIS_PASSWORD)")
	}
	if r.DB < 0 {
		add("db", "must not be negative")
	}
	if r.MaxLen < 0 {
		add("max_len", "must not be negative (0: no trimming)")
	}
	if r.Concurrency < 0 {
		add("concurrency", "must not be negative")
	}
	if !r.TLS.Enabled {
		if r.TLS.CAFile != "" {
			add("tls.ca_file", "needs sinks.redis.tls.enabled")
		}
	} else if _, problems := r.tlsConfig(); len(problems) > 0 {
		p = append(p, problems...)
	}
	return p
}

// tlsConfig builds the TLS configuration, reading the CA file; problems name the bad key.
func (r *Redis) tlsConfig() (*tls.Config, []string) {
	return tlsFiles("sinks.redis.tls", r.TLS.CAFile, "", "", "")
}

// clientOptions are the go-redis options of a valid r.
func (r *Redis) clientOptions() (*goredis.Options, error) {
	// No ClientName: CLIENT SETNAME on connect would need an ACL permission beyond XADD on the
	// routed streams (a user without it fails every connection with NOPERM).
	o := &goredis.Options{Addr: r.Addr, Username: r.Username, Password: r.Password, DB: r.DB}
	if r.TLS.Enabled {
		c, problems := r.tlsConfig()
		if len(problems) > 0 {
			return nil, &ConfigError{Problems: problems}
		}
		o.TLSConfig = c
	}
	return o, nil
}

// newRedisSink builds the client and the sink; close closes the client after the last send.
func newRedisSink(r Redis, log *slog.Logger) (*redissink.Sink, func(), error) {
	o, err := r.clientOptions()
	if err != nil {
		return nil, nil, err
	}
	client := goredis.NewClient(o)
	sink, err := redissink.New(client, &redissink.Options{MaxLen: int64(r.MaxLen), Concurrency: r.Concurrency, Logger: log})
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return sink, func() { _ = client.Close() }, nil
}
