# shellcheck shell=bash
# Helpers shared by the server scripts in scripts/lib (each of them sources this file).

# outboxkit_free_port prints a loopback TCP port that was free a moment ago: bind port 0 and read
# it back; without python3, probe random high ports with bash's /dev/tcp until one refuses.
outboxkit_free_port() {
	if command -v python3 >/dev/null 2>&1; then
		python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
		return
	fi
	local p i
	for i in $(seq 1 100); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "no free loopback port found" >&2
	return 1
}

# OUTBOXKIT_APT_NEEDS lists "command:package" pairs: each lib appends the Debian packages it
# needs, so that scripts/test installs every missing one in a single apt-get run before it
# starts the servers in parallel (dpkg takes one install at a time).
declare -ga OUTBOXKIT_APT_NEEDS 2>/dev/null || true

# outboxkit_apt_install [command:package ...] installs, in one apt-get run, the package of each
# pair whose command is not on PATH (nor in /usr/sbin). Without arguments it takes
# OUTBOXKIT_APT_NEEDS.
outboxkit_apt_install() {
	local pair cmd pkg missing=()
	[ $# -gt 0 ] || set -- "${OUTBOXKIT_APT_NEEDS[@]}"
	for pair in "$@"; do
		cmd="${pair%%:*}" pkg="${pair#*:}"
		if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ]; then
			[[ " ${missing[*]} " == *" $pkg "* ]] || missing+=("$pkg")
		fi
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	echo "apt-get install ${missing[*]}" >&2
	apt-get update -qq >/dev/null || { echo "apt-get update failed" >&2; return 1; }
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}" >/dev/null ||
		{ echo "apt-get install ${missing[*]} failed" >&2; return 1; }
}
