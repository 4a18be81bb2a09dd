#!/usr/bin/env bash
# Installs Python 3, which the Python example's test needs (cmd/rath
# TestPythonAgentThroughTheGateway runs examples/python/agent.py, standard
# library only), from Debian's (or Ubuntu's) packages when it is missing.
# Run as root, or with sudo. Nothing is installed when python3 is on PATH
# already.
set -euo pipefail
if command -v python3 >/dev/null 2>&1; then
  echo "$(python3 --version) is installed"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-python: no apt-get here; install python3 (Python 3.8 or later) with this system's package manager" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
$sudo apt-get install -y python3 >/dev/null 2>&1 || {
  $sudo apt-get update >/dev/null
  $sudo apt-get install -y python3 >/dev/null
}
command -v python3 >/dev/null 2>&1 || { echo "install-python: installed python3, but there is still no python3 on PATH" >&2; exit 1; }
echo "installed $(python3 --version)"
