package sqlfile

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Dialect is how a file's statements mark their parameters once rewritten. A file names its
// dialect in a "-- dialect: postgres|mysql|sqlite" line before its first statement; a file
// without one has no named parameters, and its statements are used as written.
type Dialect string

// The dialects: PostgreSQL ($n) and SQLite (?n) number their parameters in declaration order (a
// repeated name reuses its number); MySQL marks each occurrence with ? (a repeated name is
// repeated in the arguments).
const (
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql"
	SQLite   Dialect = "sqlite"
)

func (d Dialect) valid() bool { return d == Postgres || d == MySQL || d == SQLite }

// numbered reports whether the dialect numbers its parameters, and their prefix.
func (d Dialect) numbered() (string, bool) {
	switch d {
	case Postgres:
		return "$", true
	case SQLite:
		return "?", true
	}
	return "", false
}

// Param is one named parameter of a statement, declared by a line
// "-- param: name GoType description" of its block. Name is written :name in the statement. In a
// block with a "-- params:" line, "-- param: name" alone places a parameter it takes from the
// other statement there, in the order of the parameters (Type is then empty).
type Param struct {
	Name, Type, Doc string
}

// List reports whether p is a list parameter of a statement of dialect d: in MySQL, a slice
// type other than []byte (a PostgreSQL or SQLite slice is one array or blob argument). A list
// is written where a list of values goes, "lane IN (:lanes)": each occurrence is one mark in
// the text Load gives, replaced per call by one ? per element, and the element values are
// that many arguments (ExpandLists, AppendList; the generated query method calls both). An
// empty list is NULL and no argument: "x IN (:list)" is then never true, and so is
// "x NOT IN (:list)" (write NOT IN only with a list that cannot be empty).
func (p Param) List(d Dialect) bool {
	return d == MySQL && strings.HasPrefix(p.Type, "[]") && p.Type != "[]byte"
}

// listMark is what Rewrite writes for each occurrence of a list parameter (never valid SQL,
// and no {{key}} of Idents).
const listMark = "{{?}}"

// Field is the Go name of the parameter's field in the statement's params struct: the
// snake_case name in CamelCase (an "id" part is "ID").
func (p Param) Field() string {
	var b strings.Builder
	for part := range strings.SplitSeq(p.Name, "_") {
		if up, ok := initialisms[part]; ok {
			b.WriteString(up)
			continue
		}
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

var initialisms = map[string]string{"id": "ID", "ids": "IDs", "ttl": "TTL", "pid": "PID", "db": "DB", "sql": "SQL"}

// Statement is one "-- name:" block of a file.
type Statement struct {
	Name string
	// Text is the statement as written: comment lines left out, parameters :name and
	// identifiers {{key}}.
	Text string
	// Like is the statement named by a "-- params: Other" line: this one takes Other's
	// parameters, followed by its own.
	Like string
	// Own are the parameters declared by the block's own "-- param:" lines.
	Own []Param
}

// File is a parsed .sql file.
type File struct {
	Dialect    Dialect
	Statements []Statement // in file order
	byName     map[string]int
}

// Statement returns the statement name, if the file has it.
func (f *File) Statement(name string) (Statement, bool) {
	i, ok := f.byName[name]
	if !ok {
		return Statement{}, false
	}
	return f.Statements[i], true
}

// Params are all the parameters of the statement name: those of its Like statement (and so on),
// then its own, in the order a PostgreSQL or SQLite statement numbers them.
func (f *File) Params(name string) []Param {
	st, _ := f.Statement(name)
	if st.Like == "" {
		return st.Own
	}
	base := f.Params(st.Like)
	var out []Param
	for _, p := range base {
		if !slices.ContainsFunc(st.Own, func(o Param) bool { return o.Name == p.Name && o.Type == "" }) {
			out = append(out, p)
		}
	}
	for _, o := range st.Own {
		if i := slices.IndexFunc(base, func(p Param) bool { return p.Name == o.Name }); o.Type == "" && i >= 0 {
			o = base[i]
		}
		out = append(out, o)
	}
	return out
}

// Parse parses src: its dialect line and its "-- name:" blocks, with their "-- param:" and
// "-- params:" lines, and checks each statement's parameters (see Rewrite).
func Parse(src string) (*File, error) {
	f := &File{byName: map[string]int{}}
	var cur *Statement
	var body strings.Builder
	flush := func() error {
		text := strings.TrimSpace(body.String())
		if cur == nil {
			if text != "" {
				return errors.New("sqlfile: text before the first -- name: line")
			}
			return nil
		}
		if text == "" {
			return fmt.Errorf("sqlfile: statement %s is empty", cur.Name)
		}
		if _, dup := f.byName[cur.Name]; dup {
			return fmt.Errorf("sqlfile: statement %s is defined twice", cur.Name)
		}
		if strings.Contains(text, listMark) {
			return fmt.Errorf("sqlfile: statement %s contains %s, the mark of a list parameter", cur.Name, listMark)
		}
		cur.Text = text
		f.byName[cur.Name] = len(f.Statements)
		f.Statements = append(f.Statements, *cur)
		return nil
	}
	for line := range strings.Lines(src) {
		trimmed := strings.TrimSpace(line)
		if n, ok := strings.CutPrefix(trimmed, "-- name:"); ok {
			if err := flush(); err != nil {
				return nil, err
			}
			cur = &Statement{Name: strings.TrimSpace(n)}
			body.Reset()
			continue
		}
		if d, ok := strings.CutPrefix(trimmed, "-- dialect:"); ok {
			if cur != nil || f.Dialect != "" || !Dialect(strings.TrimSpace(d)).valid() {
				return nil, fmt.Errorf("sqlfile: %q: one dialect line (postgres, mysql or sqlite), before the first statement", trimmed)
			}
			f.Dialect = Dialect(strings.TrimSpace(d))
			continue
		}
		if p, ok := strings.CutPrefix(trimmed, "-- param:"); ok && cur != nil {
			fields := strings.Fields(p)
			if len(fields) == 1 && cur.Like != "" && isName(fields[0]) {
				cur.Own = append(cur.Own, Param{Name: fields[0]}) // placed: see Param
				continue
			}
			if len(fields) < 2 || !isName(fields[0]) {
				return nil, fmt.Errorf("sqlfile: statement %s: %q: want -- param: name GoType description", cur.Name, trimmed)
			}
			cur.Own = append(cur.Own, Param{Name: fields[0], Type: fields[1], Doc: strings.Join(fields[2:], " ")})
			continue
		}
		if like, ok := strings.CutPrefix(trimmed, "-- params:"); ok && cur != nil {
			if cur.Like != "" || len(cur.Own) > 0 {
				return nil, fmt.Errorf("sqlfile: statement %s: -- params: comes once, before any -- param: line", cur.Name)
			}
			cur.Like = strings.TrimSpace(like)
			continue
		}
		if !strings.HasPrefix(trimmed, "--") {
			body.WriteString(line)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return f, f.check()
}

// check verifies every statement's parameters: a Like statement that exists and comes earlier,
// names declared once and used, uses declared, and for MySQL, a statement that takes its
// Like statement's parameters alone marks them in the same order (so that one args method serves
// both).
func (f *File) check() error {
	for _, st := range f.Statements {
		if (st.Like != "" || len(st.Own) > 0) && f.Dialect == "" {
			return fmt.Errorf("sqlfile: statement %s declares parameters in a file without a -- dialect: line", st.Name)
		}
		if st.Like != "" {
			if i, ok := f.byName[st.Like]; !ok || i >= f.byName[st.Name] {
				return fmt.Errorf("sqlfile: statement %s: -- params: %s names no earlier statement", st.Name, st.Like)
			}
			for _, o := range st.Own {
				if o.Type == "" && !slices.ContainsFunc(f.Params(st.Like), func(p Param) bool { return p.Name == o.Name }) {
					return fmt.Errorf("sqlfile: statement %s: -- param: %s places a parameter %s does not take", st.Name, o.Name, st.Like)
				}
			}
		}
		if _, _, err := f.Rewrite(st.Name); err != nil {
			return err
		}
		if _, numbered := f.Dialect.numbered(); st.Like != "" && len(st.Own) == 0 && !numbered {
			_, mine, _ := f.Rewrite(st.Name)
			_, theirs, _ := f.Rewrite(st.Like)
			if !slices.Equal(mine, theirs) {
				return fmt.Errorf("sqlfile: statement %s marks the parameters of %s in another order (%s, not %s): declare its own",
					st.Name, st.Like, strings.Join(mine, ", "), strings.Join(theirs, ", "))
			}
		}
	}
	return nil
}

// Rewrite returns the text of statement name with its parameters in the file's dialect, and the
// names of the arguments in positional order: for PostgreSQL and SQLite the parameters in
// declaration order (:name is $n or ?n, n its place in Params), for MySQL one per occurrence
// (:name is ?, or a list's mark: Param.List). A name not declared, a parameter never used, and
// a positional mark of the dialect ($1, ?) written in the statement are errors. Strings, quoted identifiers and comments are left as they are.
func (f *File) Rewrite(name string) (string, []string, error) {
	st, ok := f.Statement(name)
	if !ok {
		return "", nil, fmt.Errorf("sqlfile: no statement %s", name)
	}
	if f.Dialect == "" {
		return st.Text, nil, nil
	}
	params := f.Params(name)
	index := map[string]int{}
	for i, p := range params {
		if _, dup := index[p.Name]; dup {
			return "", nil, fmt.Errorf("sqlfile: statement %s declares :%s twice", name, p.Name)
		}
		index[p.Name] = i
	}
	used := make([]bool, len(params))
	var out strings.Builder
	var order []string
	var errs []error
	last := 0
	scan(st.Text, f.Dialect, func(start, end int, tok string) {
		out.WriteString(st.Text[last:start])
		last = end
		if tok[0] != ':' {
			errs = append(errs, fmt.Errorf("positional parameter %s: name it", tok))
			out.WriteString(tok)
			return
		}
		i, ok := index[tok[1:]]
		if !ok {
			errs = append(errs, fmt.Errorf("parameter %s is not declared (-- param: %s GoType)", tok, tok[1:]))
			out.WriteString(tok)
			return
		}
		used[i] = true
		if prefix, ok := f.Dialect.numbered(); ok {
			fmt.Fprintf(&out, "%s%d", prefix, i+1)
			return
		}
		if params[i].List(f.Dialect) {
			out.WriteString(listMark)
		} else {
			out.WriteByte('?')
		}
		order = append(order, params[i].Name)
	})
	out.WriteString(st.Text[last:])
	for i, p := range params {
		if !used[i] {
			errs = append(errs, fmt.Errorf("parameter :%s is never used", p.Name))
		}
	}
	if _, ok := f.Dialect.numbered(); ok {
		for _, p := range params {
			order = append(order, p.Name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", nil, fmt.Errorf("sqlfile: statement %s: %w", name, err)
	}
	return out.String(), order, nil
}

func isName(s string) bool {
	if s == "" || !isNameStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameStart(c byte) bool { return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isNameByte(c byte) bool  { return isNameStart(c) || '0' <= c && c <= '9' }

// scan calls fn for each parameter mark of text outside strings, quoted identifiers and
// comments: a named parameter :name (a colon not after another one, followed by a letter or _,
// so that a cast ::int is none), and the dialect's positional marks ($n for PostgreSQL, ? for
// MySQL, ? and ?n for SQLite). MySQL strings take backslash escapes; PostgreSQL's take dollar
// quotes.
func scan(text string, d Dialect, fn func(start, end int, tok string)) {
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			i = skipQuoted(text, i, d == MySQL && c != '`')
		case c == '-' && strings.HasPrefix(text[i:], "--"):
			if j := strings.IndexByte(text[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(text)
			}
		case c == '/' && strings.HasPrefix(text[i:], "/*"):
			if j := strings.Index(text[i+2:], "*/"); j >= 0 {
				i += j + 4
			} else {
				i = len(text)
			}
		case c == ':' && i+1 < len(text) && isNameStart(text[i+1]) && (i == 0 || text[i-1] != ':'):
			j := i + 1
			for j < len(text) && isNameByte(text[j]) {
				j++
			}
			fn(i, j, text[i:j])
			i = j
		case c == '$' && d == Postgres && (i == 0 || !isNameByte(text[i-1])):
			j := i + 1
			for j < len(text) && isNameByte(text[j]) {
				j++
			}
			switch {
			case j > i+1 && text[i+1] >= '0' && text[i+1] <= '9':
				fn(i, j, text[i:j])
				i = j
			case j < len(text) && text[j] == '$': // a dollar quote $tag$ ... $tag$
				tag := text[i : j+1]
				if k := strings.Index(text[j+1:], tag); k >= 0 {
					i = j + 1 + k + len(tag)
				} else {
					i = len(text)
				}
			default:
				i = j
			}
		case c == '?' && d != Postgres:
			j := i + 1
			for d == SQLite && j < len(text) && text[j] >= '0' && text[j] <= '9' {
				j++
			}
			fn(i, j, text[i:j])
			i = j
		default:
			i++
		}
	}
}

// skipQuoted returns the index after the quoted text that starts at i (a doubled quote is part
// of it; with backslash, so is an escaped character).
func skipQuoted(text string, i int, backslash bool) int {
	q := text[i]
	for j := i + 1; j < len(text); j++ {
		switch text[j] {
		case '\\':
			if backslash {
				j++
			}
		case q:
			if j+1 < len(text) && text[j+1] == q {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(text)
}
