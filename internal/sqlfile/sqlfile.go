// Package sqlfile loads an adapter's SQL statements from an embedded .sql file: the one way the
// adapters keep and name their statements, their parameters and their identifiers (River keeps
// its queries the same way, in .sql files with named statements; the parameters follow sqlc).
//
// A statement begins at a line "-- name: Name" and runs until the next such line. Whole comment
// lines document the file and are left out of the statements (so that a "?" or "$1" in a
// comment never reaches a driver). Identifiers are written {{key}} and replaced by Idents[key],
// an identifier that the adapter validated and quoted once, at construction.
//
// Parameters are written :name (outside strings, quoted identifiers and comments; a cast ::int
// is none) and declared by the block's comment lines "-- param: name GoType description", or
// taken from an earlier statement by "-- params: Other" (then its own lines add to them). The
// file's "-- dialect: postgres|mysql|sqlite" line says how Load rewrites them: $n or ?n in
// declaration order, or ? per occurrence (MySQL). In MySQL a parameter of a slice type (not
// []byte) is a list, "IN (:lanes)", expanded per call to one ? per element (Param.List). A
// positional mark written in a statement, an undeclared name and an unused declaration are
// errors. Nothing else in the text is replaced.
//
// To add a statement to an adapter: write its block in queries.sql with named parameters, run
// go generate in the adapter (cmd/sqlgen writes queries_gen.go: a field of the statements
// struct, and a params struct whose args method lists the arguments in positional order, see
// Generate), and call it: q.exec(ctx, s.q.newThing, newThingParams{Lane: 3}.args()...), or for
// a MySQL statement with a list, query, args := newThingParams{Lanes: lanes}.query(s.q.newThing).
// TestGenerated fails while a queries_gen.go is stale.
package sqlfile

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
)

// Idents maps the {{key}} tokens of statements to quoted identifiers (or, for a token that is
// filled later, to the token itself).
type Idents map[string]string

var identToken = regexp.MustCompile(`\{\{([A-Za-z0-9_]+)\}\}`)

// Expand returns stmt with every {{key}} replaced by id[key]. A key id does not know is an error.
func (id Idents) Expand(stmt string) (string, error) {
	var unknown []string
	out := identToken.ReplaceAllStringFunc(stmt, func(t string) string {
		v, ok := id[t[2:len(t)-2]]
		if !ok {
			unknown = append(unknown, t)
			return t
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("sqlfile: unknown identifiers %s", strings.Join(slices.Compact(unknown), ", "))
	}
	return out, nil
}

// Statements are the statements of one file, expanded with the adapter's identifiers. Get
// records what it could not find, and Err reports it together with the statements of the file
// that no Get asked for, so that a renamed or misspelt statement fails the constructor.
type Statements struct {
	stmts map[string]string
	used  map[string]bool
	errs  []error
}

// Load parses the file path of fsys, rewrites every statement's parameters for the file's
// dialect (File.Rewrite) and expands its identifiers with idents.
func Load(fsys fs.FS, path string, idents Idents) (*Statements, error) {
	src, err := fs.ReadFile(fsys, path)
	if err != nil {
		return nil, fmt.Errorf("sqlfile: %w", err)
	}
	f, err := Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	stmts := make(map[string]string, len(f.Statements))
	for _, st := range f.Statements {
		text, _, err := f.Rewrite(st.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if stmts[st.Name], err = idents.Expand(text); err != nil {
			return nil, fmt.Errorf("%s: statement %s: %w", path, st.Name, err)
		}
	}
	return &Statements{stmts: stmts, used: map[string]bool{}}, nil
}

// ExpandLists returns stmt, a MySQL statement as Load gives it, with its list marks
// (Param.List) replaced in order: the i-th by n[i] marks "?, ?, ...", or by NULL when n[i] is
// 0. A statement's generated query method calls it with the lengths of its list parameters, in
// the order of their occurrences.
func ExpandLists(stmt string, n ...int) string {
	size := len(stmt)
	for _, k := range n {
		size += 3 * k
	}
	var b strings.Builder
	b.Grow(size)
	for _, k := range n {
		i := strings.Index(stmt, listMark)
		if i < 0 {
			break // unreachable for a generated call: as many lengths as marks
		}
		b.WriteString(stmt[:i])
		if k <= 0 {
			b.WriteString("NULL")
		} else {
			b.WriteString("?")
			for range k - 1 {
				b.WriteString(", ?")
			}
		}
		stmt = stmt[i+len(listMark):]
	}
	b.WriteString(stmt)
	return b.String()
}

// AppendList appends the elements of list to args, one argument each (a list parameter's
// arguments; see ExpandLists).
func AppendList[T any](args []any, list []T) []any {
	for _, v := range list {
		args = append(args, v)
	}
	return args
}

// Get returns the statement name.
func (s *Statements) Get(name string) string {
	text, ok := s.stmts[name]
	if !ok {
		s.errs = append(s.errs, fmt.Errorf("sqlfile: no statement %s", name))
	}
	s.used[name] = true
	return text
}

// Err reports the statements Get did not find and those it was never asked for.
func (s *Statements) Err() error {
	errs := slices.Clone(s.errs)
	var unused []string
	for name := range s.stmts {
		if !s.used[name] {
			unused = append(unused, name)
		}
	}
	if len(unused) > 0 {
		slices.Sort(unused)
		errs = append(errs, fmt.Errorf("sqlfile: statements never used: %s", strings.Join(unused, ", ")))
	}
	return errors.Join(errs...)
}
