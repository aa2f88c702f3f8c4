package readme

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every benchmark command BENCHMARKS.md quotes names a benchmark that exists: its -bench (or
// -test.bench) pattern's first element matches a func BenchmarkX(b *testing.B) of the package
// it runs (the package of `go test`, or the one a `go test -c -o BIN` built BIN from). A
// renamed or deleted benchmark leaves a command that runs nothing and prints no figure.
func TestBenchmarkCommandsNameBenchmarks(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	require.NoError(t, err)
	checked, problems := checkBenchCommands(root, string(doc))
	require.Empty(t, problems)
	require.GreaterOrEqual(t, checked, 20, "the commands of BENCHMARKS.md were found")
}

// The check itself: a pattern that matches no benchmark, a package without benchmarks and a
// binary built from nothing quoted are each reported.
func TestBenchmarkCommandsCheckFails(t *testing.T) {
	root := filepath.Join("..", "..")
	bad := "```\ngo test -run '^$' -bench '^BenchmarkNoSuchThing$' -benchtime 1x ./adapters/sqlite\n" +
		"go test -bench Drain ./core/driver/\n" +
		"/tmp/nowhere.test -test.run '^$' -test.bench Drain\n```\n" +
		"and inline `go test -c -o /tmp/x.test ./adapters/postgres && /tmp/x.test -test.bench '^BenchmarkMissing$'`\n"
	checked, problems := checkBenchCommands(root, bad)
	require.Equal(t, 4, checked)
	require.Len(t, problems, 4, "%q", problems)
	require.Contains(t, problems[0], "BenchmarkNoSuchThing")
	require.Contains(t, problems[1], "core/driver")
	require.Contains(t, problems[2], "/tmp/nowhere.test")
	require.Contains(t, problems[3], "BenchmarkMissing")
}

var (
	fencedRE  = regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	inlineRE  = regexp.MustCompile("`([^`\n]+)`")
	benchFunc = regexp.MustCompile(`(?m)^func (Benchmark\w*)\(\w+ \*testing\.B\)`)
)

// checkBenchCommands finds the benchmark commands of a Markdown text (fenced blocks and inline
// code) and returns how many it checked and what is wrong with them.
func checkBenchCommands(root, text string) (int, []string) {
	var lines []string
	for _, m := range fencedRE.FindAllStringSubmatch(text, -1) {
		// A line ending in a backslash goes on on the next one.
		lines = append(lines, strings.Split(strings.ReplaceAll(m[1], "\\\n", " "), "\n")...)
	}
	for _, m := range inlineRE.FindAllStringSubmatch(fencedRE.ReplaceAllString(text, ""), -1) {
		lines = append(lines, m[1])
	}
	binaries := map[string]string{} // test binary -> package directory, relative to root
	checked := 0
	var problems []string
	for _, line := range lines {
		// Each "&&", ";", "(" and ")" starts a command; a "cd DIR" sets the directory of the
		// commands after it on the line.
		dir := "."
		for _, cmd := range regexp.MustCompile(`&&|;|\(|\)|\bdo\b|\bdone\b`).Split(line, -1) {
			args := shellWords(cmd)
			for len(args) > 0 && strings.Contains(args[0], "=") { // VAR=value prefixes
				args = args[1:]
			}
			switch {
			case len(args) >= 2 && args[0] == "cd":
				dir = args[1]
				if filepath.IsAbs(dir) {
					dir = "." // a worktree of another commit: the same layout
				}
			case len(args) >= 2 && args[0] == "go" && args[1] == "test":
				pkg, bin, pattern := "", "", ""
				for i := 2; i < len(args); i++ {
					switch a := args[i]; {
					case a == "-o" && i+1 < len(args):
						bin = args[i+1]
						i++
					case a == "-bench" && i+1 < len(args):
						pattern = args[i+1]
						i++
					case (a == "-run" || a == "-benchtime" || a == "-count" || a == "-timeout") && i+1 < len(args):
						i++
					case !strings.HasPrefix(a, "-"):
						pkg = a
					}
				}
				if pkg == "" {
					pkg = "."
				}
				pkg = path.Clean(path.Join(dir, pkg))
				if bin != "" {
					binaries[bin] = pkg
				}
				if pattern != "" {
					checked++
					if p := checkPattern(root, pkg, pattern); p != "" {
						problems = append(problems, p)
					}
				}
			case len(args) >= 1 && strings.HasSuffix(args[0], ".test"):
				for i := 1; i+1 < len(args); i++ {
					if args[i] != "-test.bench" {
						continue
					}
					checked++
					pkg, ok := binaries[args[0]]
					if !ok {
						problems = append(problems, fmt.Sprintf("%s runs %s, which no quoted `go test -c -o` builds", strings.TrimSpace(line), args[0]))
						continue
					}
					if p := checkPattern(root, pkg, args[i+1]); p != "" {
						problems = append(problems, p)
					}
				}
			}
		}
	}
	return checked, problems
}

// checkPattern reports a -bench pattern whose first element matches no benchmark of pkg.
func checkPattern(root, pkg, pattern string) string {
	first := strings.SplitN(pattern, "/", 2)[0]
	first = strings.ReplaceAll(first, `\$`, "$")
	re, err := regexp.Compile(first)
	if err != nil {
		return fmt.Sprintf("-bench %q (package %s): %v", pattern, pkg, err)
	}
	files, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(pkg), "*_test.go"))
	var names []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err.Error()
		}
		for _, m := range benchFunc.FindAllStringSubmatch(string(src), -1) {
			if re.MatchString(m[1]) {
				return ""
			}
			names = append(names, m[1])
		}
	}
	return fmt.Sprintf("-bench %q matches no benchmark of package %s (it has %v)", pattern, pkg, names)
}

// shellWords splits a command into words as a shell would for these commands: single and
// double quotes group, and are removed.
func shellWords(s string) []string {
	var words []string
	var b strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			b.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, b.String())
	}
	return words
}
