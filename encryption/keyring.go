package encryption

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// KeyringFile is the JSON of a keyring file (Keyring):
//
//	{"version": 1, "tenants": {"acme": {"current": "k2",
//	  "keys": {"k1": "<32 bytes, base64>", "k2": "..."},
//	  "destroyed": {"k0": "2026-12-06T03:00:00Z"}}}}
//
// The tenant "" holds the keys of events without a Tenant. A destroyed key's ID stays, with
// the time it was destroyed, so that its payloads fail with ErrKeyDestroyed (permanent)
// rather than ErrUnknownKey.
type KeyringFile struct {
	Version int                       `json:"version"`
	Tenants map[string]*TenantKeyring `json:"tenants"`
}

// TenantKeyring is one tenant's keys in a KeyringFile.
type TenantKeyring struct {
	// Current is the key ID new payloads are encrypted with ("" : none; Write fails).
	Current string `json:"current"`
	// Keys maps a key ID to its 32 bytes (base64 in JSON).
	Keys map[string][]byte `json:"keys"`
	// Destroyed maps the ID of a destroyed key to when it was destroyed.
	Destroyed map[string]time.Time `json:"destroyed,omitempty"`
}

// Keyring is the KeyProvider of a local keyring file (KeyringFile): for tests and small
// deployments. Each data key is wrapped with AES-256-GCM under the named key, the tenant and
// key ID authenticated with it. It reads the file again when its modification time, size
// or inode changed (compared at most once a second, and on Reload), so that a key destroyed or added by `outboxkit keys`
// is seen by running producers and consumers without a restart.
type Keyring struct {
	path    string
	mu      sync.Mutex
	fi      os.FileInfo // of the file f was read from
	checked time.Time   // when fi was last compared with the file
	f       *KeyringFile
	aeads   map[[2]string]cipher.AEAD // of f's keys, by tenant and key ID
}

// keyringCheckInterval is how often a Keyring compares the file with the one it read.
const keyringCheckInterval = time.Second

var _ KeyProvider = (*Keyring)(nil)

// OpenKeyring reads the keyring file at path. A file that group or others may read or write
// returns ErrKeyringExposed.
func OpenKeyring(path string) (*Keyring, error) {
	k := &Keyring{path: path}
	if err := k.Reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// Reload compares the file with the one read now, and reads it again when it changed.
func (k *Keyring) Reload() error {
	k.mu.Lock()
	k.checked = time.Time{}
	k.mu.Unlock()
	_, err := k.load()
	return err
}

// ReadKeyringFile reads and checks the keyring file at path.
func ReadKeyringFile(path string) (*KeyringFile, os.FileInfo, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("encryption: keyring: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("encryption: keyring: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, nil, fmt.Errorf("%w: %s has mode %v", ErrKeyringExposed, path, fi.Mode().Perm())
	}
	var f KeyringFile
	dec := json.NewDecoder(fh)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, nil, fmt.Errorf("encryption: keyring %s: %w", path, err)
	}
	if err := f.check(); err != nil {
		return nil, nil, fmt.Errorf("encryption: keyring %s: %w", path, err)
	}
	return &f, fi, nil
}

func (f *KeyringFile) check() error {
	if f.Version != 1 {
		return fmt.Errorf("version %d: want 1", f.Version)
	}
	for tenant, t := range f.Tenants {
		if t == nil {
			return fmt.Errorf("tenant %q: null", tenant)
		}
		for id, key := range t.Keys {
			if id == "" || len(id) > maxKeyID {
				return fmt.Errorf("tenant %q: key ID %q: want 1 to %d bytes", tenant, id, maxKeyID)
			}
			if len(key) != dataKeyLen {
				return fmt.Errorf("tenant %q: key %q: %d bytes, want %d", tenant, id, len(key), dataKeyLen)
			}
			if _, gone := t.Destroyed[id]; gone {
				return fmt.Errorf("tenant %q: key %q is both present and destroyed", tenant, id)
			}
		}
		if _, ok := t.Keys[t.Current]; t.Current != "" && !ok {
			return fmt.Errorf("tenant %q: current key %q is not among its keys", tenant, t.Current)
		}
	}
	return nil
}

// load returns the file, read again when it changed.
func (k *Keyring) load() (*KeyringFile, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	if k.f != nil && now.Sub(k.checked) < keyringCheckInterval {
		return k.f, nil
	}
	fi, err := os.Stat(k.path)
	if err != nil {
		return nil, fmt.Errorf("encryption: keyring: %w", err)
	}
	if k.f != nil && os.SameFile(fi, k.fi) && fi.ModTime().Equal(k.fi.ModTime()) && fi.Size() == k.fi.Size() {
		k.checked = now
		return k.f, nil
	}
	f, fi, err := ReadKeyringFile(k.path)
	if err != nil {
		return nil, err
	}
	aeads := map[[2]string]cipher.AEAD{}
	for tenant, t := range f.Tenants {
		for id, key := range t.Keys {
			if aeads[[2]string{tenant, id}], err = newAEAD(key); err != nil {
				return nil, err
			}
		}
	}
	k.f, k.fi, k.checked, k.aeads = f, fi, now, aeads
	return f, nil
}

// key returns the AEAD of tenant's key keyID.
func (k *Keyring) key(tenant, keyID string) (cipher.AEAD, error) {
	f, err := k.load()
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	aead, ok := k.aeads[[2]string{tenant, keyID}]
	k.mu.Unlock()
	if ok {
		return aead, nil
	}
	if t := f.Tenants[tenant]; t != nil {
		if at, ok := t.Destroyed[keyID]; ok {
			return nil, fmt.Errorf("%w (at %s)", ErrKeyDestroyed, at.UTC().Format(time.RFC3339))
		}
	}
	for other, t := range f.Tenants { // a key of another tenant: moved there, not unknown
		_, has := t.Keys[keyID]
		_, had := t.Destroyed[keyID]
		if other != tenant && (has || had) {
			return nil, fmt.Errorf("%w: key %q is another tenant's", ErrTampered, keyID)
		}
	}
	return nil, ErrUnknownKey
}

// CurrentKey returns tenant's current key ID.
func (k *Keyring) CurrentKey(_ context.Context, tenant string) (string, error) {
	f, err := k.load()
	if err != nil {
		return "", err
	}
	if t := f.Tenants[tenant]; t != nil && t.Current != "" {
		return t.Current, nil
	}
	return "", fmt.Errorf("%w: tenant %q has no current key (outboxkit keys rotate)", ErrUnknownKey, tenant)
}

// wrapAAD binds a wrapped data key to its tenant and key ID.
func wrapAAD(tenant, keyID string) []byte {
	return []byte("outboxkit keyring v1\x00" + tenant + "\x00" + keyID)
}

// WrapKey encrypts dataKey with tenant's key keyID: nonce (12 bytes), then the ciphertext and tag.
func (k *Keyring) WrapKey(_ context.Context, tenant, keyID string, dataKey []byte) ([]byte, error) {
	aead, err := k.key(tenant, keyID)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, nonceSize, nonceSize+len(dataKey)+tagSize)
	rand.Read(nonce)
	return aead.Seal(nonce, nonce, dataKey, wrapAAD(tenant, keyID)), nil
}

// UnwrapKey decrypts a data key that WrapKey wrapped.
func (k *Keyring) UnwrapKey(_ context.Context, tenant, keyID string, wrapped []byte) ([]byte, error) {
	aead, err := k.key(tenant, keyID)
	if err != nil {
		return nil, err
	}
	if len(wrapped) < nonceSize+tagSize {
		return nil, ErrTampered
	}
	dk, err := aead.Open(nil, wrapped[:nonceSize], wrapped[nonceSize:], wrapAAD(tenant, keyID))
	if err != nil {
		return nil, ErrTampered
	}
	return dk, nil
}

// NewKeyID returns a new key ID: the UTC time, then 4 random bytes in hex
// ("20261206T031500Z-9f3a0c1e"), so that IDs sort by creation.
func NewKeyID(now time.Time) string {
	var b [4]byte
	rand.Read(b[:])
	return now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// RotateKey adds a new random key to tenant in the keyring file at path (created, mode 0600,
// when missing) and makes it current; the old keys stay, so that their payloads still
// decrypt. The file is replaced atomically (WriteKeyringFile). It returns the new key ID.
// RotateKey and DestroyKeys read the file, change it and replace it: run one at a time on a
// file (one operator), or a concurrent change is lost.
func RotateKey(path, tenant string, now time.Time) (string, error) {
	f, err := readOrNew(path)
	if err != nil {
		return "", err
	}
	t := f.Tenants[tenant]
	if t == nil {
		t = &TenantKeyring{}
		f.Tenants[tenant] = t
	}
	if t.Keys == nil {
		t.Keys = map[string][]byte{}
	}
	id := NewKeyID(now)
	key := make([]byte, dataKeyLen)
	rand.Read(key)
	t.Keys[id] = key
	t.Current = id
	return id, WriteKeyringFile(path, f)
}

// DestroyKeys removes tenant's key keyID, or all its keys when keyID is "", from the keyring
// file at path, recording each as destroyed at now: every payload encrypted with them is
// unreadable from then on (crypto-shredding), wherever its copies are. When the current key
// goes, the tenant has none until the next RotateKey. The file is replaced atomically
// (WriteKeyringFile). It returns the IDs destroyed, sorted; an unknown tenant or key returns
// ErrUnknownKey and changes nothing.
func DestroyKeys(path, tenant, keyID string, now time.Time) ([]string, error) {
	f, _, err := ReadKeyringFile(path)
	if err != nil {
		return nil, err
	}
	t := f.Tenants[tenant]
	if t == nil || len(t.Keys) == 0 {
		return nil, fmt.Errorf("%w: tenant %q has no keys", ErrUnknownKey, tenant)
	}
	var ids []string
	if keyID == "" {
		for id := range t.Keys {
			ids = append(ids, id)
		}
	} else {
		if _, ok := t.Keys[keyID]; !ok {
			return nil, fmt.Errorf("%w: tenant %q has no key %q", ErrUnknownKey, tenant, keyID)
		}
		ids = []string{keyID}
	}
	slices.Sort(ids)
	if t.Destroyed == nil {
		t.Destroyed = map[string]time.Time{}
	}
	for _, id := range ids {
		clear(t.Keys[id])
		delete(t.Keys, id)
		t.Destroyed[id] = now.UTC()
		if t.Current == id {
			t.Current = ""
		}
	}
	return ids, WriteKeyringFile(path, f)
}

func readOrNew(path string) (*KeyringFile, error) {
	f, _, err := ReadKeyringFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &KeyringFile{Version: 1, Tenants: map[string]*TenantKeyring{}}, nil
	}
	if err != nil {
		return nil, err
	}
	if f.Tenants == nil {
		f.Tenants = map[string]*TenantKeyring{}
	}
	return f, nil
}

// WriteKeyringFile replaces the keyring file at path with f atomically: it writes a
// temporary file (mode 0600) in the same directory, syncs it, renames it over path and syncs
// the directory. A reader sees the old file or the new one, never a part.
func WriteKeyringFile(path string, f *KeyringFile) error {
	if err := f.check(); err != nil {
		return fmt.Errorf("encryption: keyring: %w", err)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("encryption: keyring: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("encryption: keyring: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("encryption: keyring: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("encryption: keyring: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("encryption: keyring: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("encryption: keyring: %w", err)
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
