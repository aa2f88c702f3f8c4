# shellcheck shell=bash
# Headless Chromium (Debian's `chromium`) for the browser tests of the operator console
# (internal/browsertest, internal/console). Sourced by scripts/test.
#
#   source scripts/lib/chromium.sh
#   chromium_start    # exports OUTBOXKIT_CHROMIUM (the browser's path)
#   ...
#   chromium_stop     # nothing runs between tests: each test starts and ends its own browser
#
# chromium_start installs the package with apt-get when /usr/bin/chromium is missing, then checks
# that `chromium --headless --no-sandbox --disable-gpu --version` runs (bounded by
# CHROMIUM_CHECK_TIMEOUT seconds, default 60). No server is left running: the tests start the
# browser themselves (chromedp) from the exported path.

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OUTBOXKIT_APT_NEEDS+=(chromium:chromium)

chromium_start() {
	local bin=/usr/bin/chromium out
	if [ ! -x "$bin" ]; then
		outboxkit_apt_install chromium:chromium || {
			echo "chromium_start: could not install Debian's chromium package (apt-get install chromium)" >&2
			return 1
		}
	fi
	if [ ! -x "$bin" ]; then
		echo "chromium_start: $bin is still missing after installing the chromium package" >&2
		return 1
	fi
	# Chromium prints a harmless D-Bus error on stderr when run as root without a session bus;
	# only the exit status and the version line on stdout count.
	if ! out=$(timeout "${CHROMIUM_CHECK_TIMEOUT:-60}" "$bin" --headless --no-sandbox --disable-gpu --version 2>/dev/null) ||
		[[ "$out" != *Chromium* ]]; then
		echo "chromium_start: '$bin --headless --no-sandbox --disable-gpu --version' failed (output: ${out:-none})" >&2
		return 1
	fi
	export OUTBOXKIT_CHROMIUM="$bin"
	echo "chromium_start: $out at $OUTBOXKIT_CHROMIUM" >&2
}

chromium_stop() {
	unset OUTBOXKIT_CHROMIUM
	return 0
}
