package main

import (
	"debug/elf"
	"testing"

	"github.com/stretchr/testify/require"
)

// The container image (deploy/Dockerfile) needs a static binary: CGO_ENABLED=0 must build, and
// the result must not ask for a dynamic loader. The daemon tests run that same binary
// (daemonBinary builds it as the Dockerfile does), so the build is paid once.
func TestStaticBuild(t *testing.T) {
	t.Parallel()
	f, err := elf.Open(daemonBinary(t))
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "the binary needs a dynamic loader")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs)
}
