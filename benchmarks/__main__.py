"""``python -m benchmarks``: run every benchmark this machine can, print and save results."""

from benchmarks.cli import main

raise SystemExit(main())
