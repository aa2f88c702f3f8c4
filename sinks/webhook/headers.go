package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/ce"
)

// The Standard Webhooks headers.
const (
	HeaderWebhookID        = "webhook-id"        // the event ID (the same on every resend)
	HeaderWebhookTimestamp = "webhook-timestamp" // unix seconds of this attempt
	HeaderWebhookSignature = "webhook-signature" // "v1,<base64 HMAC-SHA256>", one per secret, space-separated
)

// The CloudEvents HTTP protocol binding, binary content mode: attribute headers (HTTP header
// names are case-insensitive; Go sends them canonicalised, e.g. Ce-Id).
const (
	HeaderSpecVersion      = "ce-specversion"
	HeaderID               = "ce-id"
	HeaderSource           = "ce-source"
	HeaderType             = "ce-type"
	HeaderTime             = "ce-time"
	HeaderSubject          = "ce-subject"
	HeaderContentType      = "Content-Type"
	HeaderAggregateType    = "ce-aggregatetype"
	HeaderAggregateID      = "ce-aggregateid"
	HeaderAggregateVersion = "ce-aggregateversion"
	HeaderPartitionKey     = "ce-partitionkey"
	HeaderSchemaID         = "ce-schemaid"
	HeaderTenant           = "ce-tenant"
	HeaderCausationID      = "ce-causationid"
	HeaderCorrelationID    = "ce-correlationid"
	HeaderTraceparent      = "ce-traceparent"
	HeaderTracestate       = "ce-tracestate"
	// HeaderPrefix prefixes every other event header: Headers["x-region"] travels as
	// "Outbox-H-x-region" and comes back lowercased.
	HeaderPrefix = "Outbox-H-"
)

// SpecVersion is the CloudEvents version the headers follow.
const SpecVersion = ce.SpecVersion

// binding is the CloudEvents HTTP protocol binding, binary content mode.
var binding = ce.Binding{Prefix: "ce-", ContentType: HeaderContentType, HeaderPrefix: HeaderPrefix, Fold: true}

// secretPrefix starts a Standard Webhooks secret.
const secretPrefix = "whsec_"

// parseSecrets decodes "whsec_<base64>" secrets (the prefix is optional, as in the reference
// libraries); field names the option in the error.
func parseSecrets(field string, secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, &core.OptionError{Field: field, Reason: "at least one secret is required (whsec_ followed by the base64 of the key)"}
	}
	keys := make([][]byte, 0, len(secrets))
	for i, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(strings.TrimSpace(s), secretPrefix))
		if err != nil || len(key) == 0 {
			return nil, &core.OptionError{Field: fmt.Sprintf("%s[%d]", field, i), Reason: "want whsec_ followed by the standard base64 of a non-empty key"}
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// sign returns the v1 signature of id, ts and body with key: base64(HMAC-SHA256(key,
// "id.ts.body")).
func sign(key []byte, id string, ts int64, body []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write(strconv.AppendInt(nil, ts, 10))
	h.Write([]byte{'.'})
	h.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// signatures is the webhook-signature header: one v1 signature per key, space-separated.
func signatures(keys [][]byte, id string, ts int64, body []byte) string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = sign(k, id, ts, body)
	}
	return strings.Join(sigs, " ")
}

// verify checks the Standard Webhooks headers of a request against keys: some v1 signature of
// the header matches some key, and the timestamp is within tolerance of now. It returns the
// webhook id and the timestamp.
func verify(keys [][]byte, id, tsText, sigHeader string, body []byte, now time.Time, tolerance time.Duration) (int64, error) {
	if id == "" || tsText == "" || sigHeader == "" {
		return 0, fmt.Errorf("%w: missing %s, %s or %s", ErrBadSignature, HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature)
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not unix seconds", ErrBadSignature, HeaderWebhookTimestamp, tsText)
	}
	matched := false
	for _, k := range keys {
		want := []byte(sign(k, id, ts, body))
		for s := range strings.FieldsSeq(sigHeader) {
			if hmac.Equal([]byte(s), want) {
				matched = true
			}
		}
	}
	if !matched {
		return 0, fmt.Errorf("%w: no signature matches a secret", ErrBadSignature)
	}
	// The timestamp is checked after the signature: an unsigned request learns nothing of the
	// clock.
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return 0, fmt.Errorf("%w: %s %d is %v from now (tolerance %v)", ErrTimestampOutOfTolerance, HeaderWebhookTimestamp, ts, d.Round(time.Second), tolerance)
	}
	return ts, nil
}

// headerProblem says why the event header k: v cannot travel as an HTTP header unchanged, or
// returns "".
func headerProblem(k, v string) string {
	if !httpguts.ValidHeaderFieldName(binding.HeaderPrefix + k) {
		return fmt.Sprintf("name %q is not an HTTP token", k)
	}
	if !httpguts.ValidHeaderFieldValue(v) || strings.TrimLeft(v, " \t") != v || strings.TrimRight(v, " \t") != v {
		return fmt.Sprintf("value of %q has a control character or leading or trailing whitespace", k)
	}
	return ""
}

// CheckSecret reports whether secret is a Standard Webhooks secret as Options.Secrets takes
// it: "whsec_" (optional) followed by the standard base64 of a non-empty key. The error does
// not quote the secret.
func CheckSecret(secret string) error {
	_, err := parseSecrets("secret", []string{secret})
	return err
}
