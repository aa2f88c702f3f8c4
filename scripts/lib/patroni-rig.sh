# shellcheck shell=bash
# A PostgreSQL failover rig for outboxkit's failover tests (scripts/failover): one etcd 3.4
# member, two Patroni 3.0 nodes, each running a PostgreSQL 15 server, on loopback, with
# synchronous replication (synchronous_mode: true) and wal_level logical, and a permanent
# logical slot (RIG_SLOT, pgoutput) that Patroni keeps on the replica.
#
#   source scripts/lib/patroni-rig.sh
#   rig_up        # exports OUTBOXKIT_FAILOVER_DSN (multi-host, target_session_attrs=read-write),
#                 # OUTBOXKIT_FAILOVER_NODES (name=host:port,...), OUTBOXKIT_FAILOVER_REST
#                 # (a Patroni REST address), OUTBOXKIT_FAILOVER_PATRONICTL (patronictl's config),
#                 # OUTBOXKIT_FAILOVER_DIR, OUTBOXKIT_FAILOVER_SLOT
#   rig_down      # stops everything rig_up started and removes its directory
#
# The functions are named rig_* (no NAME_start): ./scripts/test sources every scripts/lib/*.sh
# and starts each NAME_start, and the rig is not part of its run.
# Patroni runs as the OS user postgres (runuser), as PostgreSQL refuses to run as root, under a
# fresh directory in /tmp owned by that user. Environment: PG_BIN (default
# /usr/lib/postgresql/15/bin), RIG_SLOT (default outboxkit_failover).

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

_rig_log_tail() {
	local f
	for f in "$@"; do
		if [[ -s "$f" ]]; then
			echo "--- last lines of $f ---" >&2
			tail -n 40 "$f" >&2
		fi
	done
}

_rig_fail() {
	echo "rig_up: $1" >&2
	shift
	_rig_log_tail "$@"
	rig_down
	return 1
}

# _rig_node_yaml NAME PGPORT RESTPORT writes the Patroni configuration of one node.
_rig_node_yaml() {
	local dir="$OUTBOXKIT_FAILOVER_DIR" name="$1" pgport="$2" restport="$3"
	mkdir -p "$dir/$name"
	cat >"$dir/$name.yml" <<YAML
scope: outboxkit
namespace: /outboxkit-failover/
name: $name
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$restport
  connect_address: 127.0.0.1:$restport
etcd3:
  hosts: 127.0.0.1:$OUTBOXKIT_FAILOVER_ETCD_PORT
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: logical
        hot_standby: "on"
        hot_standby_feedback: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        max_connections: 100
        shared_buffers: 16MB
        synchronous_commit: "on"
        wal_keep_size: 128MB
    slots:
      ${RIG_SLOT:-outboxkit_failover}:
        type: logical
        database: postgres
        plugin: pgoutput
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - auth: trust
postgresql:
  listen: 127.0.0.1:$pgport
  connect_address: 127.0.0.1:$pgport
  data_dir: $dir/$name/data
  bin_dir: ${PG_BIN:-/usr/lib/postgresql/15/bin}
  pgpass: $dir/$name/pgpass
  authentication:
    superuser:
      username: postgres
      password: postgres
    replication:
      username: postgres
      password: postgres
    rewind:
      username: postgres
      password: postgres
  parameters:
    unix_socket_directories: $dir/$name
  pg_hba:
    - local all all trust
    - host replication all 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
YAML
}

# rig_node_start NAME starts (or restarts) the Patroni of node NAME in the background.
rig_node_start() {
	local dir="$OUTBOXKIT_FAILOVER_DIR" name="$1"
	runuser -u postgres -- patroni "$dir/$name.yml" >>"$dir/$name.log" 2>&1 &
	echo $! >"$dir/$name.pid"
}

# _rig_wait_cluster SECONDS waits until the cluster has a leader and a streaming sync standby.
_rig_wait_cluster() {
	local i out
	for i in $(seq 1 "$1"); do
		out="$(patronictl -c "$OUTBOXKIT_FAILOVER_PATRONICTL" list -f json 2>/dev/null)" || out=""
		if [[ "$out" == *'"Role": "Leader"'* && "$out" == *'"Role": "Sync Standby"'* &&
			"$out" != *'"State": "starting"'* && "$out" != *'"State": "stopped"'* ]]; then
			return 0
		fi
		sleep 1
	done
	return 1
}

rig_up() {
	local pg_bin="${PG_BIN:-/usr/lib/postgresql/15/bin}"
	command -v etcd >/dev/null && command -v patroni >/dev/null && command -v patronictl >/dev/null ||
		{ echo "rig_up: etcd, patroni and patronictl are needed (Debian packages etcd-server, patroni)" >&2; return 1; }
	[[ -x "$pg_bin/postgres" ]] || { echo "rig_up: PostgreSQL binaries not found in $pg_bin" >&2; return 1; }
	id postgres >/dev/null 2>&1 || { echo "rig_up: the OS user postgres does not exist" >&2; return 1; }
	local dir
	dir="$(mktemp -d /tmp/outboxkit-failover.XXXX)" || return 1
	chmod 700 "$dir" && chown postgres: "$dir" || { rm -rf "$dir"; return 1; }
	export OUTBOXKIT_FAILOVER_DIR="$dir"

	local cport pport
	cport="$(outboxkit_free_port)" && pport="$(outboxkit_free_port)" || { _rig_fail "no free port"; return 1; }
	export OUTBOXKIT_FAILOVER_ETCD_PORT="$cport"
	runuser -u postgres -- etcd --name n1 --data-dir "$dir/etcd" \
		--listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
		--listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
		--initial-cluster "n1=http://127.0.0.1:$pport" >"$dir/etcd.log" 2>&1 &
	echo $! >"$dir/etcd.pid"
	local i ok=""
	for i in $(seq 1 60); do
		if curl -fsS "http://127.0.0.1:$cport/health" 2>/dev/null | grep -q true; then
			ok=1
			break
		fi
		sleep 0.5
	done
	[[ -n "$ok" ]] || { _rig_fail "etcd is not healthy on 127.0.0.1:$cport" "$dir/etcd.log"; return 1; }

	local p1 p2 r1 r2
	p1="$(outboxkit_free_port)" && p2="$(outboxkit_free_port)" && r1="$(outboxkit_free_port)" && r2="$(outboxkit_free_port)" ||
		{ _rig_fail "no free port"; return 1; }
	_rig_node_yaml n1 "$p1" "$r1"
	_rig_node_yaml n2 "$p2" "$r2"
	chown -R postgres: "$dir"
	export OUTBOXKIT_FAILOVER_PATRONICTL="$dir/n1.yml"
	rig_node_start n1
	# n1 bootstraps the cluster (initdb) and takes the leader key; n2 then clones it.
	for i in $(seq 1 120); do
		if curl -fsS "http://127.0.0.1:$r1/primary" >/dev/null 2>&1; then
			break
		fi
		sleep 0.5
	done
	rig_node_start n2
	_rig_wait_cluster 120 || { _rig_fail "no leader with a sync standby within 120 s" "$dir/n1.log" "$dir/n2.log"; return 1; }

	export OUTBOXKIT_FAILOVER_NODES="n1=127.0.0.1:$p1,n2=127.0.0.1:$p2"
	export OUTBOXKIT_FAILOVER_REST="127.0.0.1:$r1,127.0.0.1:$r2"
	export OUTBOXKIT_FAILOVER_SLOT="${RIG_SLOT:-outboxkit_failover}"
	export OUTBOXKIT_FAILOVER_DSN="postgres://postgres@127.0.0.1:$p1,127.0.0.1:$p2/postgres?target_session_attrs=read-write&sslmode=disable"
	echo "rig_up: Patroni cluster ready (dir $dir):" >&2
	patronictl -c "$OUTBOXKIT_FAILOVER_PATRONICTL" list >&2
}

# _rig_kill_pidfile FILE sends SIGTERM, then SIGKILL, to the process FILE names.
_rig_kill_pidfile() {
	local pid i
	[[ -s "$1" ]] || return 0
	pid="$(cat "$1")"
	kill -TERM "$pid" 2>/dev/null || return 0
	for i in $(seq 1 40); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.25
	done
	kill -KILL "$pid" 2>/dev/null || true
}

rig_down() {
	local dir="${OUTBOXKIT_FAILOVER_DIR:-}" n pg_bin="${PG_BIN:-/usr/lib/postgresql/15/bin}"
	[[ -n "$dir" ]] || return 0
	for n in n1 n2; do
		# The runuser process's child is patroni; stop patroni (it stops its server) first.
		if [[ -s "$dir/$n.pid" ]]; then
			pkill -TERM -P "$(cat "$dir/$n.pid")" 2>/dev/null || true
		fi
	done
	sleep 2
	for n in n1 n2; do
		_rig_kill_pidfile "$dir/$n.pid"
		if [[ -f "$dir/$n/data/postmaster.pid" ]]; then
			runuser -u postgres -- "$pg_bin/pg_ctl" -D "$dir/$n/data" -m immediate stop >/dev/null 2>&1 || true
		fi
	done
	if [[ -s "$dir/etcd.pid" ]]; then
		pkill -TERM -P "$(cat "$dir/etcd.pid")" 2>/dev/null || true
	fi
	_rig_kill_pidfile "$dir/etcd.pid"
	case "$dir" in
	/tmp/outboxkit-failover.*) rm -rf "$dir" ;;
	esac
	unset OUTBOXKIT_FAILOVER_DIR OUTBOXKIT_FAILOVER_DSN OUTBOXKIT_FAILOVER_NODES OUTBOXKIT_FAILOVER_REST \
		OUTBOXKIT_FAILOVER_PATRONICTL OUTBOXKIT_FAILOVER_ETCD_PORT
	return 0
}
