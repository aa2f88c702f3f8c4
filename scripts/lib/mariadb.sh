# shellcheck shell=bash
# Throwaway MariaDB server for the MySQL adapter's tests. Sourced by scripts/test.
#
#   mariadb_start   install mariadb-server when missing, start a private server on a free
#                   loopback port, export OUTBOXKIT_MYSQL_DSN and OUTBOXKIT_MYSQL_TLS_CA (the CA
#                   of its TLS certificate, issued for "localhost" only)
#   mariadb_stop    shut it down and remove its directory
#
# Environment (optional):
#   OUTBOXKIT_MARIADB_DURABLE=1  keep innodb_flush_log_at_trx_commit=1 and sync_binlog=1
#                                (default: 2 and 0, faster and fine for tests)
#   OUTBOXKIT_MARIADB_ARGS="..."  extra mariadbd flags, split on spaces
#                                (e.g. --innodb-buffer-pool-size=1G for benchmarks)

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OUTBOXKIT_APT_NEEDS+=(mariadbd:mariadb-server openssl:openssl)

_mariadb_dir=""
_mariadb_pid=""

_mariadb_fail() {
	echo "mariadb: $1" >&2
	if [ -n "$_mariadb_dir" ] && [ -f "$_mariadb_dir/error.log" ]; then
		echo "---- tail of $_mariadb_dir/error.log ----" >&2
		tail -n 40 "$_mariadb_dir/error.log" >&2
	fi
	return 1
}

mariadb_start() {
	outboxkit_apt_install mariadbd:mariadb-server || return 1
	local mariadbd=mariadbd
	command -v mariadbd >/dev/null 2>&1 || mariadbd=/usr/sbin/mariadbd

	_mariadb_dir=$(mktemp -d /tmp/outboxkit-mariadb.XXXX) || return 1
	mkdir -p "$_mariadb_dir/data"
	chown -R mysql: "$_mariadb_dir"

	if ! mariadb-install-db --no-defaults --user=mysql --datadir="$_mariadb_dir/data" \
		--auth-root-authentication-method=normal --skip-test-db >"$_mariadb_dir/install.log" 2>&1; then
		tail -n 40 "$_mariadb_dir/install.log" >&2
		_mariadb_fail "mariadb-install-db failed"
		return 1
	fi

	# TLS: a certificate for "localhost" signed by a throwaway CA (OUTBOXKIT_MYSQL_TLS_CA);
	# clients that ask for no TLS are served as before.
	outboxkit_test_certs "$_mariadb_dir/tls" mysql || { _mariadb_fail "no TLS certificates"; return 1; }
	local tls=(--ssl-ca="$_mariadb_dir/tls/ca.crt" --ssl-cert="$_mariadb_dir/tls/server.crt" --ssl-key="$_mariadb_dir/tls/server.key")

	local port
	port=$(outboxkit_free_port) || return 1
	local durability=(--innodb-flush-log-at-trx-commit=2 --sync-binlog=0)
	if [ "${OUTBOXKIT_MARIADB_DURABLE:-}" = 1 ]; then
		durability=(--innodb-flush-log-at-trx-commit=1 --sync-binlog=1)
	fi
	"$mariadbd" --no-defaults --user=mysql --datadir="$_mariadb_dir/data" --port="$port" \
		--bind-address=127.0.0.1 --socket="$_mariadb_dir/mysqld.sock" \
		--pid-file="$_mariadb_dir/mysqld.pid" --log-error="$_mariadb_dir/error.log" \
		--server-id=1 --log-bin="$_mariadb_dir/data/binlog" --binlog-format=ROW \
		--binlog-row-image=FULL --binlog-row-metadata=FULL --skip-name-resolve \
		--max-connections=500 "${tls[@]}" "${durability[@]}" ${OUTBOXKIT_MARIADB_ARGS:-} >/dev/null 2>&1 &
	_mariadb_pid=$!

	local i
	for i in $(seq 1 120); do
		if mariadb-admin --no-defaults --protocol=TCP -h 127.0.0.1 -P "$port" -u root ping >/dev/null 2>&1; then
			break
		fi
		if ! kill -0 "$_mariadb_pid" 2>/dev/null; then
			_mariadb_fail "mariadbd exited during start-up"
			return 1
		fi
		sleep 0.25
	done
	if ! mariadb-admin --no-defaults --protocol=TCP -h 127.0.0.1 -P "$port" -u root ping >/dev/null 2>&1; then
		_mariadb_fail "mariadbd did not answer ping within 30s"
		mariadb_stop
		return 1
	fi
	# root@localhost only; tests connect over TCP from 127.0.0.1 (skip-name-resolve): a
	# dedicated passwordless user with every privilege on the throwaway server (and the grant
	# option: the privilege tests create users of their own).
	if ! mariadb --no-defaults --protocol=SOCKET -S "$_mariadb_dir/mysqld.sock" -u root -e \
		"CREATE USER IF NOT EXISTS 'outboxkit'@'127.0.0.1'; GRANT ALL ON *.* TO 'outboxkit'@'127.0.0.1' WITH GRANT OPTION;" \
		>"$_mariadb_dir/grant.log" 2>&1; then
		cat "$_mariadb_dir/grant.log" >&2
		_mariadb_fail "cannot create the test user"
		mariadb_stop
		return 1
	fi
	export OUTBOXKIT_MYSQL_DSN="outboxkit@tcp(127.0.0.1:$port)/"
	export OUTBOXKIT_MYSQL_TLS_CA="$_mariadb_dir/tls/ca.crt"
	echo "mariadb: ready on 127.0.0.1:$port ($_mariadb_dir)" >&2
}

mariadb_stop() {
	if [ -n "$_mariadb_pid" ] && kill -0 "$_mariadb_pid" 2>/dev/null; then
		kill -TERM "$_mariadb_pid" 2>/dev/null || true
		local i
		for i in $(seq 1 120); do
			kill -0 "$_mariadb_pid" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL "$_mariadb_pid" 2>/dev/null || true
		wait "$_mariadb_pid" 2>/dev/null || true
	fi
	_mariadb_pid=""
	if [ -n "$_mariadb_dir" ]; then
		rm -rf "$_mariadb_dir" || true
	fi
	_mariadb_dir=""
	unset OUTBOXKIT_MYSQL_DSN
	return 0
}
