#!/usr/bin/env bash
# Installs Chromium, which the web console's browser test drives headless
# (cmd/rath TestDemo/console, through chromedp), from Debian's (or Ubuntu's)
# packages when no Chromium or Chrome is on PATH. Run as root, or with sudo.
set -euo pipefail
for b in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$b" >/dev/null 2>&1; then
    echo "$b is installed: $("$b" --version 2>/dev/null || echo "version unknown")"
    exit 0
  fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-chromium: no apt-get here; install Chromium (or Chrome) with this system's package manager" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
$sudo apt-get install -y chromium >/dev/null 2>&1 || {
  $sudo apt-get update >/dev/null
  $sudo apt-get install -y chromium >/dev/null
}
command -v chromium >/dev/null 2>&1 || { echo "install-chromium: installed chromium, but there is no chromium on PATH" >&2; exit 1; }
echo "chromium installed: $(chromium --version 2>/dev/null)"
