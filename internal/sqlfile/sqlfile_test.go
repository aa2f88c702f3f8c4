package sqlfile

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{"q.sql": {Data: []byte(`-- The file's own comment.

-- name: Get
-- Reads one row.
SELECT v FROM {{t}} WHERE k = $1;

-- name: Later
SELECT * FROM {{part}}
`)}}
	s, err := Load(fsys, "q.sql", Idents{"t": `"s"."t"`, "part": "{{part}}"})
	require.NoError(t, err)
	require.Equal(t, "SELECT v FROM \"s\".\"t\" WHERE k = $1;", s.Get("Get"))
	later, err := Idents{"part": `"p1"`}.Expand(s.Get("Later"))
	require.NoError(t, err)
	require.Equal(t, `SELECT * FROM "p1"`, later)
	require.NoError(t, s.Err())

	_ = s.Get("Missing")
	require.ErrorContains(t, s.Err(), "no statement Missing")

	s, err = Load(fsys, "q.sql", Idents{"t": "x", "part": "y"})
	require.NoError(t, err)
	_ = s.Get("Get")
	require.ErrorContains(t, s.Err(), "statements never used: Later")

	_, err = Load(fsys, "q.sql", Idents{"t": "x"})
	require.ErrorContains(t, err, "unknown identifiers {{part}}")
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		"SELECT 1\n-- name: A\nSELECT 2",
		"-- name: A\nSELECT 1\n-- name: A\nSELECT 2",
		"-- name: A\n-- only a comment\n",
	} {
		_, err := Parse(src)
		require.Error(t, err, src)
	}
}
