#!/usr/bin/env bash
# Set up a development environment on a fresh Debian/Ubuntu machine: system packages for
# the browser and Prometheus tests (when run as root), then .venv with nbgpu and its test
# tools. Safe to run again; it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  need=()
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch only for the example notebooks' training loop (CPU build); nbgpu never needs it.
.venv/bin/python -m pip install -q -e '.[test]' 'torch==2.13.0'
