// Package secret keeps configured secrets (database passwords, broker credentials, signing
// secrets) out of what the command and the daemon write: Writer replaces each secret it was
// given, and its JSON-escaped form, by Mask in every write. It is the safety net behind the
// rule that no message is built from a secret in the first place (opendb.Redact for database
// addresses).
package secret

import (
	"encoding/json"
	"io"
	"strings"
	"sync"
)

// Mask replaces a secret in the output.
const Mask = "[REDACTED]"

// MinLen is the shortest secret Writer replaces: a shorter one (a password of one to three
// characters) would mask ordinary words of the output, and is left alone.
const MinLen = 4

// Writer writes to an io.Writer with every secret masked. A slog handler, a cobra command's
// output and fmt.Fprintln each write a whole line (or record) per Write call, so a secret never
// straddles two calls. Safe for concurrent use when the underlying writer is.
type Writer struct {
	w     io.Writer
	mu    sync.RWMutex
	pairs []string // old, new, ... for r
	r     *strings.Replacer
}

// NewWriter returns a Writer to w masking secrets (those shorter than MinLen are ignored).
func NewWriter(w io.Writer, secrets ...string) *Writer {
	sw := &Writer{w: w}
	sw.Add(secrets...)
	return sw
}

// Add masks more secrets from now on.
func (sw *Writer) Add(secrets ...string) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	pairs := sw.pairs
	for _, s := range secrets {
		if len(s) < MinLen {
			continue
		}
		pairs = append(pairs, s, Mask)
		if q := quoted(s); q != s {
			pairs = append(pairs, q, Mask)
		}
	}
	sw.pairs = pairs
	if len(pairs) > 0 {
		sw.r = strings.NewReplacer(pairs...)
	}
}

// quoted is s as it appears inside a JSON string (a slog JSON record escapes quotes,
// backslashes, control characters and <, >, &).
func quoted(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// Write writes p with every secret masked; it reports len(p) written when the masked bytes
// were all written.
func (sw *Writer) Write(p []byte) (int, error) {
	sw.mu.RLock()
	r := sw.r
	sw.mu.RUnlock()
	if r == nil {
		return sw.w.Write(p)
	}
	if _, err := io.WriteString(sw.w, r.Replace(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
