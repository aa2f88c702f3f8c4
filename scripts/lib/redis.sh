# shellcheck shell=bash
# Redis test server for the Redis streams sink and consumer tests. Sourced by scripts/test.
#
#   redis_start   install Debian's redis-server and redis-cli (redis-tools: the independent
#                 client the tests use) when missing, start a server with an append-only file on
#                 a free loopback port, export OUTBOXKIT_REDIS_ADDR (host:port)
#   redis_stop    stop it and remove its directory

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OUTBOXKIT_APT_NEEDS+=(redis-server:redis-server redis-cli:redis-tools)

_redis_dir=""
_redis_pid=""

redis_start() {
	outboxkit_apt_install redis-server:redis-server redis-cli:redis-tools || return 1
	_redis_dir=$(mktemp -d /tmp/outboxkit-redis.XXXX) || return 1
	local port i
	port=$(outboxkit_free_port) || return 1
	redis-server --port "$port" --bind 127.0.0.1 --dir "$_redis_dir" --appendonly yes --save '' \
		--daemonize no >"$_redis_dir/server.log" 2>&1 &
	_redis_pid=$!
	for i in $(seq 1 80); do
		if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]; then
			OUTBOXKIT_REDIS_ADDR="127.0.0.1:$port"
			export OUTBOXKIT_REDIS_ADDR
			echo "redis: ready on $OUTBOXKIT_REDIS_ADDR ($_redis_dir)" >&2
			return 0
		fi
		if ! kill -0 "$_redis_pid" 2>/dev/null; then
			break
		fi
		sleep 0.25
	done
	tail -n 20 "$_redis_dir/server.log" >&2
	echo "redis: redis-server did not answer PING within 20s" >&2
	redis_stop
	return 1
}

redis_stop() {
	if [ -n "$_redis_pid" ] && kill -0 "$_redis_pid" 2>/dev/null; then
		kill -TERM "$_redis_pid" 2>/dev/null || true
		local i
		for i in $(seq 1 40); do
			kill -0 "$_redis_pid" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL "$_redis_pid" 2>/dev/null || true
		wait "$_redis_pid" 2>/dev/null || true
	fi
	_redis_pid=""
	if [ -n "$_redis_dir" ]; then
		rm -rf "$_redis_dir" || true
	fi
	_redis_dir=""
	unset OUTBOXKIT_REDIS_ADDR
	return 0
}
