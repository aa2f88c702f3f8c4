package encryption_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/encryption"
	sinkmemory "github.com/outboxkit/outbox/sinks/memory"
)

// newKeyring returns a keyring file with a current key for each tenant, and its Cipher.
func newKeyring(t testing.TB, tenants ...string) (string, *encryption.Keyring, *encryption.Cipher) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keyring.json")
	for _, tenant := range tenants {
		_, err := encryption.RotateKey(path, tenant, time.Now())
		require.NoError(t, err)
	}
	kr, err := encryption.OpenKeyring(path)
	require.NoError(t, err)
	c, err := encryption.New(encryption.Options{Keys: kr})
	require.NoError(t, err)
	return path, kr, c
}

// pipeline is Write -> memory adapter -> relay -> memory broker, with a Cipher.
type pipeline struct {
	store  *memory.Store
	ob     *core.Outbox[*memory.Tx]
	broker *sinkmemory.Broker
	inbox  *core.Inbox[*memory.Tx]
}

func newPipeline(t *testing.T, c *encryption.Cipher) *pipeline {
	t.Helper()
	ctx := t.Context()
	store, err := memory.New(nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), &core.OutboxOptions{Encrypter: c})
	require.NoError(t, err)
	broker, err := sinkmemory.NewBroker(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](ctx, store, &core.InboxOptions{Decrypter: c})
	require.NoError(t, err)
	return &pipeline{store: store, ob: ob, broker: broker, inbox: inbox}
}

// write writes events in one transaction and returns them as stored.
func (p *pipeline) write(t *testing.T, events ...core.Event) []core.Event {
	t.Helper()
	var out []core.Event
	require.NoError(t, p.store.InTx(t.Context(), func(ctx context.Context, tx *memory.Tx) error {
		var err error
		out, err = p.ob.Write(ctx, tx, events...)
		return err
	}))
	return out
}

// relay runs a relay until n messages were delivered and returns them.
func (p *pipeline) relay(t *testing.T, n int) []core.Message {
	t.Helper()
	r, err := core.NewRelay(p.store, p.broker, core.StaticRouter{Default: "q"}, &core.RelayOptions{PollInterval: 5 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(t.Context()) }()
	var got []core.Message
	for len(got) < n {
		select {
		case m := <-p.broker.Deliveries():
			got = append(got, m)
		case <-time.After(10 * time.Second):
			t.Fatalf("delivered %d of %d", len(got), n)
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
	defer cancel()
	require.NoError(t, r.Shutdown(ctx))
	require.NoError(t, <-done)
	return got
}

func ev(id, tenant, payload string) core.Event {
	return core.Event{ID: id, AggregateType: "order", AggregateID: id, Type: "order.placed", Tenant: tenant, Payload: []byte(payload)}
}

// process runs msg through the inbox and returns the payload the handler saw.
func (p *pipeline) process(t *testing.T, msg core.InboxMessage) ([]byte, core.InboxResult, error) {
	var seen []byte
	res, err := p.inbox.Process(t.Context(), "c", msg, func(_ context.Context, tx *memory.Tx, m core.InboxMessage) error {
		seen = m.Payload
		return tx.Incr("applied")
	})
	return seen, res, err
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	_, _, c := newKeyring(t, "acme", "")
	p := newPipeline(t, c)
	plain := map[string]string{"e1": `{"n":1}`, "e2": `{"n":2}`, "e3": `{"n":3}`}
	caller := []core.Event{ev("e1", "acme", plain["e1"]), ev("e2", "acme", plain["e2"]), ev("e3", "", plain["e3"])}
	stored := p.write(t, caller...)
	require.Equal(t, plain["e1"], string(caller[0].Payload), "the caller's event is not modified")
	for _, e := range stored {
		require.True(t, encryption.IsEnvelope(e.Payload), e.ID)
		require.NotContains(t, string(e.Payload), plain[e.ID])
	}
	// One data key per tenant and key in a Write call: e1 and e2 share the wrapped key, not e3.
	env := func(b []byte) encryption.Envelope { e, err := encryption.Parse(b); require.NoError(t, err); return e }
	require.Equal(t, env(stored[0].Payload).WrappedKey, env(stored[1].Payload).WrappedKey)
	require.NotEqual(t, env(stored[0].Payload).KeyID, env(stored[2].Payload).KeyID)

	for _, m := range p.relay(t, 3) {
		require.True(t, encryption.IsEnvelope(m.Payload), "the broker copy is ciphertext")
		require.NotContains(t, string(m.Payload), plain[m.ID])
		seen, res, err := p.process(t, core.InboxMessageOf(&m.Event, m.CreatedAt, "q"))
		require.NoError(t, err)
		require.Equal(t, core.Applied, res.Outcome)
		require.Equal(t, plain[m.ID], string(seen), "the handler gets the plaintext")
		// A redelivery is a duplicate: the digest recorded is the plaintext's.
		_, res, err = p.process(t, core.InboxMessageOf(&m.Event, m.CreatedAt, "q"))
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, res.Outcome)
	}
	require.EqualValues(t, 3, p.store.Counter("applied"))
}

func TestProcessBatchDecrypts(t *testing.T) {
	t.Parallel()
	_, _, c := newKeyring(t, "")
	p := newPipeline(t, c)
	stored := p.write(t, ev("b1", "", "one"), ev("b2", "", "two"))
	msgs := []core.InboxMessage{core.InboxMessageOf(&stored[0], time.Time{}, ""), core.InboxMessageOf(&stored[1], time.Time{}, "")}
	var seen []string
	_, err := p.inbox.ProcessSet(t.Context(), "c", msgs, func(_ context.Context, _ *memory.Tx, applied []core.InboxMessage) error {
		for _, m := range applied {
			seen = append(seen, string(m.Payload))
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"one", "two"}, seen)
	require.True(t, encryption.IsEnvelope(msgs[0].Payload), "the caller's messages are not modified")

	// A bad one: a *BatchError naming it, nothing recorded.
	msgs = append(msgs, core.InboxMessageOf(&stored[0], time.Time{}, ""))
	msgs[2].EventID = "b3"
	_, err = p.inbox.ProcessBatch(t.Context(), "c", msgs, func(context.Context, *memory.Tx, int, core.InboxMessage) error { return nil })
	var be *core.BatchError
	require.ErrorAs(t, err, &be)
	require.Equal(t, 2, be.Index)
	require.ErrorIs(t, err, encryption.ErrTampered)
}

// A ciphertext moved to another event ID or tenant does not open: the event ID and tenant are
// authenticated with it. (Broken on purpose, by authenticating the header alone in aad, this
// test fails: see the report.)
func TestMovedCiphertextFails(t *testing.T) {
	t.Parallel()
	_, _, c := newKeyring(t, "acme", "other")
	p := newPipeline(t, c)
	stored := p.write(t, ev("m1", "acme", "secret of m1"), ev("m2", "acme", "m2"))

	moved := core.InboxMessageOf(&stored[0], time.Time{}, "")
	moved.EventID = "m2"
	_, _, err := p.process(t, moved)
	require.ErrorIs(t, err, encryption.ErrTampered)
	require.ErrorIs(t, err, core.ErrUndecryptable)
	require.True(t, core.IsPermanent(err))

	// Moved to tenant "other": its keyring holds no such key, and the key is acme's: tampered
	// (permanent), not unknown (retried).
	other := core.InboxMessageOf(&stored[0], time.Time{}, "")
	other.Tenant = "other"
	_, _, err = p.process(t, other)
	require.ErrorIs(t, err, encryption.ErrTampered)
	require.True(t, core.IsPermanent(err))
	require.EqualValues(t, 0, p.store.Counter("applied"), "nothing applied")

	// And the real one still applies: nothing was recorded for m2 or m1.
	seen, res, err := p.process(t, core.InboxMessageOf(&stored[0], time.Time{}, ""))
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	require.Equal(t, "secret of m1", string(seen))
}

// Moved to another event of the same tenant and key, the wrapped key opens: only the AAD
// stops it. Open directly, for each byte position changed too.
func TestOpenAuthenticates(t *testing.T) {
	t.Parallel()
	_, _, c := newKeyring(t, "acme")
	events := []core.Event{ev("x1", "acme", "payload of x1")}
	require.NoError(t, c.EncryptPayloads(t.Context(), events))
	sealed := events[0].Payload
	plain, err := c.Open(t.Context(), "x1", "acme", sealed)
	require.NoError(t, err)
	require.Equal(t, "payload of x1", string(plain))

	_, err = c.Open(t.Context(), "x2", "acme", sealed)
	require.ErrorIs(t, err, encryption.ErrTampered, "moved to another event ID")
	_, err = c.Open(t.Context(), "x1", "", sealed)
	require.Error(t, err, "moved to another tenant")

	// Every single-byte change fails, none returns a plaintext.
	for i := range sealed {
		b := bytes.Clone(sealed)
		b[i] ^= 0x01
		_, err := c.Open(t.Context(), "x1", "acme", b)
		require.Error(t, err, "byte %d", i)
		require.True(t, errors.Is(err, core.ErrUndecryptable) || errors.Is(err, encryption.ErrUnknownKey), "byte %d: %v", i, err)
	}
	_, err = c.Open(t.Context(), "x1", "acme", sealed[:len(sealed)-1])
	require.ErrorIs(t, err, encryption.ErrTampered)
	_, err = c.Open(t.Context(), "x1", "acme", []byte(`{"clear":true}`))
	require.ErrorIs(t, err, encryption.ErrMalformed)
	require.True(t, core.IsPermanent(err))
}

func TestAllowClear(t *testing.T) {
	t.Parallel()
	_, kr, _ := newKeyring(t, "")
	c, err := encryption.New(encryption.Options{Keys: kr, AllowClear: true})
	require.NoError(t, err)
	msg := core.InboxMessage{EventID: "c1", Payload: []byte("clear")}
	require.NoError(t, c.DecryptPayload(t.Context(), &msg))
	require.Equal(t, "clear", string(msg.Payload))
	_, err = encryption.New(encryption.Options{})
	var oe *core.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "Keys", oe.Field)
}

func TestRotation(t *testing.T) {
	t.Parallel()
	path, kr, c := newKeyring(t, "acme")
	p := newPipeline(t, c)
	old := p.write(t, ev("r1", "acme", "before"))
	newID, err := encryption.RotateKey(path, "acme", time.Now())
	require.NoError(t, err)
	require.NoError(t, kr.Reload()) // or within a second
	fresh := p.write(t, ev("r2", "acme", "after"))
	e1, err := encryption.Parse(old[0].Payload)
	require.NoError(t, err)
	e2, err := encryption.Parse(fresh[0].Payload)
	require.NoError(t, err)
	require.NotEqual(t, e1.KeyID, e2.KeyID)
	require.Equal(t, newID, e2.KeyID, "new writes use the new current key")
	for _, e := range []core.Event{old[0], fresh[0]} {
		seen, _, err := p.process(t, core.InboxMessageOf(&e, time.Time{}, ""))
		require.NoError(t, err)
		require.Equal(t, map[string]string{"r1": "before", "r2": "after"}[e.ID], string(seen))
	}
}

// Per-data-subject keys: SelectKey chooses a key of the tenant's keyring; destroying it
// shreds that subject's events only.
func TestKeySelectorShredsOneSubject(t *testing.T) {
	t.Parallel()
	path, kr, _ := newKeyring(t, "acme")
	subjectKey, err := encryption.RotateKey(path, "acme", time.Now()) // becomes current...
	require.NoError(t, err)
	tenantKey, err := encryption.RotateKey(path, "acme", time.Now()) // ...and this one after it
	require.NoError(t, err)
	require.NoError(t, kr.Reload())
	c, err := encryption.New(encryption.Options{Keys: kr, SelectKey: func(_ context.Context, e *core.Event) (string, error) {
		if e.AggregateID == "alice" {
			return subjectKey, nil
		}
		return "", nil
	}})
	require.NoError(t, err)
	events := []core.Event{ev("alice", "acme", "alice's"), ev("bob", "acme", "bob's")}
	require.NoError(t, c.EncryptPayloads(t.Context(), events))
	ea, _ := encryption.Parse(events[0].Payload)
	eb, _ := encryption.Parse(events[1].Payload)
	require.Equal(t, subjectKey, ea.KeyID)
	require.Equal(t, tenantKey, eb.KeyID)

	ids, err := encryption.DestroyKeys(path, "acme", subjectKey, time.Now())
	require.NoError(t, err)
	require.Equal(t, []string{subjectKey}, ids)
	require.NoError(t, kr.Reload())
	_, err = c.Open(t.Context(), "alice", "acme", events[0].Payload)
	require.ErrorIs(t, err, encryption.ErrKeyDestroyed)
	plain, err := c.Open(t.Context(), "bob", "acme", events[1].Payload)
	require.NoError(t, err)
	require.Equal(t, "bob's", string(plain))
}

func TestShredding(t *testing.T) {
	t.Parallel()
	path, _, c := newKeyring(t, "acme", "beta")
	p := newPipeline(t, c)
	stored := p.write(t, ev("s1", "acme", "acme's"), ev("s2", "beta", "beta's"))
	ids, err := encryption.DestroyKeys(path, "acme", "", time.Now())
	require.NoError(t, err)
	require.Len(t, ids, 1)
	// A running Keyring sees the file change within a second (or at once on Reload).
	require.Eventually(t, func() bool {
		_, err := c.Open(t.Context(), "s1", "acme", stored[0].Payload)
		return errors.Is(err, encryption.ErrKeyDestroyed)
	}, 3*time.Second, 50*time.Millisecond)

	_, _, err = p.process(t, core.InboxMessageOf(&stored[0], time.Time{}, ""))
	require.ErrorIs(t, err, encryption.ErrKeyDestroyed)
	require.ErrorIs(t, err, core.ErrUndecryptable)
	require.True(t, core.IsPermanent(err))
	seen, _, err := p.process(t, core.InboxMessageOf(&stored[1], time.Time{}, ""))
	require.NoError(t, err)
	require.Equal(t, "beta's", string(seen), "another tenant is untouched")
	require.EqualValues(t, 1, p.store.Counter("applied"))

	// New writes of the shredded tenant fail until a rotation gives it a key again.
	require.Error(t, p.store.InTx(t.Context(), func(ctx context.Context, tx *memory.Tx) error {
		_, err := p.ob.Write(ctx, tx, ev("s3", "acme", "x"))
		require.ErrorIs(t, err, encryption.ErrUnknownKey)
		return err
	}))
	// Destroying again: nothing left, refused.
	_, err = encryption.DestroyKeys(path, "acme", "", time.Now())
	require.ErrorIs(t, err, encryption.ErrUnknownKey)
}

func TestKeyringFileChecks(t *testing.T) {
	t.Parallel()
	path, _, _ := newKeyring(t, "")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.NoError(t, os.Chmod(path, 0o644))
	_, err = encryption.OpenKeyring(path)
	require.ErrorIs(t, err, encryption.ErrKeyringExposed)

	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"version":1,"tenants":{"":{"current":"k","keys":{"k":"c2hvcnQ="}}}}`), 0o600))
	_, err = encryption.OpenKeyring(bad)
	require.ErrorContains(t, err, "want 32")
}

// fakeKMS is an interface fake of the KMS client (the emulator here has no KMS): it wraps
// with AES-GCM under a key per KMS key ID, the encryption context authenticated, and answers
// as KMS does for a key pending deletion.
type fakeKMS struct {
	keys    map[string][]byte
	deleted map[string]bool
	calls   int
}

func (f *fakeKMS) ctx(m map[string]string) []byte { return []byte(m["outboxkit:tenant"]) }

func (f *fakeKMS) Encrypt(_ context.Context, in *kmsEncryptInput, _ ...func(*kmsOptions)) (*kmsEncryptOutput, error) {
	f.calls++
	key, ok := f.keys[*in.KeyId]
	if !ok || f.deleted[*in.KeyId] {
		return nil, &kmsNotFound{Message: strp("no key")}
	}
	blob := append([]byte(*in.KeyId+"|"), sealFake(key, in.Plaintext, f.ctx(in.EncryptionContext))...)
	return &kmsEncryptOutput{CiphertextBlob: blob, KeyId: in.KeyId}, nil
}

func (f *fakeKMS) Decrypt(_ context.Context, in *kmsDecryptInput, _ ...func(*kmsOptions)) (*kmsDecryptOutput, error) {
	f.calls++
	if f.deleted[*in.KeyId] {
		return nil, &kmsInvalidState{Message: strp("pending deletion")}
	}
	key, ok := f.keys[*in.KeyId]
	prefix := []byte(*in.KeyId + "|")
	if !ok || !bytes.HasPrefix(in.CiphertextBlob, prefix) {
		return nil, &kmsIncorrectKey{Message: strp("incorrect key")}
	}
	plain, err := openFake(key, in.CiphertextBlob[len(prefix):], f.ctx(in.EncryptionContext))
	if err != nil {
		return nil, &kmsInvalidCiphertext{Message: strp("invalid ciphertext")}
	}
	return &kmsDecryptOutput{Plaintext: plain, KeyId: in.KeyId}, nil
}

func strp(s string) *string { return &s }

func TestKMSProvider(t *testing.T) {
	t.Parallel()
	fake := &fakeKMS{keys: map[string][]byte{"alias/acme": bytes.Repeat([]byte{1}, 32), "alias/acme-2": bytes.Repeat([]byte{2}, 32)}, deleted: map[string]bool{}}
	keys := map[string]string{"acme": "alias/acme"}
	k, err := encryption.NewKMS(encryption.KMSOptions{Client: fake, Keys: keys})
	require.NoError(t, err)
	c, err := encryption.New(encryption.Options{Keys: k})
	require.NoError(t, err)

	events := []core.Event{ev("k1", "acme", "one"), ev("k2", "acme", "two")}
	require.NoError(t, c.EncryptPayloads(t.Context(), events))
	require.Equal(t, 1, fake.calls, "one kms:Encrypt for the tenant's events of one call")
	for i, want := range []string{"one", "two"} {
		plain, err := c.Open(t.Context(), events[i].ID, "acme", events[i].Payload)
		require.NoError(t, err)
		require.Equal(t, want, string(plain))
	}
	// The tenant is the encryption context: another tenant's message does not open.
	_, err = c.Open(t.Context(), "k1", "beta", events[0].Payload)
	require.ErrorIs(t, err, encryption.ErrTampered)
	require.True(t, core.IsPermanent(err))
	// An unknown tenant cannot write.
	err = c.EncryptPayloads(t.Context(), []core.Event{ev("k3", "beta", "x")})
	require.ErrorIs(t, err, encryption.ErrUnknownKey)

	// Rotation: the tenant's key changes, old payloads name theirs.
	keys["acme"] = "alias/acme-2"
	later := []core.Event{ev("k4", "acme", "four")}
	require.NoError(t, c.EncryptPayloads(t.Context(), later))
	env, _ := encryption.Parse(later[0].Payload)
	require.Equal(t, "alias/acme-2", env.KeyID)
	_, err = c.Open(t.Context(), "k1", "acme", events[0].Payload)
	require.NoError(t, err)

	// Shredding: ScheduleKeyDeletion; then its payloads are destroyed for good.
	fake.deleted["alias/acme"] = true
	_, err = c.Open(t.Context(), "k1", "acme", events[0].Payload)
	require.ErrorIs(t, err, encryption.ErrKeyDestroyed)
	require.True(t, core.IsPermanent(err))
	_, err = c.Open(t.Context(), "k4", "acme", later[0].Payload)
	require.NoError(t, err)

	_, err = encryption.NewKMS(encryption.KMSOptions{Client: fake})
	var oe *core.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "Keys", oe.Field)
}

// The envelope's layout, as documented.
func TestEnvelopeLayout(t *testing.T) {
	t.Parallel()
	_, _, c := newKeyring(t, "")
	events := []core.Event{ev("l1", "", "hello")}
	require.NoError(t, c.EncryptPayloads(t.Context(), events))
	b := events[0].Payload
	require.Equal(t, "\x00OKE\x01", string(b[:5]))
	env, err := encryption.Parse(b)
	require.NoError(t, err)
	kl := int(binary.BigEndian.Uint16(b[5:]))
	require.Equal(t, env.KeyID, string(b[7:7+kl]))
	wl := int(binary.BigEndian.Uint16(b[7+kl:]))
	require.Equal(t, 12+32+16, wl, "keyring: nonce, data key, tag")
	require.Len(t, b, 5+2+kl+2+wl+12+len("hello")+16)
}

// staticKeys is a KeyProvider that binds nothing to the tenant: one key for all, the data
// key "wrapped" as is. With it only the envelope's own authenticated data can refuse a
// ciphertext moved to another tenant.
type staticKeys struct{}

func (staticKeys) CurrentKey(context.Context, string) (string, error) { return "static", nil }
func (staticKeys) WrapKey(_ context.Context, _, _ string, dk []byte) ([]byte, error) {
	return bytes.Clone(dk), nil
}
func (staticKeys) UnwrapKey(_ context.Context, _, _ string, w []byte) ([]byte, error) {
	return bytes.Clone(w), nil
}

func TestTenantAuthenticatedByTheEnvelope(t *testing.T) {
	t.Parallel()
	c, err := encryption.New(encryption.Options{Keys: staticKeys{}})
	require.NoError(t, err)
	events := []core.Event{ev("t1", "acme", "acme's")}
	require.NoError(t, c.EncryptPayloads(t.Context(), events))
	plain, err := c.Open(t.Context(), "t1", "acme", events[0].Payload)
	require.NoError(t, err)
	require.Equal(t, "acme's", string(plain))
	_, err = c.Open(t.Context(), "t1", "beta", events[0].Payload)
	require.ErrorIs(t, err, encryption.ErrTampered)
	_, err = c.Open(t.Context(), "t2", "acme", events[0].Payload)
	require.ErrorIs(t, err, encryption.ErrTampered)
}

// ReuseDataKeys: one kms:Encrypt for several Write calls and one kms:Decrypt for their
// messages, within the interval; without it, one per call and one per message.
func TestReuseDataKeys(t *testing.T) {
	t.Parallel()
	for _, reuse := range []time.Duration{0, time.Hour} {
		fake := &fakeKMS{keys: map[string][]byte{"k": bytes.Repeat([]byte{7}, 32)}, deleted: map[string]bool{}}
		k, err := encryption.NewKMS(encryption.KMSOptions{Client: fake, Keys: map[string]string{"": "k"}})
		require.NoError(t, err)
		c, err := encryption.New(encryption.Options{Keys: k, ReuseDataKeys: reuse})
		require.NoError(t, err)
		var sealed [][]byte
		for i := range 3 {
			events := []core.Event{ev("u"+strconv.Itoa(i), "", "p")}
			require.NoError(t, c.EncryptPayloads(t.Context(), events))
			sealed = append(sealed, events[0].Payload)
		}
		wantCalls := map[time.Duration]int{0: 3, time.Hour: 1}[reuse]
		require.Equal(t, wantCalls, fake.calls, "kms:Encrypt calls, reuse %v", reuse)
		fake.calls = 0
		for i, b := range sealed {
			plain, err := c.Open(t.Context(), "u"+strconv.Itoa(i), "", b)
			require.NoError(t, err)
			require.Equal(t, "p", string(plain))
		}
		require.Equal(t, wantCalls, fake.calls, "kms:Decrypt calls, reuse %v", reuse)
		// A kept data key still checks the event ID.
		_, err = c.Open(t.Context(), "u1", "", sealed[0])
		require.ErrorIs(t, err, encryption.ErrTampered)
	}
	_, err := encryption.New(encryption.Options{Keys: staticKeys{}, ReuseDataKeys: -1})
	var oe *core.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "ReuseDataKeys", oe.Field)
}
