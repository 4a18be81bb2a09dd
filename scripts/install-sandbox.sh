#!/usr/bin/env bash
# Installs what the isolating sandbox backend (bwrap) needs from the host:
# bubblewrap, from Debian's (or Ubuntu's) packages. Run as root, or with sudo.
# `rath doctor` then says whether sandboxes start on this machine.
# It first installs Node.js and npm when they are missing (install-node.sh),
# which the JavaScript example's test needs, Python 3 (install-python.sh),
# which the Python example's test needs, and Chromium (install-chromium.sh),
# which the web console's browser test drives, so that the README's test
# command has everything it needs.
set -euo pipefail
"$(dirname "$0")/install-node.sh"
"$(dirname "$0")/install-python.sh"
"$(dirname "$0")/install-chromium.sh"
if command -v bwrap >/dev/null 2>&1; then
  echo "bubblewrap is installed: $(bwrap --version)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-sandbox: no apt-get here; install bubblewrap (bwrap) with this system's package manager" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
$sudo apt-get install -y bubblewrap >/dev/null 2>&1 || {
  $sudo apt-get update >/dev/null
  $sudo apt-get install -y bubblewrap >/dev/null
}
echo "bubblewrap installed: $(bwrap --version)"
