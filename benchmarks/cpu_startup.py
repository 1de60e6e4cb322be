"""Start-up: ``import nbgpu`` in a fresh interpreter, and ``%load_ext nbgpu`` + ``%gpumon``
to the panel's first update in a real kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from . import REPO_ROOT
from .bytecode import precompile
from .registry import Context
from .report import Outcome, Target, UnavailableError
from .stats import median

IMPORT_TARGET_S = 0.3
FIRST_UPDATE_TARGET_S = 1.0  # issue 13: %load_ext + %gpumon to the first update, on the H200
_IMPORT_SNIPPET = ("import time; t = time.perf_counter(); import nbgpu; "
                   "print(time.perf_counter() - t)")
# What a script pays before it can sample: the engine's modules, numpy included (public names
# load lazily, so `import nbgpu` alone defers this to first use).
_ENGINE_SNIPPET = ("import time; t = time.perf_counter(); import nbgpu; nbgpu.Sampler; "
                   "print(time.perf_counter() - t)")
_ENGINE_AFTER_NUMPY_SNIPPET = ("import numpy, time; t = time.perf_counter(); import nbgpu; "
                               "nbgpu.Sampler; print(time.perf_counter() - t)")


def _timed(snippet: str) -> tuple[float, float]:
    """(seconds the snippet printed, seconds the whole interpreter ran)."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", snippet], env=_env(), capture_output=True,
                          text=True, timeout=60, check=True)
    return float(done.stdout.strip().splitlines()[-1]), time.perf_counter() - t0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def run_import(ctx: Context) -> Outcome:
    """Median of several fresh-interpreter imports (the interpreter's own start excluded)."""
    repeats = 3 if ctx.quick else 9
    precompiled = precompile(REPO_ROOT / "nbgpu")  # an installed nbgpu imports from bytecode
    import_s, process_s, engine_s, engine_warm_s = [], [], [], []
    for _ in range(repeats):
        one, whole = _timed(_IMPORT_SNIPPET)
        import_s.append(one)
        process_s.append(whole)
        engine_s.append(_timed(_ENGINE_SNIPPET)[0])
        engine_warm_s.append(_timed(_ENGINE_AFTER_NUMPY_SNIPPET)[0])
    out = Outcome(raw={"import_s": import_s, "process_s": process_s, "engine_s": engine_s,
                       "engine_after_numpy_s": engine_warm_s, "repeats": repeats,
                       "nbgpu_precompiled": precompiled})
    out.targets.append(Target("import nbgpu (median)", median(import_s), "s", "<=", IMPORT_TARGET_S))
    out.figure("whole interpreter run (median)", median(process_s), "s")
    out.figure("import nbgpu + engine modules, numpy included (median)", median(engine_s), "s")
    out.figure("the same with numpy already imported (median)", median(engine_warm_s), "s")
    return out


def breakdown(runs: list[dict]) -> list[list]:
    """[phase, median seconds since sending, median seconds since the previous phase].

    Only phases every run reached are kept, in the order of their median times.
    """
    by_phase: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        for name, at_s, step_s in run.get("timeline", []):
            by_phase.setdefault(name, []).append((at_s, step_s))
    rows = [[name, median([a for a, _ in v]), median([d for _, d in v])]
            for name, v in by_phase.items() if len(v) == len(runs)]
    return sorted(rows, key=lambda r: r[1])


def _bound_note(rows: list[list], imports: dict | None) -> str:
    """One line: the longest steps to the first update, and the heaviest imports."""
    longest = sorted(rows, key=lambda r: -r[2])[:3]
    text = "longest steps: " + "; ".join(f"{name} {1000 * step:.0f} ms" for name, _, step in longest)
    if imports:
        heavy = ", ".join(f"{m} {ms:.0f}" for m, ms in imports["own_ms_by_package"][:6])
        text += f". Imports in the cell (own ms under -X importtime): {heavy}"
    return text


def run_first_update(ctx: Context) -> Outcome:
    """Time from sending ``%load_ext nbgpu`` + ``%gpumon`` to the first widget update."""
    from .kernel_probe import first_panel_update

    precompiled = precompile(REPO_ROOT / "nbgpu")
    try:
        res = first_panel_update(_env(), repeats=1 if ctx.quick else 3,
                                 source=None if ctx.gpus.usable else "sim")
    except ImportError as exc:
        raise UnavailableError(f"jupyter_client/ipykernel not installed: {exc}") from exc
    out = Outcome(raw=res)
    if res.get("unavailable"):
        raise UnavailableError(res["unavailable"])
    out.targets.append(Target("%load_ext + %gpumon to first panel update (median)",
                              median(res["first_update_s"]), "s", "<=", FIRST_UPDATE_TARGET_S))
    out.figure("to panel displayed (median)", median(res["displayed_s"]), "s")
    rows = breakdown(res["runs"])
    res["breakdown"] = rows
    out.notes.append(_bound_note(rows, res.get("imports")))
    res["nbgpu_precompiled"] = precompiled
    out.notes.append(_bytecode_note(res["runs"], precompiled))
    return out


def _bytecode_note(runs: list[dict], precompiled: bool) -> str:
    """One line: whether nbgpu's bytecode was written ahead, and what each run compiled anyway."""
    ahead = ("nbgpu's bytecode written before the runs, as pip install writes it" if precompiled
             else "nbgpu's bytecode could not be written ahead (a read-only tree): each run may compile it")
    seen = [r.get("compiled_in_cell_by_package") for r in runs]
    if any(s is None for s in seen):
        return ahead + "; what the runs compiled is not known"
    each = "; ".join(", ".join(f"{pkg} {n}" for pkg, n in s.items()) or "none" for s in seen)
    off = any(r.get("dont_write_bytecode") for r in runs)
    return (f"{ahead}. Modules the cell compiled from source, per run: {each}"
            + (" (bytecode writing is off in the kernel, so those are compiled in every fresh kernel)"
               if off and any(seen) else ""))
