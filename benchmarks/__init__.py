"""nbgpu's benchmarks: overhead, resolution, accuracy, traffic, memory and start-up.

Run ``python -m benchmarks`` from the repository root; see ``docs/performance.md``.
The checked-out ``src/`` is put first on ``sys.path`` so the figures describe this tree.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SRC_DIR = REPO_ROOT / "src"

if SRC_DIR.is_dir() and str(SRC_DIR) not in sys.path:
    sys.path.insert(0, str(SRC_DIR))
