"""``%load_ext nbgpu`` + ``%gpumon`` with NVML's waits played on a machine without a GPU.

Simulated GPUs stand in for the NVML library itself (so ``source="auto"`` takes them for
real cards) and wait as long as the H200's calls do outside the GIL (nvmlInit 15 ms, PCIe
throughput 21 ms, energy 3 ms, a sample-buffer read 2 ms; ``docs/engine.md``). What
overlaps those waits on a real GPU overlaps them here too. Each run is a fresh interpreter
(cold imports); the seconds to the panel displayed are printed, with their median.

    python -m benchmarks.startup_nvml_waits [--repeats N] [TREE ...]

Each TREE (default: this one) is put first on ``sys.path``, so two checkouts compare in
turns under the same load.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from . import REPO_ROOT

WAIT_S = {"nvmlInit": 0.015, "nvmlDeviceGetPcieThroughput": 0.021,
          "nvmlDeviceGetTotalEnergyConsumption": 0.003, "nvmlDeviceGetSamples": 0.002}

_RUN = """
import sys, time
sys.path.insert(0, {tree!r})
from nbgpu.sources import simulated
S = simulated.SimulatedGPUs
for name, wait in {waits!r}.items():
    def slow(self, *args, _f=getattr(S, name), _w=wait):
        time.sleep(_w)
        return _f(self, *args)
    setattr(S, name, slow)
sys.modules["pynvml"] = S(count=1, seed=0)
from IPython.core.interactiveshell import InteractiveShell
sh = InteractiveShell.instance()
t0 = time.perf_counter()
sh.run_line_magic("load_ext", "nbgpu")
sh.run_line_magic("gpumon", "")
print("DISPLAYED", time.perf_counter() - t0)
sh.run_line_magic("unload_ext", "nbgpu")
"""


def displayed_s(tree: str) -> float:
    """Seconds from ``%load_ext nbgpu`` to ``%gpumon`` returning, in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", _RUN.format(tree=tree, waits=WAIT_S)],
                          capture_output=True, text=True, timeout=120, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("DISPLAYED"))
    return float(line.split()[1])


def main(argv: list[str] | None = None) -> None:
    """Run every tree in turns and print each one's seconds and median."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.startup_nvml_waits")
    p.add_argument("trees", nargs="*", default=[str(REPO_ROOT)])
    p.add_argument("--repeats", type=int, default=8)
    args = p.parse_args(argv)
    runs: dict[str, list[float]] = {t: [] for t in args.trees}
    for _ in range(args.repeats):
        for tree in args.trees:
            runs[tree].append(displayed_s(tree))
    for tree, values in runs.items():
        print(f"{tree}: median {statistics.median(values):.3f} s of "
              f"{', '.join(f'{v:.3f}' for v in sorted(values))}")


if __name__ == "__main__":
    main()
