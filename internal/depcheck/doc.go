// Package depcheck holds a test of the module's import graph: a program that only polls
// (core and the MySQL or PostgreSQL adapter) compiles none of the change-data-capture
// dependencies, which only the change source packages (adapters/mysql/binlog,
// adapters/postgres/logical) import. It has no code of its own.
package depcheck
