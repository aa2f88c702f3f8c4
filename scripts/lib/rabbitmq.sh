# shellcheck shell=bash
# Throwaway RabbitMQ node for the RabbitMQ sink and consumer tests. Sourced by scripts/test.
#
#   rabbitmq_start   install Debian's rabbitmq-server and amqp-tools (amqp-get, amqp-consume: the
#                    independent client the tests use) when missing, start a private node on
#                    free loopback ports (its own epmd too), export OUTBOXKIT_RABBITMQ_URL and
#                    OUTBOXKIT_RABBITMQ_CTL (a rabbitmqctl of this node: the consumer tests read
#                    the exact count of a queue's ready and unacknowledged messages with it; the
#                    management API's counts are statistics that lag and were seen stuck)
#   rabbitmq_stop    stop the node and its epmd, remove the directory
#
# The node runs as root in the foreground with only environment variables (no packaged
# service, no /var/lib/rabbitmq); user guest/guest works on loopback.

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OUTBOXKIT_APT_NEEDS+=(rabbitmq-server:rabbitmq-server amqp-get:amqp-tools)

_rabbitmq_dir=""
_rabbitmq_pid=""
_rabbitmq_epmd_pid=""

_rabbitmq_fail() {
	echo "rabbitmq: $1" >&2
	if [ -n "$_rabbitmq_dir" ]; then
		echo "---- tail of the node's output and log ($_rabbitmq_dir) ----" >&2
		tail -n 30 "$_rabbitmq_dir/stdout" "$_rabbitmq_dir"/log/*.log 2>/dev/null >&2
	fi
	rabbitmq_stop
	return 1
}

rabbitmq_start() {
	outboxkit_apt_install rabbitmq-server:rabbitmq-server amqp-get:amqp-tools || return 1
	_rabbitmq_dir=$(mktemp -d /tmp/outboxkit-rabbitmq.XXXX) || return 1
	mkdir -p "$_rabbitmq_dir/home" "$_rabbitmq_dir/mnesia" "$_rabbitmq_dir/log"
	local port dist epmd
	port=$(outboxkit_free_port) || return 1
	dist=$(outboxkit_free_port) || return 1
	epmd=$(outboxkit_free_port) || return 1
	: >"$_rabbitmq_dir/rabbitmq.conf"
	echo '[].' >"$_rabbitmq_dir/plugins"
	# Our own epmd in the foreground, so that it is ours to stop (the node would otherwise
	# leave an `epmd -daemon` behind).
	epmd -port "$epmd" -address 127.0.0.1 >"$_rabbitmq_dir/epmd.log" 2>&1 &
	_rabbitmq_epmd_pid=$!
	# /usr/lib/rabbitmq/bin/rabbitmq-server, not /usr/sbin's wrapper (which su's to the rabbitmq
	# user): it runs the node as its child and stops it on TERM.
	HOME="$_rabbitmq_dir/home" RABBITMQ_NODENAME="rabbit$port@localhost" \
		RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="$dist" \
		ERL_EPMD_PORT="$epmd" RABBITMQ_MNESIA_BASE="$_rabbitmq_dir/mnesia" \
		RABBITMQ_LOG_BASE="$_rabbitmq_dir/log" RABBITMQ_PID_FILE="$_rabbitmq_dir/node.pid" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$_rabbitmq_dir/plugins" \
		RABBITMQ_CONFIG_FILE="$_rabbitmq_dir/rabbitmq" \
		/usr/lib/rabbitmq/bin/rabbitmq-server >"$_rabbitmq_dir/stdout" 2>&1 &
	_rabbitmq_pid=$!
	local i up=""
	for i in $(seq 1 240); do
		if ! kill -0 "$_rabbitmq_pid" 2>/dev/null; then
			_rabbitmq_fail "the node exited during start-up"
			return 1
		fi
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			up=1
			break
		fi
		sleep 0.25
	done
	if [ -z "$up" ]; then
		_rabbitmq_fail "the node did not answer within 60s"
		return 1
	fi
	cat >"$_rabbitmq_dir/rabbitmqctl" <<-CTL
		#!/bin/sh
		HOME="$_rabbitmq_dir/home" ERL_EPMD_PORT="$epmd" exec /usr/lib/rabbitmq/bin/rabbitmqctl -n "rabbit$port@localhost" "\$@"
	CTL
	chmod +x "$_rabbitmq_dir/rabbitmqctl"
	export OUTBOXKIT_RABBITMQ_URL="amqp://guest:guest@127.0.0.1:$port/"
	export OUTBOXKIT_RABBITMQ_CTL="$_rabbitmq_dir/rabbitmqctl"
	echo "rabbitmq: ready on 127.0.0.1:$port ($_rabbitmq_dir)" >&2
}

# _rabbitmq_kill PID: TERM, wait up to 30s, then KILL.
_rabbitmq_kill() {
	local pid=$1 i
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 1 120); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.25
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

rabbitmq_stop() {
	local node=""
	[ -n "$_rabbitmq_dir" ] && [ -s "$_rabbitmq_dir/node.pid" ] && node=$(cat "$_rabbitmq_dir/node.pid")
	_rabbitmq_kill "$_rabbitmq_pid"
	# The Erlang VM itself, should the script around it have died without stopping it.
	if [ -n "$node" ] && kill -0 "$node" 2>/dev/null; then
		kill -KILL "$node" 2>/dev/null || true
	fi
	_rabbitmq_kill "$_rabbitmq_epmd_pid"
	_rabbitmq_pid="" _rabbitmq_epmd_pid=""
	if [ -n "$_rabbitmq_dir" ]; then
		rm -rf "$_rabbitmq_dir" || true
	fi
	_rabbitmq_dir=""
	unset OUTBOXKIT_RABBITMQ_URL OUTBOXKIT_RABBITMQ_CTL
	return 0
}
