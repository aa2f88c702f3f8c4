package daemon

import (
	"encoding/base64"
	"io"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"unicode"

	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/internal/secret"
)

// Secrets are the configuration's secret values: the database password (of a URL, a
// keyword/value or a MySQL DSN), the Kafka SASL password, the NATS token and URL passwords,
// the Redis password, the RabbitMQ URL's password and the webhook signing secrets (as written,
// their base64 part and, when printable, the key itself). The daemon's output masks each of
// them (Output).
func (c Config) Secrets() []string {
	var out []string
	add := func(s ...string) {
		for _, v := range s {
			if v != "" {
				out = append(out, v)
			}
		}
	}
	add(opendb.Password(c.Database.DSN))
	s := c.Sinks
	add(s.Kafka.SASL.Password, s.NATS.Token, s.Redis.Password, urlPassword(s.RabbitMQ.URL))
	for _, tok := range c.Console.Tokens { // the console's bearer tokens written in the file
		add(tok.Token)
	}
	for u := range strings.SplitSeq(s.NATS.URL, ",") {
		add(urlPassword(strings.TrimSpace(u)))
	}
	for _, w := range s.Webhook.Secrets {
		add(w)
		b64, ok := strings.CutPrefix(w, "whsec_")
		if !ok {
			continue
		}
		add(b64)
		if key, err := base64.StdEncoding.DecodeString(b64); err == nil && printable(key) {
			add(string(key))
		}
	}
	return out
}

func urlPassword(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return opendb.Password(s) // a URL that does not parse: its user info all the same
	}
	p, _ := u.User.Password()
	return p
}

func printable(b []byte) bool {
	for _, r := range string(b) {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return len(b) > 0
}

// Output is w with every secret of c masked (internal/secret): the daemon's logs and the
// commands' messages go through it.
func Output(c Config, w io.Writer) io.Writer { return secret.NewWriter(w, c.Secrets()...) }

// ExposedConfig reports the configuration file's mode when others may read it and it holds
// one of c's secrets ("chmod 600 it, or pass the secret by environment"); ok is false
// otherwise, or when path is empty or unreadable.
func ExposedConfig(path string, c Config) (mode fs.FileMode, ok bool) {
	if path == "" {
		return 0, false
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o004 == 0 {
		return 0, false
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, s := range c.Secrets() {
		if len(s) >= secret.MinLen && strings.Contains(string(text), s) {
			return st.Mode().Perm(), true
		}
	}
	return 0, false
}
