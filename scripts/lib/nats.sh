# shellcheck shell=bash
# NATS server with JetStream for the NATS sink and consumer tests. Sourced by scripts/test.
#
#   nats_start   install Debian's nats-server when missing, start it with JetStream on free
#                loopback ports (data under a fresh /tmp directory), export OUTBOXKIT_NATS_URL;
#                build the NATS CLI (github.com/nats-io/natscli, the independent client the
#                tests read back with) into that directory and export OUTBOXKIT_NATS_CLI
#   nats_stop    stop the server and remove its directory

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OUTBOXKIT_APT_NEEDS+=(nats-server:nats-server)

_nats_dir=""
_nats_pid=""

# _nats_ready reports whether the monitoring port answers GET /jsz with 200 (JetStream is up).
_nats_ready() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'GET /jsz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
		IFS= read -r -t 2 line <&3 || exit 1
		[[ "$line" == *" 200 "* ]]
	) 2>/dev/null
}

nats_start() {
	outboxkit_apt_install nats-server:nats-server || return 1
	_nats_dir=$(mktemp -d /tmp/outboxkit-nats.XXXX) || return 1
	local port mon i
	port=$(outboxkit_free_port) || return 1
	mon=$(outboxkit_free_port) || return 1
	nats-server -a 127.0.0.1 -p "$port" -m "$mon" -js -sd "$_nats_dir/js" >"$_nats_dir/server.log" 2>&1 &
	_nats_pid=$!
	for i in $(seq 1 80); do
		_nats_ready "$mon" && break
		if ! kill -0 "$_nats_pid" 2>/dev/null; then
			tail -n 20 "$_nats_dir/server.log" >&2
			echo "nats: nats-server exited during start-up" >&2
			nats_stop
			return 1
		fi
		sleep 0.25
	done
	if ! _nats_ready "$mon"; then
		tail -n 20 "$_nats_dir/server.log" >&2
		echo "nats: nats-server did not answer within 20s" >&2
		nats_stop
		return 1
	fi
	OUTBOXKIT_NATS_URL="nats://127.0.0.1:$port"
	export OUTBOXKIT_NATS_URL
	# The NATS CLI, pinned; built from the module proxy (the Go build cache makes it quick
	# after the first run). Without it the read-back test is skipped (fails under CI).
	if GOBIN="$_nats_dir/bin" go install github.com/nats-io/natscli/nats@v0.5.0 >"$_nats_dir/cli-build.log" 2>&1; then
		OUTBOXKIT_NATS_CLI="$_nats_dir/bin/nats"
		export OUTBOXKIT_NATS_CLI
	else
		tail -n 20 "$_nats_dir/cli-build.log" >&2
		echo "nats: building the NATS CLI failed" >&2
	fi
	echo "nats: ready on $OUTBOXKIT_NATS_URL ($_nats_dir)" >&2
}

nats_stop() {
	if [ -n "$_nats_pid" ] && kill -0 "$_nats_pid" 2>/dev/null; then
		kill -TERM "$_nats_pid" 2>/dev/null || true
		local i
		for i in $(seq 1 40); do
			kill -0 "$_nats_pid" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL "$_nats_pid" 2>/dev/null || true
		wait "$_nats_pid" 2>/dev/null || true
	fi
	_nats_pid=""
	if [ -n "$_nats_dir" ]; then
		rm -rf "$_nats_dir" || true
	fi
	_nats_dir=""
	unset OUTBOXKIT_NATS_URL OUTBOXKIT_NATS_CLI
	return 0
}
