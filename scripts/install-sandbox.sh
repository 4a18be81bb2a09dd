#!/usr/bin/env bash
# Installs what the isolating sandbox backends need from the host:
# bubblewrap (bwrap) and gVisor's runsc (gvisor, ADR 0040), from Debian's
# (or Ubuntu's) packages. Run as root, or with sudo. `rath doctor` then says
# whether sandboxes start on this machine.
# It first installs Node.js and npm when they are missing (install-node.sh),
# which the JavaScript example's test needs, Python 3 (install-python.sh),
# which the Python example's test needs, and Chromium (install-chromium.sh),
# which the web console's browser test drives, so that the README's test
# command has everything it needs.
set -euo pipefail
"$(dirname "$0")/install-node.sh"
"$(dirname "$0")/install-python.sh"
"$(dirname "$0")/install-chromium.sh"
missing=""
command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
command -v runsc >/dev/null 2>&1 || missing="$missing runsc"
if [ -n "$missing" ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-sandbox: no apt-get here; install$missing with this system's package manager" >&2
    exit 1
  fi
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  # shellcheck disable=SC2086 # split on purpose: one package a word
  $sudo apt-get install -y $missing >/dev/null 2>&1 || {
    $sudo apt-get update >/dev/null
    $sudo apt-get install -y $missing >/dev/null
  }
fi
echo "bubblewrap: $(bwrap --version)"
echo "gVisor: $(runsc --version | head -n 1)"
