#!/usr/bin/env bash
# On a GPU machine: the `gpu` test set and every check script of scripts/gpu/, their
# outputs written under OUT_DIR (default ./gpu-out). Needs nbgpu's runtime and test
# dependencies importable (a venv, or wheels on PYTHONPATH) and torch with CUDA.
#   bash scripts/gpu/run_checks.sh [OUT_DIR] [pytest args...]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-gpu-out}; shift || true
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/nvidia-smi.csv" 2>&1
python3 -m pytest -m gpu -q -ra -p no:cacheprovider "$@" 2>&1 | tee "$out/gpu-tests.log" | tail -40
for script in scripts/gpu/*.py; do
  name=$(basename "$script" .py)
  echo "== $name"
  timeout 240 python3 "$script" --out "$out/$name.json" > "$out/$name.log" 2>&1
  echo "rc=$?"; tail -15 "$out/$name.log"
done
