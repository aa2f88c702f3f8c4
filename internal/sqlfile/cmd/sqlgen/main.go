// Command sqlgen writes the Go file that goes with an adapter's queries.sql: its statements
// struct and one params struct per statement that takes parameters (sqlfile.Generate). The
// adapters run it with go generate:
//
//	//go:generate go run ../../internal/sqlfile/cmd/sqlgen -pkg postgres
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/outboxkit/outbox/internal/sqlfile"
)

func main() {
	in := flag.String("in", "queries.sql", "the .sql file")
	out := flag.String("out", "queries_gen.go", "the Go file to write")
	pkg := flag.String("pkg", os.Getenv("GOPACKAGE"), "the Go package")
	flag.Parse()
	if err := run(*in, *out, *pkg); err != nil {
		fmt.Fprintln(os.Stderr, "sqlgen:", err)
		os.Exit(1)
	}
}

func run(in, out, pkg string) error {
	src, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	code, err := sqlfile.Generate(src, pkg, in)
	if err != nil {
		return err
	}
	return os.WriteFile(out, code, 0o644)
}
