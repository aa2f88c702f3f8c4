package conformance

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strings"
	"testing"
)

// RunSink's doc names every case of every area, under its area, and no case that does not
// exist: sink authors read the list to know what the suite proves.
func TestRunSinkDocListsEveryCase(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "sinksuite.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "RunSink" {
			doc = fn.Doc.Text()
		}
	}
	start := strings.Index(doc, "\n  - ")
	if start < 0 {
		t.Fatal("RunSink's doc has no list of cases")
	}
	list, _, _ := strings.Cut(doc[start+1:], "\n\n")
	listed := map[string]bool{}
	for _, b := range regexp.MustCompile(`(?m)^  - `).Split(list, -1)[1:] {
		b = strings.Join(strings.Fields(b), " ")
		area, rest, _ := strings.Cut(b, ": ")
		rest = regexp.MustCompile(`\([^()]*(\([^()]*\)[^()]*)*\)`).ReplaceAllString(rest, "")
		for _, c := range strings.Split(rest, ",") {
			if f := strings.Fields(c); len(f) > 0 {
				listed[area+"/"+f[0]] = true
			}
		}
	}
	want := map[string]bool{}
	for _, a := range sinkAreas() {
		for _, c := range a.cases {
			want[a.name+"/"+c.name] = true
			if !listed[a.name+"/"+c.name] {
				t.Errorf("RunSink's doc does not list %s/%s", a.name, c.name)
			}
		}
	}
	for name := range listed {
		if !want[name] {
			t.Errorf("RunSink's doc lists %s, which is not a case", name)
		}
	}
}
