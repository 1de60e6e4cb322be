"""Record the labelled diagnostics suite (issue 28) in a real IPython kernel.

Starts a kernel (jupyter_client), loads nbgpu, opens ``%gpumon`` and runs the cells of
``tests/data/suite/expected.json`` in order: ``setup`` entries plainly, named ones under
``%%gpumon``. The kernel's sampler is recorded from the start with nbgpu's ``Recorder``
(readings, marks, alerts and whatever else the recording format carries); after each
profiled cell a hidden call saves what its report saw (its span, status, the findings
judged in the cell with the readings they rest on, ``cap.where()`` where it exists).

At the end the session recording is cut into one recording per cell: the cell's readings
plus ``--pre`` seconds before it (so carry-over from the cell before is replayed too) and
one ``cell`` event line holding the span and the live findings. Everything goes under
``--out`` (default ``$OUT``, else ./suite-out): ``session.jsonl``, ``cells.json``,
``cell-NAME.jsonl`` and ``suite.log``.

    python3 scripts/gpu/diagnostics_suite.py --out $OUT            # on the GPU machine
    python3 scripts/gpu/diagnostics_suite.py --source sim:1 --out /tmp/s   # smoke run, CPU torch
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import queue
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SUITE = os.path.join(ROOT, "tests", "data", "suite", "expected.json")

# Defined in the kernel once: dumps what a profiled cell's capture saw (runs silently).
KERNEL_HELPERS = r'''
def _suite_dump(name, path, recorder):
    import json, math
    from nbgpu.profiles.history import records
    rec = records()[-1]
    cap = rec.capture
    t0, t1 = cap.start_time, cap.end_time
    found = []
    for a in cap.alerts:
        found.append({"rule": a.rule, "severity": a.severity, "gpu": a.gpu, "start_s": a.start,
                      "end_s": a.end, "message": a.message, "evidence": a.evidence,
                      "made_s": [h[0] for h in a.held], "since_s": [h[1] for h in a.held]})
    where = None
    fn = getattr(cap, "where", None)
    if callable(fn):
        try:
            w = fn()
            where = {"rows": w.to_dict("records"), "attrs": dict(w.attrs)} if hasattr(w, "attrs") else w
        except Exception as exc:
            where = {"error": repr(exc)}
    try:
        line = cap.one_line()
    except Exception as exc:
        line = repr(exc)
    try:
        rows = [{k: v for k, v in r.items() if k != "alerts"} for r in cap.summary_rows]
    except Exception as exc:
        rows = [{"error": repr(exc)}]
    out = {"name": name, "start_s": t0, "end_s": t1, "status": cap.status, "error": cap.error,
           "execution_count": rec.execution_count, "one_line": line, "findings": found,
           "where": where, "summary": rows}
    with open(path, "a") as fh:
        fh.write(json.dumps(out, default=str) + "\n")
    recorder.flush()


def _suite_close(recorder, out_dir):
    """Close the recording; keep every alert (with its findings) and the native readings."""
    import json, os
    from nbgpu import session
    from nbgpu.files import write_jsonl
    recorder.close()
    s = session.shared_sampler()
    alerts = [{"rule": a.rule, "severity": a.severity, "gpu": a.gpu, "start_s": a.start, "end_s": a.end,
               "message": a.message, "held": [list(h[:3]) for h in a.held]} for a in s.alert_list()]
    with open(os.path.join(out_dir, "alerts.json"), "w") as fh:
        json.dump(alerts, fh, default=str)
    write_jsonl(s.timeline.to_pandas(resolution="native"), os.path.join(out_dir, "session-native.jsonl"),
                filled=False)
'''


def _log(fh, text: str) -> None:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S")
    line = f"[{stamp}] {text}"
    print(line, flush=True)
    fh.write(line + "\n")
    fh.flush()


class Kernel:
    """A real IPython kernel and a client; ``run`` returns (status, text it printed)."""

    def __init__(self) -> None:
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="python3")

    def run(self, code: str, timeout: float, silent: bool = False) -> tuple[str, str]:
        kc = self.kc
        msg_id = kc.execute(code, silent=silent, store_history=not silent, stop_on_error=False)
        texts: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.km.interrupt_kernel()
                return "timeout", "".join(texts)
            try:
                m = kc.get_iopub_msg(timeout=min(left, 5.0))
            except queue.Empty:
                if not self.km.is_alive():
                    return "dead", "".join(texts)
                continue
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = m["msg_type"], m["content"]
            if kind == "status" and content["execution_state"] == "idle":
                break
            if kind == "stream":
                texts.append(content["text"])
            elif kind == "error":
                texts.append(f"{content['ename']}: {content['evalue']}\n")
            elif kind in ("display_data", "execute_result"):
                plain = content.get("data", {}).get("text/plain", "")
                if plain:
                    texts.append(plain[:400] + "\n")
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=30)
        return reply["content"]["status"], "".join(texts)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel()


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat()


def _epoch(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def split_cells(session: str, cells: list[dict], out_dir: str, pre_s: float,
                post_s: float = 2.0, trim: bool = False) -> list[str]:
    """One recording per cell: the run header, lines within [start - pre_s, end + post_s], and a
    ``cell`` event with the span and the live findings. Returns the paths written. ``trim``
    drops the monitoring script's duplicate keys (``gpu_util_percent``, ...: a reader takes
    nbgpu's own columns) to keep the files small."""
    from nbgpu.files import LEGACY_KEYS

    with open(session, encoding="utf-8") as fh:
        lines = [json.loads(raw) for raw in fh if raw.strip()]
    if trim:
        lines = [{k: v for k, v in rec.items() if k not in LEGACY_KEYS} if "event" not in rec else rec
                 for rec in lines]
    header = [rec for rec in lines if rec.get("event") == "run"][:1]
    body = [rec for rec in lines if rec.get("event") != "run"]
    stamps = [_epoch(rec["timestamp"]) for rec in body]
    paths = []
    for cell in cells:
        t0, t1 = cell["start_s"], cell["end_s"]
        if t1 != t1:  # NaN: the cell never finished
            continue
        keep = [rec for rec, t in zip(body, stamps, strict=True) if t0 - pre_s <= t <= t1 + post_s]
        event = {"timestamp": _iso(t0), "event": "cell", "label": cell["name"], "start": _iso(t0),
                 "end": _iso(t1), "status": cell["status"], "findings": cell["findings"],
                 "where": cell.get("where"), "one_line": cell.get("one_line")}
        path = os.path.join(out_dir, f"cell-{cell['name']}.jsonl")
        with open(path, "w", encoding="utf-8") as fh:
            for rec in [*header, event, *keep]:
                fh.write(json.dumps(rec, default=str) + "\n")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "suite-out")
    p.add_argument("--source", default=None, help="%%gpumon --source (e.g. sim:1); default: the real GPUs")
    p.add_argument("--suite", default=SUITE)
    p.add_argument("--only", default=None, help="comma-separated cell names (setup entries always run)")
    p.add_argument("--pre", type=float, default=30.0, help="seconds before each cell kept in its recording")
    p.add_argument("--cell-timeout", type=float, default=150.0)
    p.add_argument("--split-from", default=None, metavar="DIR",
                   help="run nothing: cut DIR/session.jsonl into cell recordings under --out "
                        "(with --pre, the duplicate keys dropped)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.split_from:
        with open(os.path.join(args.split_from, "cells.json"), encoding="utf-8") as fh:
            cells = json.load(fh)["cells"]
        paths = split_cells(os.path.join(args.split_from, "session.jsonl"), cells, args.out, args.pre,
                            trim=True)
        print(f"{len(paths)} cell recordings under {args.out}")
        return 0
    with open(args.suite, encoding="utf-8") as fh:
        suite = json.load(fh)
    only = set(args.only.split(",")) if args.only else None
    session = os.path.join(args.out, "session.jsonl")
    cells_path = os.path.join(args.out, "cells.json")
    dumps = os.path.join(args.out, "cells.partial.jsonl")
    for path in (session, dumps):
        if os.path.exists(path):
            os.unlink(path)
    log = open(os.path.join(args.out, "suite.log"), "a", encoding="utf-8")  # noqa: SIM115 (whole run)
    _log(log, f"suite {args.suite}, out {args.out}, source {args.source or 'the GPUs'}")
    kernel = Kernel()
    failed: list[str] = []
    try:
        gpumon = "%gpumon" + (f" --source {args.source}" if args.source else "")
        start = ("%load_ext nbgpu\n" + gpumon + "\n" + KERNEL_HELPERS +
                 "\nfrom nbgpu import session as _suite_session\n"
                 "from nbgpu.recorder import Recorder as _SuiteRec\n"
                 f"_suite_rec = _SuiteRec(_suite_session.shared_sampler(), {session!r}, "
                 "header={'command': 'scripts/gpu/diagnostics_suite.py'})\n")
        status, text = kernel.run(start, 120)
        _log(log, f"start: {status} {text.strip()[:300]}")
        if status != "ok":
            return 2
        for entry in suite["cells"]:
            if "setup" in entry:
                status, text = kernel.run("\n".join(entry["setup"]), args.cell_timeout)
                _log(log, f"setup: {status} {text.strip()[:400]}")
                if status == "dead":
                    failed.append("setup (kernel died)")
                    break
                continue
            name = entry["name"]
            if only is not None and name not in only:
                continue
            t = time.time()
            status, text = kernel.run("%%gpumon\n" + "\n".join(entry["source"]), args.cell_timeout)
            _log(log, f"cell {name}: {status} in {time.time() - t:.1f} s: {text.strip()[-600:]}")
            if status in ("dead", "timeout"):
                failed.append(f"{name} ({status})")
                if status == "dead":
                    break
            st, text = kernel.run(f"_suite_dump({name!r}, {dumps!r}, _suite_rec)", 60, silent=True)
            if st != "ok":
                failed.append(f"{name} (dump: {text.strip()[:200]})")
                _log(log, f"dump {name}: {st} {text.strip()[:600]}")
        st, text = kernel.run(f"_suite_close(_suite_rec, {args.out!r})", 120, silent=True)
        _log(log, f"recorder closed: {st} {text.strip()[:200]}")
    finally:
        kernel.close()
    cells = []
    if os.path.exists(dumps):
        with open(dumps, encoding="utf-8") as fh:
            cells = [json.loads(raw) for raw in fh if raw.strip()]
        os.unlink(dumps)
    with open(cells_path, "w", encoding="utf-8") as fh:
        json.dump({"suite": os.path.relpath(args.suite, ROOT), "source": args.source or "nvml",
                   "failed": failed, "cells": cells}, fh, indent=1, default=str)
    paths = split_cells(session, cells, args.out, args.pre) if os.path.exists(session) else []
    for c in cells:
        _log(log, f"{c['name']}: {c['status']}, {c['end_s'] - c['start_s']:.1f} s, found "
             f"{sorted({f['rule'] for f in c['findings']})}")
    _log(log, f"{len(cells)} cells recorded, {len(paths)} cell recordings; failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
