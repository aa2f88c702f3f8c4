# shellcheck shell=bash
# PgBouncer in front of the test PostgreSQL, for the pooler tests. Sourced by scripts/test.
#
#   pgbouncer_start   install Debian's pgbouncer when missing, wait for the PostgreSQL of
#                     scripts/lib/postgres.sh, start one pgbouncer with pool_mode=transaction and
#                     one with pool_mode=session on free loopback ports, and export
#                     OUTBOXKIT_PGBOUNCER_TX_DSN and OUTBOXKIT_PGBOUNCER_SESSION_DSN
#   pgbouncer_stop    stop both and remove their directory
#
# By hand, against a running cluster: OUTBOXKIT_PG_PORT=PORT; source scripts/lib/pgbouncer.sh &&
# pgbouncer_start.
#
# Waiting for PostgreSQL: scripts/test runs every NAME_start at once, each in a subshell of its
# own, so pg_start's exports never reach this function's shell. Each subshell writes its
# exports to $run/NAME.env and then touches $run/NAME.ready ($run is scripts/test's run
# directory; a subshell inherits the variable). So pgbouncer_start takes OUTBOXKIT_PG_PORT from
# its environment when it is set (a run by hand), otherwise waits for $run/pg.ready (or
# $run/pg.failed) and reads the port from $run/pg.env; then it waits until that port answers.
# Both waits are bounded by PGBOUNCER_START_TIMEOUT seconds (default 120).
#
# PgBouncer 1.18 (Debian 12) has no prepared statements in transaction mode: clients must not
# use pgx's default statement cache through OUTBOXKIT_PGBOUNCER_TX_DSN (README, "Behind a
# connection pooler").

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OUTBOXKIT_APT_NEEDS+=(pgbouncer:pgbouncer)

_pgbouncer_dir=""

# _pgbouncer_pg_port prints the port of the PostgreSQL to put PgBouncer in front of, waiting
# (bounded) for scripts/test's pg_start when the port is not in the environment.
_pgbouncer_pg_port() {
	local deadline=$((SECONDS + ${PGBOUNCER_START_TIMEOUT:-120}))
	if [[ -n "${OUTBOXKIT_PG_PORT:-}" ]]; then
		echo "$OUTBOXKIT_PG_PORT"
		return 0
	fi
	if [[ -z "${run:-}" || ! -d "${run:-}" ]]; then
		echo "pgbouncer_start: OUTBOXKIT_PG_PORT is not set (start PostgreSQL first: source scripts/lib/postgres.sh && pg_start)" >&2
		return 1
	fi
	until [[ -e "$run/pg.ready" || -e "$run/pg.failed" ]]; do
		if ((SECONDS >= deadline)); then
			echo "pgbouncer_start: PostgreSQL (pg_start) did not start within ${PGBOUNCER_START_TIMEOUT:-120}s" >&2
			return 1
		fi
		sleep 0.2
	done
	if [[ -e "$run/pg.failed" ]]; then
		echo "pgbouncer_start: PostgreSQL (pg_start) failed to start" >&2
		return 1
	fi
	local port
	port=$(sed -nE 's/^declare -x OUTBOXKIT_PG_PORT="?([0-9]+)"?$/\1/p' "$run/pg.env")
	if [[ -z "$port" ]]; then
		echo "pgbouncer_start: $run/pg.env has no OUTBOXKIT_PG_PORT" >&2
		return 1
	fi
	echo "$port"
}

# _pgbouncer_ready reports whether a PostgreSQL protocol server answers on 127.0.0.1:$1.
_pgbouncer_ready() {
	"${PG_BIN:-/usr/lib/postgresql/15/bin}/pg_isready" -q -h 127.0.0.1 -p "$1" -U postgres -d postgres
}

# _pgbouncer_run MODE PGPORT starts one pgbouncer with pool_mode MODE in $_pgbouncer_dir/MODE and
# prints its port.
_pgbouncer_run() {
	local mode="$1" pgport="$2" d="$_pgbouncer_dir/$1" port i attempt
	mkdir -p "$d" && chown postgres: "$d" || return 1
	printf '"postgres" ""\n' >"$d/users.txt"
	for attempt in 1 2 3; do
		port=$(outboxkit_free_port) || return 1
		cat >"$d/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$pgport

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $d/users.txt
pool_mode = $mode
max_client_conn = 500
default_pool_size = 20
reserve_pool_size = 5
ignore_startup_parameters = extra_float_digits
pidfile = $d/pgbouncer.pid
logfile = $d/pgbouncer.log
EOF
		chown postgres: "$d"/* || return 1
		if ! runuser -u postgres -- pgbouncer -d "$d/pgbouncer.ini" >>"$d/start.log" 2>&1; then
			tail -n 20 "$d/start.log" "$d/pgbouncer.log" >&2 2>/dev/null
			continue
		fi
		for i in $(seq 1 50); do
			_pgbouncer_ready "$port" && {
				echo "$port"
				return 0
			}
			sleep 0.2
		done
		# The port may have been taken between the probe and the start: retry on another one.
		_pgbouncer_kill "$d"
		tail -n 20 "$d/pgbouncer.log" >&2 2>/dev/null
	done
	echo "pgbouncer_start: pgbouncer ($mode) did not start" >&2
	return 1
}

_pgbouncer_kill() {
	local pidfile="$1/pgbouncer.pid" pid i
	[[ -s "$pidfile" ]] || return 0
	pid=$(cat "$pidfile")
	kill -TERM "$pid" 2>/dev/null || return 0
	for i in $(seq 1 40); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.25
	done
	kill -KILL "$pid" 2>/dev/null || true
}

pgbouncer_start() {
	outboxkit_apt_install pgbouncer:pgbouncer || return 1
	local pgport deadline tx session
	pgport=$(_pgbouncer_pg_port) || return 1
	deadline=$((SECONDS + ${PGBOUNCER_START_TIMEOUT:-120}))
	until _pgbouncer_ready "$pgport"; do
		if ((SECONDS >= deadline)); then
			echo "pgbouncer_start: PostgreSQL on 127.0.0.1:$pgport does not answer" >&2
			return 1
		fi
		sleep 0.2
	done
	_pgbouncer_dir=$(mktemp -d /tmp/outboxkit-pgbouncer.XXXX) || return 1
	chown postgres: "$_pgbouncer_dir" || { pgbouncer_stop; return 1; }
	tx=$(_pgbouncer_run transaction "$pgport") || { pgbouncer_stop; return 1; }
	session=$(_pgbouncer_run session "$pgport") || { pgbouncer_stop; return 1; }
	export OUTBOXKIT_PGBOUNCER_TX_DSN="postgres://postgres@127.0.0.1:$tx/postgres?sslmode=disable"
	export OUTBOXKIT_PGBOUNCER_SESSION_DSN="postgres://postgres@127.0.0.1:$session/postgres?sslmode=disable"
	echo "pgbouncer: transaction mode on 127.0.0.1:$tx, session mode on 127.0.0.1:$session, in front of 127.0.0.1:$pgport ($_pgbouncer_dir)" >&2
}

pgbouncer_stop() {
	if [[ -n "$_pgbouncer_dir" ]]; then
		_pgbouncer_kill "$_pgbouncer_dir/transaction"
		_pgbouncer_kill "$_pgbouncer_dir/session"
		case "$_pgbouncer_dir" in
		/tmp/outboxkit-pgbouncer.*) rm -rf "$_pgbouncer_dir" ;;
		esac
	fi
	_pgbouncer_dir=""
	unset OUTBOXKIT_PGBOUNCER_TX_DSN OUTBOXKIT_PGBOUNCER_SESSION_DSN
	return 0
}
