"""nbgpu's benchmarks: overhead, resolution, accuracy, traffic, memory and start-up.

Run ``python -m benchmarks`` from the repository root; see ``docs/performance.md``.
The repository root is put first on ``sys.path`` so the figures describe this tree.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
