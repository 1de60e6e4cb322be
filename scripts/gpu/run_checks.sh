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
if [ "${NBGPU_SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -m gpu -q -ra -p no:cacheprovider "$@" 2>&1 | tee "$out/gpu-tests.log" | tail -40
fi
for script in scripts/gpu/*.py; do
  name=$(basename "$script" .py)
  echo "== $name"
  case $name in
    *_ab|_*) continue ;;   # two-tree scripts (run by hand, --tree name=path twice) and helpers
    oom_notebook) target="$out" ;;   # writes oom.ipynb and oom.json into a folder
    *) target="$out/$name.json" ;;
  esac
  timeout 240 python3 "$script" --out "$target" > "$out/$name.log" 2>&1
  echo "rc=$?"; tail -15 "$out/$name.log"
done
