#!/usr/bin/env bash
# Installs Node.js and npm, which the JavaScript examples' tests need
# (e2e TestJavaScriptClient runs `npm ci` and `node` on examples/js,
# cmd/rath TestAgentsSDKThroughTheGateway on examples/agents-js), from
# Debian's (or Ubuntu's) packages when they are missing. Run as root, or with
# sudo. Nothing is installed when both are on PATH already.
set -euo pipefail
missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then
  echo "node $(node --version) and npm $(npm --version) are installed"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-node: no apt-get here; install ${missing[*]} (Node.js 20 or later, with npm) with this system's package manager" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
$sudo apt-get install -y "${missing[@]}" >/dev/null 2>&1 || {
  $sudo apt-get update >/dev/null
  $sudo apt-get install -y "${missing[@]}" >/dev/null
}
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install-node: installed ${missing[*]}, but there is still no $tool on PATH" >&2; exit 1; }
done
echo "installed ${missing[*]}: node $(node --version), npm $(npm --version)"
