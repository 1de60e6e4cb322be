#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite: lint, unit tests on simulated
# GPUs, real-kernel, real-browser and real-Prometheus tests, and the benchmark smoke run.
# The `gpu` tests run only where NVML and a GPU exist; elsewhere they are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check nbgpu tests benchmarks
.venv/bin/python -m pytest -q -ra -n 4 --dist load "$@"
