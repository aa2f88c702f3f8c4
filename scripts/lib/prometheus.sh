# shellcheck shell=bash
# Prometheus (Debian's `prometheus` package, which ships promtool) for the tests of deploy/.
# Sourced by scripts/test.
#
#   source scripts/lib/prometheus.sh
#   prometheus_start    # exports OUTBOXKIT_PROMTOOL, OUTBOXKIT_PROMETHEUS_URL, OUTBOXKIT_PROMETHEUS_DIR
#   ...
#   prometheus_stop
#
# prometheus_start installs the package with apt-get when promtool is missing, then runs
# prometheus by hand (not its service) on a free loopback port with a 1 s scrape and evaluation
# interval. Scrape targets come from $OUTBOXKIT_PROMETHEUS_DIR/targets/*.json (file_sd: a test
# writes its daemon's address there) and rules from $OUTBOXKIT_PROMETHEUS_DIR/rules/*.yml (a test
# writes them and POSTs /-/reload). Environment: PROMETHEUS_START_TIMEOUT (seconds, default 60).

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OUTBOXKIT_APT_NEEDS+=(promtool:prometheus prometheus:prometheus)

prometheus_start() {
	outboxkit_apt_install promtool:prometheus prometheus:prometheus || return 1
	export OUTBOXKIT_PROMTOOL
	OUTBOXKIT_PROMTOOL="$(command -v promtool)"
	local dir port
	dir="$(mktemp -d /tmp/outboxkit-prometheus.XXXX)" || return 1
	mkdir -p "$dir/targets" "$dir/rules" "$dir/data"
	cat >"$dir/prometheus.yml" <<CONF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $dir/rules/*.yml
scrape_configs:
  - job_name: outboxkit
    scrape_interval: 1s
    file_sd_configs:
      - files: ['$dir/targets/*.json']
        refresh_interval: 1s
CONF
	port="$(outboxkit_free_port)" || return 1
	prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
		--web.listen-address="127.0.0.1:$port" --web.enable-lifecycle --log.level=warn \
		>"$dir/prometheus.log" 2>&1 &
	export OUTBOXKIT_PROMETHEUS_PID=$!
	export OUTBOXKIT_PROMETHEUS_DIR="$dir"
	local deadline=$((SECONDS + ${PROMETHEUS_START_TIMEOUT:-60}))
	while ((SECONDS < deadline)); do
		if python3 -c 'import sys, urllib.request
urllib.request.urlopen("http://127.0.0.1:%s/-/ready" % sys.argv[1], timeout=2).read()' "$port" >/dev/null 2>&1; then
			export OUTBOXKIT_PROMETHEUS_URL="http://127.0.0.1:$port"
			echo "prometheus_start: ready on $OUTBOXKIT_PROMETHEUS_URL (pid $OUTBOXKIT_PROMETHEUS_PID)" >&2
			return 0
		fi
		if ! kill -0 "$OUTBOXKIT_PROMETHEUS_PID" 2>/dev/null; then
			break
		fi
		sleep 0.2
	done
	echo "prometheus_start: not ready; log:" >&2
	tail -n 30 "$dir/prometheus.log" >&2
	return 1
}

prometheus_stop() {
	if [[ -n "${OUTBOXKIT_PROMETHEUS_PID:-}" ]]; then
		kill "$OUTBOXKIT_PROMETHEUS_PID" 2>/dev/null || true
		wait "$OUTBOXKIT_PROMETHEUS_PID" 2>/dev/null || true
	fi
	if [[ -n "${OUTBOXKIT_PROMETHEUS_DIR:-}" ]]; then
		rm -rf "$OUTBOXKIT_PROMETHEUS_DIR"
	fi
	unset OUTBOXKIT_PROMETHEUS_PID OUTBOXKIT_PROMETHEUS_DIR OUTBOXKIT_PROMETHEUS_URL
}
