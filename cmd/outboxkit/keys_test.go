package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/encryption"
)

func TestKeysRotateDestroy(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.json")
	var r1, r2 keysRotateJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, "keys", "rotate", "--keyring", path, "--tenant", "acme", "--output", "json")), &r1))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "created private")
	require.NoError(t, json.Unmarshal([]byte(ok(t, "keys", "rotate", "--keyring", path, "--tenant", "acme", "--output", "json")), &r2))
	require.Equal(t, "acme", r2.Tenant)
	require.NotEqual(t, r1.Key, r2.Key)
	require.Contains(t, ok(t, "keys", "rotate", "--keyring", path, "--tenant", ""), `rotated tenant="" key=`)

	f, _, err := encryption.ReadKeyringFile(path)
	require.NoError(t, err)
	require.Equal(t, r2.Key, f.Tenants["acme"].Current)
	require.Len(t, f.Tenants["acme"].Keys, 2)

	// Usage and refusals: nothing changed.
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	fails(t, 2, "--tenant is required", "keys", "destroy", "--keyring", path)
	fails(t, 2, "--keyring is required", "keys", "rotate", "--tenant", "x")
	fails(t, 2, "--actor: only with --db", "keys", "destroy", "--keyring", path, "--tenant", "acme", "--actor", "a")
	fails(t, 1, "unknown key", "keys", "destroy", "--keyring", path, "--tenant", "acme", "--key", "nope")
	fails(t, 1, "unknown key", "keys", "destroy", "--keyring", path, "--tenant", "beta")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after)

	material := base64.StdEncoding.EncodeToString(f.Tenants["acme"].Keys[r1.Key])
	// Destroy one key: it goes, recorded as destroyed; the other stays current.
	var d keysDestroyJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, "keys", "destroy", "--keyring", path, "--tenant", "acme", "--key", r1.Key, "--output", "json")), &d))
	require.Equal(t, keysDestroyJSON{Tenant: "acme", Destroyed: []string{r1.Key}}, d)
	f, _, err = encryption.ReadKeyringFile(path)
	require.NoError(t, err)
	require.NotContains(t, f.Tenants["acme"].Keys, r1.Key)
	require.Contains(t, f.Tenants["acme"].Destroyed, r1.Key)
	require.Equal(t, r2.Key, f.Tenants["acme"].Current)
	// The whole tenant.
	require.Equal(t, "destroyed tenant=\"acme\" keys=1 audited=false\n", ok(t, "keys", "destroy", "--keyring", path, "--tenant", "acme"))
	f, _, err = encryption.ReadKeyringFile(path)
	require.NoError(t, err)
	require.Empty(t, f.Tenants["acme"].Keys)
	require.Empty(t, f.Tenants["acme"].Current)
	require.Len(t, f.Tenants[""].Keys, 1, "another tenant untouched")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), material, "no key material left")
	require.Contains(t, string(after), material)
}

// keys destroy --db writes an audit row (checked before, written after the file changed).
func TestKeysDestroyAudited(t *testing.T) {
	t.Parallel()
	d := opsSQLite(t)
	ok(t, append([]string{"migrate", "--lanes", "1"}, d.flags...)...)
	path := filepath.Join(t.TempDir(), "keys.json")
	ok(t, "keys", "rotate", "--keyring", path, "--tenant", "acme")
	var out keysDestroyJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"keys", "destroy", "--keyring", path, "--tenant", "acme", "--actor", "alice", "--output", "json"}, d.flags...)...)), &out))
	require.True(t, out.Audited)
	require.Len(t, out.Destroyed, 1)

	var log []auditJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"audit", "--output", "json"}, d.flags...)...)), &log))
	require.Len(t, log, 1)
	require.Equal(t, "keys destroy", log[0].Command)
	require.Equal(t, "alice", log[0].Actor)
	require.EqualValues(t, 1, log[0].Rows)
	var args map[string]any
	require.NoError(t, json.Unmarshal(log[0].Arguments, &args))
	require.Equal(t, "acme", args["tenant"])
	require.Equal(t, []any{out.Destroyed[0]}, args["destroyed"])

	// An outbox that is not there: refused before anything is destroyed.
	ok(t, "keys", "rotate", "--keyring", path, "--tenant", "acme")
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	fails(t, 1, "no migrated outbox", "keys", "destroy", "--keyring", path, "--tenant", "acme", "--db", "sqlite:"+filepath.Join(t.TempDir(), "none.db"))
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// The file is replaced atomically: a reader running alongside rotations and destructions
// always reads a whole keyring, the old one or the new one.
func TestKeysFileAtomic(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.json")
	ok(t, "keys", "rotate", "--keyring", path, "--tenant", "t")
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("read: %v", err)
				return
			}
			var f encryption.KeyringFile
			if err := json.Unmarshal(b, &f); err != nil || f.Version != 1 {
				t.Errorf("a partial file (%d bytes): %v", len(b), err)
				return
			}
			reads.Add(1)
		}
	}()
	for range 30 {
		ok(t, "keys", "rotate", "--keyring", path, "--tenant", "t")
	}
	ok(t, "keys", "destroy", "--keyring", path, "--tenant", "t")
	stop.Store(true)
	wg.Wait()
	require.Positive(t, reads.Load())
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")
}
