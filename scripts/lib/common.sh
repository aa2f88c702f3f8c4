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

# outboxkit_test_certs DIR OWNER makes, in DIR, a throwaway CA (ca.crt) and a server certificate
# it signed (server.crt, key server.key owned by OWNER, mode 600) for the name "localhost" only:
# a client that verifies the host name (sslmode=verify-full) must dial localhost, and dialling
# 127.0.0.1 fails closed, which the TLS tests check. EC P-256 keys, valid 7 days.
outboxkit_test_certs() {
	local dir="$1" owner="$2"
	mkdir -p "$dir" || return 1
	local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
	openssl req -x509 "${ec[@]}" -days 7 -subj "/CN=outboxkit test CA" \
		-keyout "$dir/ca.key" -out "$dir/ca.crt" >/dev/null 2>&1 &&
		openssl req "${ec[@]}" -subj "/CN=localhost" -keyout "$dir/server.key" -out "$dir/server.csr" >/dev/null 2>&1 &&
		printf 'subjectAltName=DNS:localhost\n' >"$dir/server.ext" &&
		openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
			-days 7 -extfile "$dir/server.ext" -out "$dir/server.crt" >/dev/null 2>&1 ||
		{ echo "outboxkit_test_certs: openssl failed in $dir" >&2; return 1; }
	rm -f "$dir/ca.key" "$dir/server.csr" "$dir/server.ext" "$dir/ca.srl"
	chmod 644 "$dir/ca.crt" "$dir/server.crt"
	chmod 600 "$dir/server.key"
	chown "$owner" "$dir/server.key" "$dir/server.crt"
}
