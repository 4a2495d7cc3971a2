#!/usr/bin/env bash
# Debian's chromium and chromium-driver at /usr/bin, for the report's browser test and scripts/screenshot.py
# (harness/reporting/browser.py uses those fixed paths, so Selenium never downloads a browser). Nothing to do when both
# are there. apt-get update only when the install fails without it: a fresh image's package lists may be empty
# or stale, but updating costs time on hosts whose lists are fine. Needs root or passwordless sudo.
# Usage: setup_chromium.sh
set -euo pipefail
if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
  exit 0
fi
fail() { echo "setup_chromium: $*" >&2; exit 1; }
if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  fail "/usr/bin/chromium or /usr/bin/chromedriver is missing and installing them needs root (or passwordless" \
    "sudo): run \`sudo apt-get install chromium chromium-driver\`, then this again"
fi
command -v apt-get >/dev/null 2>&1 || fail "no apt-get: install Chromium and its driver as /usr/bin/chromium and" \
  "/usr/bin/chromedriver by hand (the browser test and scripts/screenshot.py look there)"
install() {
  # chromium-sandbox (recommended) is not needed: the browser runs with --no-sandbox
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    chromium chromium-driver
}
if ! install; then
  echo "setup_chromium: install failed; updating the package lists and trying again" >&2
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q || fail "apt-get update failed"
  install || fail "apt-get install chromium chromium-driver failed (not a Debian release that ships them?)"
fi
[[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]] \
  || fail "installed, but /usr/bin/chromium or /usr/bin/chromedriver is still missing"
/usr/bin/chromedriver --version
