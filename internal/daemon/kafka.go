package daemon

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxkit/outbox/sinks/kafka"
)

// Kafka configures the Kafka sink (sink: kafka): the franz-go client it produces with. The
// client keeps franz-go's idempotent producer (acks=all); routes name topics.
type Kafka struct {
	Brokers     []string  `yaml:"brokers" help:"seed brokers, host:port with a numeric port (required with sink kafka)"`
	ClientID    string    `yaml:"client_id" help:"client id sent to the brokers (default outboxkit-relay)"`
	Compression string    `yaml:"compression" help:"none | gzip | snappy | lz4 | zstd (default snappy, as franz-go)"`
	Concurrency int       `yaml:"concurrency" help:"topics one send produces to at once (default 8)"`
	TLS         KafkaTLS  `yaml:"tls"`
	SASL        KafkaSASL `yaml:"sasl"`
}

// KafkaTLS encrypts the connections to the brokers.
type KafkaTLS struct {
	Enabled    bool   `yaml:"enabled" help:"connect to the brokers over TLS"`
	CAFile     string `yaml:"ca_file" help:"PEM file of the CAs that sign the brokers' certificates (default the system's)"`
	CertFile   string `yaml:"cert_file" help:"PEM client certificate (mutual TLS; with key_file)"`
	KeyFile    string `yaml:"key_file" help:"PEM key of cert_file"`
	ServerName string `yaml:"server_name" help:"name to verify in the brokers' certificates (default the broker's host)"`
}

// KafkaSASL authenticates the client.
type KafkaSASL struct {
	Mechanism string `yaml:"mechanism" help:"plain | scram-sha-256 | scram-sha-512 (empty: no SASL)"`
	Username  string `yaml:"username" help:"SASL user"`
	Password  string `yaml:"password" help:"SASL password (prefer $OUTBOXKIT_SINKS_KAFKA_SASL_PASSWORD)"`
}

var kafkaCodecs = map[string]kgo.CompressionCodec{
	"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

// validate returns one problem per bad key of k (sink kafka).
func (k *Kafka) validate() []string {
	var p []string
	add := func(path, format string, args ...any) {
		p = append(p, "sinks.kafka."+path+": "+fmt.Sprintf(format, args...))
	}
	if len(k.Brokers) == 0 {
		add("brokers", "required with sink kafka")
	}
	var bad []string
	for _, b := range k.Brokers {
		host, port, err := net.SplitHostPort(b)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || hostProblem(host) != "" || perr != nil || n < 1 || n > 65535 {
			bad = append(bad, strconv.Quote(b))
		}
	}
	if len(bad) > 0 {
		add("brokers", "want host:port with a port from 1 to 65535, got %s", strings.Join(bad, ", "))
	}
	if _, ok := kafkaCodecs[k.Compression]; !ok && k.Compression != "" {
		p = append(p, oneOf("sinks.kafka.compression", k.Compression, "none", "gzip", "snappy", "lz4", "zstd")...)
	}
	if k.Concurrency < 0 {
		add("concurrency", "must not be negative")
	}
	t := k.TLS
	if !t.Enabled {
		for path, v := range map[string]string{"tls.ca_file": t.CAFile, "tls.cert_file": t.CertFile, "tls.key_file": t.KeyFile, "tls.server_name": t.ServerName} {
			if v != "" {
				add(path, "needs sinks.kafka.tls.enabled")
			}
		}
	} else if _, problems := k.tlsConfig(); len(problems) > 0 {
		p = append(p, problems...)
	}
	switch s := k.SASL; s.Mechanism {
	case "":
		if s.Username != "" || s.Password != "" {
			add("sasl.mechanism", "required with sasl.username or sasl.password")
		}
	case "plain", "scram-sha-256", "scram-sha-512":
		if s.Username == "" {
			add("sasl.username", "required with sasl.mechanism %s", s.Mechanism)
		}
		if s.Password == "" {
			add("sasl.password", "required with sasl.mechanism %s", s.Mechanism)
		}
	default:
		p = append(p, oneOf("sinks.kafka.sasl.mechanism", s.Mechanism, "plain", "scram-sha-256", "scram-sha-512")...)
	}
	return p
}

// tlsConfig builds the TLS configuration, reading the files; problems name the bad keys.
func (k *Kafka) tlsConfig() (*tls.Config, []string) {
	t := k.TLS
	return tlsFiles("sinks.kafka.tls", t.CAFile, t.CertFile, t.KeyFile, t.ServerName)
}

// clientOptions are the franz-go options of a valid k.
func (k *Kafka) clientOptions() ([]kgo.Opt, error) {
	id := k.ClientID
	if id == "" {
		id = "outboxkit-relay"
	}
	opts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...), kgo.ClientID(id)}
	if codec, ok := kafkaCodecs[k.Compression]; ok {
		opts = append(opts, kgo.ProducerBatchCompression(codec))
	}
	if k.TLS.Enabled {
		c, problems := k.tlsConfig()
		if len(problems) > 0 {
			return nil, &ConfigError{Problems: problems}
		}
		opts = append(opts, kgo.DialTLSConfig(c))
	}
	s := k.SASL
	switch s.Mechanism {
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
	}
	return opts, nil
}

// newKafkaSink builds the client and the sink; close closes the client after the last send.
func newKafkaSink(k Kafka, log *slog.Logger) (*kafka.Sink, func(), error) {
	opts, err := k.clientOptions()
	if err != nil {
		return nil, nil, err
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("sinks.kafka: %w", err)
	}
	sink, err := kafka.New(client, &kafka.Options{Concurrency: k.Concurrency, Logger: log})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return sink, client.Close, nil
}
