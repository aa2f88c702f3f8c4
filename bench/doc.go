// Package bench compares outboxkit's PostgreSQL relay with a peer library (Watermill's SQL
// Forwarder) on the same server, data size and sink. It is a separate module so that the peer's
// dependencies never reach outboxkit's module graph. Run with a durable server:
//
//	source scripts/lib/postgres.sh && PG_DURABLE=1 pg_start
//	cd bench && go test -run '^$' -bench PeerDrain -count 1 -timeout 60m
//
// Repeat the run (rounds) and quote medians; see README in the repository root.
package bench
