#!/usr/bin/env bash
# Set up (scripts/setup.sh) and open the quickstart notebook in JupyterLab. Without a GPU
# the notebook uses simulated GPUs, labelled SIMULATED.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/nbgpu demo "$@"
