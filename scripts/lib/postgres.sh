# shellcheck shell=bash
# Throwaway PostgreSQL 15 cluster for outboxkit's tests. Sourced by scripts/test.
#
#   source scripts/lib/postgres.sh
#   pg_start            # exports OUTBOXKIT_POSTGRES_DSN
#   ...
#   pg_stop
#
# pg_start creates a cluster in a fresh directory under /tmp (owned by the postgres OS user,
# because PostgreSQL refuses to run as root and cannot read /root), on a free loopback port,
# with logical decoding enabled. Durability is relaxed (fsync, synchronous_commit and
# full_page_writes off) unless PG_DURABLE=1: use that for benchmarks that claim durability.
# Environment: PG_BIN (default /usr/lib/postgresql/15/bin), PG_START_TIMEOUT (seconds, default 60).
#
# TLS: the server has ssl on with a certificate for "localhost" signed by a throwaway CA
# (outboxkit_test_certs), exported as OUTBOXKIT_PG_TLS_CA; clients that ask for no TLS
# (sslmode=disable, as OUTBOXKIT_POSTGRES_DSN does) are served as before. The role "tlsonly",
# which the TLS tests create, is refused every connection without TLS (pg_hba hostnossl ...
# reject), replication included: a test that connects as it proves its connections use TLS.

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OUTBOXKIT_APT_NEEDS+=(openssl:openssl)

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"

_pg_log_tail() {
	local f
	for f in "$@"; do
		if [[ -n "${OUTBOXKIT_PG_DIR:-}" && -s "$OUTBOXKIT_PG_DIR/$f" ]]; then
			echo "--- last lines of $OUTBOXKIT_PG_DIR/$f ---" >&2
			tail -n 30 "$OUTBOXKIT_PG_DIR/$f" >&2
		fi
	done
}

# _pg_kill stops a server that may still be starting (pg_ctl gave up waiting but the postmaster
# runs on): retry an immediate stop until pg_ctl no longer finds it.
_pg_kill() {
	local dir="$1" i
	for i in 1 2 3 4 5 6 7 8 9 10; do
		runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
		if [[ $i -ge 3 ]] && ! runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.5
	done
}

# _pg_fail reports a failed start with the logs' last lines, stops whatever was started and
# removes the directory.
_pg_fail() {
	echo "pg_start: $1" >&2
	shift
	_pg_log_tail "$@"
	_pg_kill "$OUTBOXKIT_PG_DIR"
	rm -rf "$OUTBOXKIT_PG_DIR"
	unset OUTBOXKIT_PG_DIR
	return 1
}

pg_start() {
	if [[ ! -x "$PG_BIN/initdb" || ! -x "$PG_BIN/pg_ctl" ]]; then
		echo "pg_start: PostgreSQL binaries not found in $PG_BIN" >&2
		return 1
	fi
	if ! id postgres >/dev/null 2>&1; then
		echo "pg_start: the OS user postgres does not exist" >&2
		return 1
	fi
	local dir
	dir="$(mktemp -d /tmp/outboxkit-pg.XXXX)" || { echo "pg_start: mktemp failed" >&2; return 1; }
	chmod 700 "$dir"
	chown postgres: "$dir" || { echo "pg_start: chown $dir failed" >&2; rm -rf "$dir"; return 1; }
	export OUTBOXKIT_PG_DIR="$dir"

	if ! runuser -u postgres -- "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 \
		--locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1; then
		_pg_fail "initdb failed" initdb.log
		return 1
	fi

	outboxkit_test_certs "$dir/tls" postgres || { _pg_fail "no TLS certificates"; return 1; }
	{
		printf 'hostnossl all tlsonly 127.0.0.1/32 reject\nhostnossl replication tlsonly 127.0.0.1/32 reject\n'
		cat "$dir/data/pg_hba.conf"
	} >"$dir/pg_hba.new" && mv "$dir/pg_hba.new" "$dir/data/pg_hba.conf" && chown postgres: "$dir/data/pg_hba.conf" ||
		{ _pg_fail "cannot write pg_hba.conf"; return 1; }
	local tls="-c ssl=on -c ssl_cert_file=$dir/tls/server.crt -c ssl_key_file=$dir/tls/server.key"

	# With synchronous_commit off, WAL reaches the walsenders (and so CDC relays) only when the
	# WAL writer flushes it, every wal_writer_delay (200ms by default): shorten it for tests.
	local durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c wal_writer_delay=10ms"
	if [[ "${PG_DURABLE:-0}" == 1 ]]; then
		durability=""
	fi
	local port attempt
	for attempt in 1 2 3; do
		port="$(outboxkit_free_port)" || { _pg_fail "no free port"; return 1; }
		# shellcheck disable=SC2086
		if runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
			-t "${PG_START_TIMEOUT:-60}" start -o "-c port=$port -c listen_addresses=127.0.0.1 \
-c unix_socket_directories=$dir -c wal_level=logical -c max_replication_slots=40 \
-c max_wal_senders=40 -c max_connections=300 $tls $durability" >>"$dir/pg_ctl.log" 2>&1; then
			break
		fi
		# The port may have been taken between the probe and the start: retry on another one.
		if ! grep -q "could not bind\|Address already in use" "$dir/server.log" 2>/dev/null || [[ $attempt == 3 ]]; then
			_pg_fail "PostgreSQL did not start (port $port)" server.log pg_ctl.log
			return 1
		fi
	done

	# pg_ctl -w waited for the postmaster; check that it accepts TCP connections as well.
	local i
	for i in $(seq 1 120); do
		if "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres; then
			export OUTBOXKIT_PG_PORT="$port"
			export OUTBOXKIT_POSTGRES_DSN="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
			export OUTBOXKIT_PG_TLS_CA="$dir/tls/ca.crt"
			echo "pg_start: PostgreSQL ready on 127.0.0.1:$port (dir $dir)" >&2
			return 0
		fi
		sleep 0.5
	done
	_pg_fail "PostgreSQL is not accepting connections on 127.0.0.1:$port" server.log pg_ctl.log
	return 1
}

pg_stop() {
	local dir="${OUTBOXKIT_PG_DIR:-}"
	if [[ -z "$dir" ]]; then
		return 0
	fi
	if [[ -d "$dir/data" ]]; then
		_pg_kill "$dir"
	fi
	case "$dir" in
	/tmp/outboxkit-pg.*) rm -rf "$dir" ;;
	esac
	unset OUTBOXKIT_PG_DIR OUTBOXKIT_PG_PORT OUTBOXKIT_POSTGRES_DSN
	return 0
}
