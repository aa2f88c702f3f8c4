package sqlfile

import (
	"os"
	"path/filepath"
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
	for src, want := range map[string]string{
		"SELECT 1\n-- name: A\nSELECT 2":                                                                   "text before the first",
		"-- name: A\nSELECT 1\n-- name: A\nSELECT 2":                                                       "defined twice",
		"-- name: A\n-- only a comment\n":                                                                  "is empty",
		"-- name: A\n-- param: x int\nSELECT :x":                                                           "without a -- dialect: line",
		"-- dialect: oracle\n-- name: A\nSELECT 1":                                                         "one dialect line",
		"-- name: A\nSELECT 1\n-- dialect: postgres":                                                       "one dialect line",
		"-- dialect: postgres\n-- name: A\n-- param: 1x int\nSELECT 1":                                     "want -- param: name GoType",
		"-- dialect: postgres\n-- name: A\n-- params: B\nSELECT 1\n-- name: B\n-- param: x int\nSELECT :x": "names no earlier statement",
		"-- dialect: postgres\n-- name: A\n-- param: x int\n-- params: B\nSELECT :x":                       "comes once, before any",
	} {
		_, err := Parse(src)
		require.ErrorContains(t, err, want, src)
	}
}

func TestRewritePostgres(t *testing.T) {
	t.Parallel()
	f, err := Parse(`-- dialect: postgres
-- name: A
-- param: lanes []int32 the lanes
-- param: now any
SELECT ':not', $$ :nor $1 $$, $q$ :neither $q$, "col:x" FROM t -- :comment
WHERE lane = ANY(:lanes::int[]) AND tags @> '{a}' AND at < coalesce(:now::timestamptz, now())
  AND x::int = 1 /* :block */ AND lane <> ALL(:lanes)

-- name: B
-- params: A
-- param: extra bool
SELECT :extra, :now, :lanes
`)
	require.NoError(t, err)
	text, order, err := f.Rewrite("A")
	require.NoError(t, err)
	require.Equal(t, `SELECT ':not', $$ :nor $1 $$, $q$ :neither $q$, "col:x" FROM t -- :comment
WHERE lane = ANY($1::int[]) AND tags @> '{a}' AND at < coalesce($2::timestamptz, now())
  AND x::int = 1 /* :block */ AND lane <> ALL($1)`, text)
	require.Equal(t, []string{"lanes", "now"}, order)
	text, order, err = f.Rewrite("B")
	require.NoError(t, err)
	require.Equal(t, "SELECT $3, $2, $1", text)
	require.Equal(t, []string{"lanes", "now", "extra"}, order)
	require.Equal(t, "Lanes", f.Params("B")[0].Field())

	// "-- param: now" alone places A's :now after B's own :extra.
	f, err = Parse("-- dialect: postgres\n-- name: A\n-- param: lanes []int32\n-- param: now any\nSELECT :lanes, :now\n" +
		"-- name: B\n-- params: A\n-- param: extra bool\n-- param: now\nSELECT :now, :extra, :lanes")
	require.NoError(t, err)
	text, order, err = f.Rewrite("B")
	require.NoError(t, err)
	require.Equal(t, "SELECT $3, $2, $1", text)
	require.Equal(t, []string{"lanes", "extra", "now"}, order)
	require.Equal(t, "any", f.Params("B")[2].Type)
	_, err = Parse("-- dialect: postgres\n-- name: A\n-- param: a int\nSELECT :a\n-- name: B\n-- params: A\n-- param: b\nSELECT :a")
	require.ErrorContains(t, err, "places a parameter A does not take")
}

func TestRewriteQuestion(t *testing.T) {
	t.Parallel()
	f, err := Parse(`-- dialect: mysql
-- name: A
-- param: owner string
-- param: n int
SET @v := 1; SELECT 'it\'s :no ?', ` + "`a:b`" + `, @@session.x FROM t WHERE owner = :owner AND n < :n OR owner <> :owner

-- name: B
-- params: A
SELECT :owner, :n, :owner
`)
	require.NoError(t, err)
	text, order, err := f.Rewrite("A")
	require.NoError(t, err)
	require.Equal(t, "SET @v := 1; SELECT 'it\\'s :no ?', `a:b`, @@session.x FROM t WHERE owner = ? AND n < ? OR owner <> ?", text)
	require.Equal(t, []string{"owner", "n", "owner"}, order)

	_, err = Parse("-- dialect: sqlite\n-- name: A\n-- param: a int\nSELECT :a, ?1")
	require.ErrorContains(t, err, "positional parameter ?1")
	f, err = Parse("-- dialect: sqlite\n-- name: A\n-- param: a int\n-- param: b int\nSELECT :b, :a, :b, '?'")
	require.NoError(t, err)
	text, order, err = f.Rewrite("A")
	require.NoError(t, err)
	require.Equal(t, "SELECT ?2, ?1, ?2, '?'", text)
	require.Equal(t, []string{"a", "b"}, order)

	_, err = Parse(`-- dialect: mysql
-- name: A
-- param: owner string
-- param: n int
SELECT :owner, :n
-- name: B
-- params: A
SELECT :n, :owner
`)
	require.ErrorContains(t, err, "marks the parameters of A in another order")
}

func TestRewriteRejects(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{
		"-- dialect: postgres\n-- name: A\nSELECT :x":                                "parameter :x is not declared",
		"-- dialect: postgres\n-- name: A\n-- param: x int\nSELECT 1":                "parameter :x is never used",
		"-- dialect: postgres\n-- name: A\n-- param: x int\nSELECT :x, $2":           "positional parameter $2",
		"-- dialect: sqlite\n-- name: A\n-- param: x int\nSELECT :x, ?":              "positional parameter ?",
		"-- dialect: mysql\n-- name: A\n-- param: x int\n-- param: x int\nSELECT :x": "declares :x twice",
	} {
		_, err := Parse(src)
		require.ErrorContains(t, err, want, src)
	}
}

// TestLoadRewrites: Load gives the statements in the dialect's positional form.
func TestLoadRewrites(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{"q.sql": {Data: []byte("-- dialect: postgres\n-- name: A\n-- param: k string\nSELECT v FROM {{t}} WHERE k = :k OR j = :k\n")}}
	s, err := Load(fsys, "q.sql", Idents{"t": `"t"`})
	require.NoError(t, err)
	require.Equal(t, `SELECT v FROM "t" WHERE k = $1 OR j = $1`, s.Get("A"))
	require.NoError(t, s.Err())
}

func TestGenerate(t *testing.T) {
	t.Parallel()
	src := []byte(`-- dialect: mysql
-- name: Get
-- param: owner string who
-- param: at time.Time
SELECT 1 FROM t WHERE owner = :owner AND at < :at AND owner <> ''
-- name: GetAgain
-- params: Get
SELECT 2 FROM t WHERE owner = :owner AND at < :at
-- name: GetMore
-- params: Get
-- param: n int
SELECT 3 FROM t WHERE at < :at AND owner = :owner LIMIT :n
-- name: Plain
SELECT 4
`)
	code, err := Generate(src, "p", "q.sql")
	require.NoError(t, err)
	for _, want := range []string{
		"package p\n",
		"import (\n\t\"time\"\n\n\t\"github.com/outboxkit/outbox/internal/sqlfile\"\n)",
		"\tgetAgain string\n",
		"getMore:  st.Get(\"GetMore\"),",
		"// getParams are the parameters of Get (and GetAgain).\ntype getParams struct {\n\tOwner string // who\n\tAt    time.Time\n}",
		"func (p getParams) args() []any {\n\treturn []any{p.Owner, p.At}\n}",
		"type getMoreParams struct {\n\tgetParams\n\tN int\n}",
		"func (p getMoreParams) args() []any {\n\treturn []any{p.At, p.Owner, p.N}\n}",
	} {
		require.Contains(t, string(code), want)
	}
	require.NotContains(t, string(code), "plainParams")

	_, err = Generate([]byte("-- dialect: mysql\n-- name: A\n-- param: x foo.Bar\nSELECT :x"), "p", "q.sql")
	require.ErrorContains(t, err, "unknown package foo")
	_, err = Generate([]byte("-- name: Select\nSELECT 1"), "p", "q.sql")
	require.ErrorContains(t, err, "Go keyword select")
}

// TestGenerated fails when an adapter's queries_gen.go is not what go generate writes from its
// queries.sql (one with named parameters: a dialect line): run go generate in the adapter.
func TestGenerated(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../adapters/*/queries.sql")
	require.NoError(t, err)
	var checked []string
	for _, sqlPath := range files {
		dir := filepath.Dir(sqlPath)
		src, err := os.ReadFile(sqlPath)
		require.NoError(t, err)
		f, err := Parse(string(src))
		require.NoError(t, err, sqlPath)
		if f.Dialect == "" {
			continue
		}
		checked = append(checked, filepath.Base(dir))
		want, err := Generate(src, filepath.Base(dir), "queries.sql")
		require.NoError(t, err, sqlPath)
		got, err := os.ReadFile(filepath.Join(dir, "queries_gen.go"))
		require.NoError(t, err, "%s: run go generate", dir)
		require.Equal(t, string(want), string(got), "%s/queries_gen.go is stale: run go generate", dir)
	}
	require.Subset(t, checked, []string{"mysql", "postgres", "sqlite"})
}

// TestMySQLLists: a MySQL slice parameter (not []byte) is a list, one mark per occurrence in the
// loaded text, expanded per call; a repeated name (list or not) repeats its arguments; an empty
// list is NULL with no argument. In PostgreSQL a slice is one array argument.
func TestMySQLLists(t *testing.T) {
	t.Parallel()
	src := `-- dialect: mysql
-- name: Mark
-- param: now any
-- param: seqs []int64 the records
-- param: lanes []int the leased lanes
-- param: payload []byte not a list
SELECT COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)), :payload FROM t
	WHERE seq IN (:seqs) AND lane IN (:lanes) AND ':seqs' <> '' AND FIELD(seq, :seqs) > 0 AND at < :now
-- name: Unmark
-- params: Mark
SELECT COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)), :payload FROM t
	WHERE seq IN (:seqs) AND lane IN (:lanes) AND ':seqs' <> '' AND FIELD(seq, :seqs) > 0 AND at < :now
`
	f, err := Parse(src)
	require.NoError(t, err)
	text, order, err := f.Rewrite("Mark")
	require.NoError(t, err)
	require.Equal(t, "SELECT COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP(6)), ? FROM t\n"+
		"\tWHERE seq IN ({{?}}) AND lane IN ({{?}}) AND ':seqs' <> '' AND FIELD(seq, {{?}}) > 0 AND at < ?", text)
	require.Equal(t, []string{"now", "payload", "seqs", "lanes", "seqs", "now"}, order)
	params := f.Params("Mark")
	require.False(t, params[0].List(MySQL))
	require.True(t, params[1].List(MySQL))
	require.False(t, params[1].List(Postgres))
	require.False(t, params[3].List(MySQL), "[]byte is one argument")

	require.Equal(t, "WHERE seq IN (?, ?, ?) AND lane IN (?) AND x IN (NULL)",
		ExpandLists("WHERE seq IN ({{?}}) AND lane IN ({{?}}) AND x IN ({{?}})", 3, 1, 0))
	require.Equal(t, []any{"a", 1, 2}, AppendList(AppendList([]any{"a"}, []int{1, 2}), []string(nil)))

	code, err := Generate([]byte(src), "p", "q.sql")
	require.NoError(t, err)
	require.Contains(t, string(code), `// markParams are the parameters of Mark (and Unmark).
type markParams struct {
	Now     any
	Seqs    []int64 // the records
	Lanes   []int   // the leased lanes
	Payload []byte  // not a list
}

// query returns the text of Mark (stmt, as loaded) with its lists expanded, and p's arguments
// in its positional order.
func (p markParams) query(stmt string) (string, []any) {
	args := make([]any, 0, 3+len(p.Seqs)+len(p.Lanes)+len(p.Seqs))
	args = append(args, p.Now, p.Payload)
	args = sqlfile.AppendList(args, p.Seqs)
	args = sqlfile.AppendList(args, p.Lanes)
	args = sqlfile.AppendList(args, p.Seqs)
	args = append(args, p.Now)
	return sqlfile.ExpandLists(stmt, len(p.Seqs), len(p.Lanes), len(p.Seqs)), args
}
`)
	require.NotContains(t, string(code), "func (p markParams) args()")

	// What the generated method does, run here by hand on the loaded text.
	p := struct {
		now     any
		seqs    []int64
		lanes   []int
		payload []byte
	}{"2026-01-02 03:04:05.000000", []int64{7, 8}, nil, []byte("x")}
	args := []any{p.now, p.payload}
	args = AppendList(args, p.seqs)
	args = AppendList(args, p.lanes)
	args = AppendList(args, p.seqs)
	args = append(args, p.now)
	require.Equal(t, "SELECT COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP(6)), ? FROM t\n"+
		"\tWHERE seq IN (?, ?) AND lane IN (NULL) AND ':seqs' <> '' AND FIELD(seq, ?, ?) > 0 AND at < ?",
		ExpandLists(text, len(p.seqs), len(p.lanes), len(p.seqs)))
	require.Equal(t, []any{p.now, p.payload, int64(7), int64(8), int64(7), int64(8), p.now}, args)

	_, err = Parse("-- dialect: mysql\n-- name: A\nSELECT '{{?}}'")
	require.ErrorContains(t, err, "the mark of a list parameter")
}
