package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzConfig feeds arbitrary YAML files and environment overrides to Load: it must never panic,
// every refusal must be a *ConfigError (exit status 2) with one problem per line, and every
// accepted configuration must pass validation as loaded.
func FuzzConfig(f *testing.F) {
	f.Add([]byte("database:\n  driver: sqlite\n  dsn: app.db\nsink: sqs\nroutes:\n  default: q\n"), "")
	f.Add([]byte("database:\n  driver: postgres\n  dsn: postgres://relay@db:5432/app\n  schema: app\nmode: polling\n"+
		"relay:\n  workers: 2\n  batch_size: 500\n  lease_ttl: 30s\n  poll_interval: 100ms\n"+
		"  retry: {initial: 1s, max: 5m, deadline: 24h}\nsink: sqs\naws:\n  region: eu-west-1\n"+
		"routes:\n  default: https://sqs.example/q\n  by_type:\n    order.created: https://sqs.example/o\n"+
		"cleanup:\n  enabled: true\n  retention: 24h\n  interval: 1h\nhttp:\n  listen: 127.0.0.1:9464\n"), "250")
	f.Add([]byte("relay:\n  batch_size: lots\n  nope: 1\n"), "-1")
	f.Add([]byte("relay: [1, 2\n"), "")
	f.Add([]byte("relay:\n  batch_size: 1099511627776\n"), "9223372036854775808")
	f.Add([]byte("mode: cdc\ncdc:\n  server_id: -3\n"), "1e9")
	f.Add([]byte("&a [*a, *a]"), "")
	f.Fuzz(func(t *testing.T, file []byte, batchEnv string) {
		path := filepath.Join(t.TempDir(), "outboxkit.yaml")
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		env := func(name string) string {
			if name == EnvName("relay.batch_size") {
				return batchEnv
			}
			return ""
		}
		cfg, err := Load(path, env, nil)
		if err != nil {
			if !IsConfigError(err) {
				t.Fatalf("Load returned %T %v, want a *ConfigError", err, err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.TrimSpace(line) == "" {
					t.Fatalf("Load's problems contain an empty line: %q", err.Error())
				}
			}
			return
		}
		if p := cfg.validate(); len(p) > 0 {
			t.Fatalf("Load accepted a configuration that does not validate: %v", p)
		}
	})
}
