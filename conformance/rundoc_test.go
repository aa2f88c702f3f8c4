package conformance

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strings"
	"testing"
)

// Run's doc names every case of every area, under its area, and no case that does not exist:
// adapter authors read the list to know what the suite proves.
func TestRunDocListsEveryCase(t *testing.T) {
	t.Parallel()
	areas := map[string][]string{}
	add := func(area string, cases []tcase[struct{}]) {
		for _, c := range cases {
			areas[area] = append(areas[area], c.name)
		}
	}
	add("write", writeCases[struct{}]())
	add("lanes", laneCases[struct{}]())
	add("fencing", fencingCases[struct{}]())
	add("delivery", deliveryCases[struct{}]())
	add("retry", retryCases[struct{}]())
	add("cleanup", cleanupCases[struct{}]())
	add("operator", operatorCases[struct{}]())
	add("inbox", inboxCases[struct{}]())
	add("publisher", publisherCases[struct{}]())
	add("chain", chainCases[struct{}]())
	add("cdc", cdcCases[struct{}]())
	add("badtx", badTxCases[struct{}]())
	add("unmigrated", unmigratedCases[struct{}]())
	add("liveness", livenessCases[struct{}]())

	f, err := parser.ParseFile(token.NewFileSet(), "run.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Run" {
			doc = fn.Doc.Text()
		}
	}
	// The list is the paragraph of bullets, one per area: "  - area (...): case, case (...)".
	start := strings.Index(doc, "\n  - ")
	if start < 0 {
		t.Fatal("Run's doc has no list of cases")
	}
	list, _, _ := strings.Cut(doc[start+1:], "\n\n")
	listed := map[string]bool{}
	for _, b := range regexp.MustCompile(`(?m)^  - `).Split(list, -1)[1:] {
		b = strings.Join(strings.Fields(b), " ")
		area, rest, _ := strings.Cut(b, " ")
		area = strings.TrimSuffix(area, ":")
		if _, ok := areas[area]; !ok {
			t.Errorf("Run's doc lists area %q, which does not exist", area)
		}
		rest = regexp.MustCompile(`\([^()]*(\([^()]*\)[^()]*)*\)`).ReplaceAllString(rest, "")
		for _, c := range strings.Split(strings.TrimPrefix(strings.TrimSpace(rest), ":"), ",") {
			if f := strings.Fields(c); len(f) > 0 {
				listed[area+"/"+f[0]] = true
			}
		}
	}
	want := map[string]bool{}
	for area, cases := range areas {
		for _, c := range cases {
			want[area+"/"+c] = true
			if !listed[area+"/"+c] {
				t.Errorf("Run's doc does not list %s/%s", area, c)
			}
		}
	}
	for name := range listed {
		if !want[name] {
			t.Errorf("Run's doc lists %s, which is not a case", name)
		}
	}
}
