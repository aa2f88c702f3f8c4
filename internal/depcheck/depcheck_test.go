package depcheck_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/outboxkit/outbox/"

// cdcOnly are the import path prefixes of what only the change sources need: the binlog reader
// and what it brings (zap, pingcap's logger and SQL parser), the logical replication client, and
// the change source packages themselves.
var cdcOnly = []string{
	"github.com/go-mysql-org/go-mysql",
	"go.uber.org/zap",
	"github.com/pingcap/",
	"github.com/jackc/pglogrepl",
	module + "adapters/mysql/binlog",
	module + "adapters/postgres/logical",
}

// deps is `go list -deps` of pkgs: every package they import, directly or not, outside the
// standard library.
func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)...).Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err, "go list (the go tool must be on PATH)")
	return strings.Fields(string(out))
}

// cdcDeps returns the packages of list that only a change source needs.
func cdcDeps(list []string) []string {
	var out []string
	for _, p := range list {
		if slices.ContainsFunc(cdcOnly, func(prefix string) bool { return strings.HasPrefix(p, prefix) }) {
			out = append(out, p)
		}
	}
	return out
}

// A polling relay's program imports core and an adapter: none of that may pull in a change
// source's dependencies (adapters/mysql did, 61 packages of go-mysql, zap, the TiDB parser and
// what they bring, until the change source moved to adapters/mysql/binlog). The change source
// packages themselves must have them: that is what the check finds when an adapter imports
// them again.
func TestPollingDepsHaveNoCDC(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"adapters/mysql", "adapters/postgres"} {
		got := deps(t, module+"core", module+pkg)
		require.Contains(t, got, module+pkg)
		require.Empty(t, cdcDeps(got), "a polling program on %s compiles change-data-capture packages", pkg)
	}
	for pkg, want := range map[string]string{
		"adapters/mysql/binlog":     "github.com/go-mysql-org/go-mysql/replication",
		"adapters/postgres/logical": "github.com/jackc/pglogrepl",
	} {
		got := cdcDeps(deps(t, module+pkg))
		require.Contains(t, got, want, "the check does not see %s's own dependencies", pkg)
	}
}
