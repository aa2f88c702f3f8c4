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
