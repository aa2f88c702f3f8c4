# shellcheck shell=bash
# Kafka-protocol test cluster for the Kafka sink and consumer tests. Sourced by scripts/test.
#
#   kafka_start   install Debian's kcat (librdkafka, the independent client the tests use) when
#                 missing, build internal/kfakecluster (franz-go's kfake as a 3-broker process),
#                 start it on free loopback ports, export OUTBOXKIT_KAFKA_BROKERS
#   kafka_stop    stop it and remove its directory
#
# No Apache Kafka distribution is installable here; kfake speaks the Kafka protocol.

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OUTBOXKIT_APT_NEEDS+=(kcat:kcat)

_kafka_dir=""
_kafka_pid=""

kafka_start() {
	outboxkit_apt_install kcat:kcat || return 1
	_kafka_dir=$(mktemp -d /tmp/outboxkit-kafka.XXXX) || return 1
	local root
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
	if ! (cd "$root" && go build -o "$_kafka_dir/kfakecluster" ./internal/kfakecluster); then
		echo "kafka: building internal/kfakecluster failed" >&2
		kafka_stop
		return 1
	fi
	local ports="" p i
	for i in 1 2 3; do
		p=$(outboxkit_free_port) || return 1
		ports="${ports:+$ports,}$p"
	done
	"$_kafka_dir/kfakecluster" -ports "$ports" >"$_kafka_dir/addrs" 2>"$_kafka_dir/stderr" &
	_kafka_pid=$!
	for i in $(seq 1 80); do
		[ -s "$_kafka_dir/addrs" ] && break
		if ! kill -0 "$_kafka_pid" 2>/dev/null; then
			cat "$_kafka_dir/stderr" >&2
			echo "kafka: kfakecluster exited during start-up" >&2
			kafka_stop
			return 1
		fi
		sleep 0.25
	done
	if [ ! -s "$_kafka_dir/addrs" ]; then
		echo "kafka: kfakecluster did not start within 20s" >&2
		kafka_stop
		return 1
	fi
	OUTBOXKIT_KAFKA_BROKERS=$(head -n 1 "$_kafka_dir/addrs")
	export OUTBOXKIT_KAFKA_BROKERS
	echo "kafka: ready on $OUTBOXKIT_KAFKA_BROKERS ($_kafka_dir)" >&2
}

kafka_stop() {
	if [ -n "$_kafka_pid" ] && kill -0 "$_kafka_pid" 2>/dev/null; then
		kill -TERM "$_kafka_pid" 2>/dev/null || true
		local i
		for i in $(seq 1 40); do
			kill -0 "$_kafka_pid" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL "$_kafka_pid" 2>/dev/null || true
		wait "$_kafka_pid" 2>/dev/null || true
	fi
	_kafka_pid=""
	if [ -n "$_kafka_dir" ]; then
		rm -rf "$_kafka_dir" || true
	fi
	_kafka_dir=""
	unset OUTBOXKIT_KAFKA_BROKERS
	return 0
}
