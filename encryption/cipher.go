package encryption

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
)

// KeyProvider wraps and unwraps data keys with named keys of a tenant: a keyring file
// (Keyring), AWS KMS (KMS), or the application's own. Its methods are called concurrently.
type KeyProvider interface {
	// CurrentKey returns the ID of the key new data keys of tenant are wrapped with. A tenant
	// without one returns an error wrapping ErrUnknownKey.
	CurrentKey(ctx context.Context, tenant string) (keyID string, err error)
	// WrapKey encrypts dataKey (32 bytes) with tenant's key keyID.
	WrapKey(ctx context.Context, tenant, keyID string, dataKey []byte) (wrapped []byte, err error)
	// UnwrapKey decrypts a wrapped data key. A destroyed key returns an error wrapping
	// ErrKeyDestroyed, a wrapped key that does not open one wrapping ErrTampered, a key the
	// provider does not know one wrapping ErrUnknownKey; anything else is retried.
	UnwrapKey(ctx context.Context, tenant, keyID string, wrapped []byte) (dataKey []byte, err error)
}

// KeySelector chooses the key of an event's payload: per data subject, say, a key ID the
// provider holds for ev.Tenant (Keyring: a key added with AddKey). It returns "" for the
// tenant's current key.
type KeySelector func(ctx context.Context, ev *core.Event) (keyID string, err error)

// Options configures a Cipher.
type Options struct {
	// Keys wraps and unwraps the data keys. Required.
	Keys KeyProvider
	// SelectKey chooses each event's key. Default nil: Keys.CurrentKey of the event's Tenant.
	SelectKey KeySelector
	// AllowClear makes DecryptPayload hand a payload that is not an envelope over as it is,
	// while a consumer reads events written before encryption was turned on. Default false:
	// such a payload fails with ErrMalformed (permanent).
	AllowClear bool
	// ReuseDataKeys, when positive, lets a data key serve the Write calls of that long (of one
	// tenant and key, up to 1<<20 events) and keeps the unwrapped data keys of decrypted
	// payloads that long (up to 4096 of them): one KeyProvider call (a KMS round trip) per
	// interval instead of per Write call on producers and per message on consumers. The
	// price: a destroyed key still decrypts the payloads whose data keys are kept, and a
	// selected (SelectKey) destroyed key still encrypts, until the interval is over. Default
	// 0: a fresh data key per Write call, unwrapped again for each message. Must not be
	// negative.
	ReuseDataKeys time.Duration
}

// Cipher encrypts payloads for core.Outbox (OutboxOptions.Encrypter) and decrypts them for
// core.Inbox (InboxOptions.Decrypter). It is safe for concurrent use.
type Cipher struct {
	o  Options
	mu sync.Mutex
	// Of ReuseDataKeys: the sealers of recent Write calls by tenant and key, and the AEADs of
	// recently unwrapped data keys by tenant, key and wrapped key.
	sealers map[[2]string]*sealer
	openers map[string]opener
}

// sealer encrypts with one data key.
type sealer struct {
	aead    cipher.AEAD
	keyID   string
	wrapped []byte
	until   time.Time // ReuseDataKeys
	uses    int
}

type opener struct {
	aead  cipher.AEAD
	until time.Time
}

// Bounds of ReuseDataKeys.
const (
	maxSealerUses = 1 << 20 // events per reused data key (random 96-bit nonces)
	maxOpeners    = 4096
)

var (
	_ core.PayloadEncrypter = (*Cipher)(nil)
	_ core.PayloadDecrypter = (*Cipher)(nil)
)

// New returns a Cipher. A nil Options.Keys is an *core.OptionError.
func New(opts Options) (*Cipher, error) {
	if opts.Keys == nil {
		return nil, &core.OptionError{Field: "Keys", Reason: "required: a KeyProvider (encryption.OpenKeyring, encryption.NewKMS)"}
	}
	if opts.ReuseDataKeys < 0 {
		return nil, &core.OptionError{Field: "ReuseDataKeys", Reason: "must not be negative (0: a fresh data key per Write call)"}
	}
	return &Cipher{o: opts, sealers: map[[2]string]*sealer{}, openers: map[string]opener{}}, nil
}

// The envelope, version 1 (see the package documentation).
const (
	magic      = "\x00OKE"
	version1   = 1
	nonceSize  = 12
	tagSize    = 16
	dataKeyLen = 32
	maxKeyID   = 2048
	maxWrapped = 4096
)

// EncryptPayloads replaces each event's payload by an envelope. The events of one tenant and
// key share one fresh data key, wrapped once (one KeyProvider call per tenant and key per
// Write call, not per event); each event has its own random nonce, and its ID and Tenant
// are authenticated with the ciphertext.
func (c *Cipher) EncryptPayloads(ctx context.Context, events []core.Event) error {
	type group = [2]string // tenant, key ID
	sealers := map[group]*sealer{}
	current := map[string]string{}
	for i := range events {
		ev := &events[i]
		keyID := ""
		if c.o.SelectKey != nil {
			id, err := c.o.SelectKey(ctx, ev)
			if err != nil {
				return fmt.Errorf("encryption: event %d: select key: %w", i, err)
			}
			keyID = id
		}
		if keyID == "" {
			id, ok := current[ev.Tenant]
			if !ok {
				var err error
				if id, err = c.o.Keys.CurrentKey(ctx, ev.Tenant); err != nil {
					return fmt.Errorf("encryption: event %d: tenant %q: %w", i, ev.Tenant, err)
				}
				current[ev.Tenant] = id
			}
			keyID = id
		}
		if len(keyID) > maxKeyID {
			return fmt.Errorf("encryption: event %d: key ID longer than %d bytes", i, maxKeyID)
		}
		g := group{ev.Tenant, keyID}
		s := sealers[g]
		if s == nil {
			s = c.reused(g)
		}
		if s == nil {
			dk := make([]byte, dataKeyLen)
			rand.Read(dk) // never returns an error (crypto/rand)
			wrapped, err := c.o.Keys.WrapKey(ctx, ev.Tenant, keyID, dk)
			if err != nil {
				return fmt.Errorf("encryption: event %d: wrap data key with %q: %w", i, keyID, err)
			}
			if len(wrapped) == 0 || len(wrapped) > maxWrapped {
				return fmt.Errorf("encryption: event %d: wrapped data key of %d bytes (want 1 to %d)", i, len(wrapped), maxWrapped)
			}
			aead, err := newAEAD(dk)
			clear(dk)
			if err != nil {
				return err
			}
			s = &sealer{aead: aead, keyID: keyID, wrapped: wrapped}
			if c.o.ReuseDataKeys > 0 {
				s.until = time.Now().Add(c.o.ReuseDataKeys)
				c.mu.Lock()
				c.sealers[g] = s
				c.mu.Unlock()
			}
		}
		sealers[g] = s
		if c.o.ReuseDataKeys > 0 {
			c.mu.Lock()
			s.uses++
			c.mu.Unlock()
		}
		ev.Payload = seal(s.aead, s.keyID, s.wrapped, ev.ID, ev.Tenant, ev.Payload)
	}
	return nil
}

// reused returns the kept sealer of g (ReuseDataKeys), nil when there is none in its time and
// uses.
func (c *Cipher) reused(g [2]string) *sealer {
	if c.o.ReuseDataKeys <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sealers[g]
	if s == nil || !time.Now().Before(s.until) || s.uses >= maxSealerUses {
		delete(c.sealers, g)
		return nil
	}
	return s
}

// seal returns the envelope of plaintext.
func seal(aead cipher.AEAD, keyID string, wrapped []byte, eventID, tenant string, plaintext []byte) []byte {
	hdr := len(magic) + 1 + 2 + len(keyID) + 2 + len(wrapped) + nonceSize
	out := make([]byte, hdr, hdr+len(plaintext)+tagSize)
	n := copy(out, magic)
	out[n] = version1
	n++
	binary.BigEndian.PutUint16(out[n:], uint16(len(keyID)))
	n += 2
	n += copy(out[n:], keyID)
	binary.BigEndian.PutUint16(out[n:], uint16(len(wrapped)))
	n += 2
	n += copy(out[n:], wrapped)
	rand.Read(out[n : n+nonceSize])
	return aead.Seal(out, out[n:n+nonceSize], plaintext, aad(out, eventID, tenant))
}

// aad is the additional authenticated data of an envelope: its header (magic to nonce), then
// the event ID and the tenant, each with its length.
func aad(header []byte, eventID, tenant string) []byte {
	b := make([]byte, 0, len(header)+4+len(eventID)+len(tenant))
	b = append(b, header...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(eventID)))
	b = append(b, eventID...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(tenant)))
	return append(b, tenant...)
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("encryption: %w", err)
	}
	return cipher.NewGCM(block)
}

// Envelope is the parsed header of an envelope.
type Envelope struct {
	Version    int
	KeyID      string
	WrappedKey []byte
	header     []byte // magic to nonce
	ciphertext []byte // with the tag
}

// IsEnvelope reports whether payload starts as an envelope does.
func IsEnvelope(payload []byte) bool { return bytes.HasPrefix(payload, []byte(magic)) }

// Parse reads an envelope's header (it decrypts nothing): the key ID tells an operator which
// key a stored or delivered payload needs. A payload that is not an envelope returns
// ErrMalformed.
func Parse(payload []byte) (Envelope, error) {
	bad := func(what string) (Envelope, error) {
		return Envelope{}, core.Permanent(fmt.Errorf("%w: %s", ErrMalformed, what))
	}
	if !IsEnvelope(payload) {
		return bad("no envelope prefix")
	}
	p := payload[len(magic):]
	if len(p) < 1 || p[0] != version1 {
		return bad("unknown version")
	}
	p = p[1:]
	field := func(max int) ([]byte, bool) {
		if len(p) < 2 {
			return nil, false
		}
		n := int(binary.BigEndian.Uint16(p))
		if n == 0 || n > max || len(p) < 2+n {
			return nil, false
		}
		f := p[2 : 2+n]
		p = p[2+n:]
		return f, true
	}
	keyID, ok := field(maxKeyID)
	if !ok {
		return bad("key ID")
	}
	wrapped, ok := field(maxWrapped)
	if !ok {
		return bad("wrapped key")
	}
	if len(p) < nonceSize+tagSize {
		return bad("truncated")
	}
	h := len(payload) - len(p) + nonceSize
	return Envelope{Version: version1, KeyID: string(keyID), WrappedKey: wrapped, header: payload[:h], ciphertext: payload[h:]}, nil
}

// Open returns the plaintext of an envelope written for eventID and tenant.
func (c *Cipher) Open(ctx context.Context, eventID, tenant string, payload []byte) ([]byte, error) {
	env, err := Parse(payload)
	if err != nil {
		return nil, err
	}
	aead, err := c.opener(ctx, tenant, env)
	if err != nil {
		return nil, fmt.Errorf("encryption: event %s: %w", eventID, err)
	}
	nonce := env.header[len(env.header)-nonceSize:]
	plain, err := aead.Open(nil, nonce, env.ciphertext, aad(env.header, eventID, tenant))
	if err != nil {
		return nil, core.Permanent(fmt.Errorf("encryption: event %s: %w", eventID, ErrTampered))
	}
	return plain, nil
}

// opener returns the AEAD of env's data key: unwrapped by the provider, or kept
// (ReuseDataKeys).
func (c *Cipher) opener(ctx context.Context, tenant string, env Envelope) (cipher.AEAD, error) {
	var id string
	if c.o.ReuseDataKeys > 0 {
		id = tenant + "\x00" + env.KeyID + "\x00" + string(env.WrappedKey)
		c.mu.Lock()
		o, ok := c.openers[id]
		c.mu.Unlock()
		if ok && time.Now().Before(o.until) {
			return o.aead, nil
		}
	}
	dk, err := c.o.Keys.UnwrapKey(ctx, tenant, env.KeyID, env.WrappedKey)
	if err != nil {
		err = fmt.Errorf("key %q of tenant %q: %w", env.KeyID, tenant, err)
		if isUndecryptable(err) {
			err = core.Permanent(err)
		}
		return nil, err
	}
	if len(dk) != dataKeyLen {
		return nil, core.Permanent(fmt.Errorf("%w: data key of %d bytes", ErrTampered, len(dk)))
	}
	aead, err := newAEAD(dk)
	clear(dk)
	if err != nil {
		return nil, err
	}
	if c.o.ReuseDataKeys > 0 {
		c.mu.Lock()
		if len(c.openers) >= maxOpeners {
			clear(c.openers)
		}
		c.openers[id] = opener{aead: aead, until: time.Now().Add(c.o.ReuseDataKeys)}
		c.mu.Unlock()
	}
	return aead, nil
}

// DecryptPayload replaces msg.Payload by its plaintext, authenticated with msg.EventID and
// msg.Tenant (core.InboxOptions.Decrypter).
func (c *Cipher) DecryptPayload(ctx context.Context, msg *core.InboxMessage) error {
	if c.o.AllowClear && !IsEnvelope(msg.Payload) {
		return nil
	}
	plain, err := c.Open(ctx, msg.EventID, msg.Tenant, msg.Payload)
	if err != nil {
		return err
	}
	msg.Payload = plain
	return nil
}
