"""``nbgpu record``: run a command, sample the GPUs meanwhile, write the timeline as it grows."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time

from ..recorder import Recorder
from ..sampler import Sampler
from .status import status_lines, summarize_frame, summary_text

FLUSH_EVERY_S = 1.0


class _LiveStatus:
    """Redraws one line per GPU in place on a terminal (stderr), at most once a second."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.shown = 0

    def draw(self, lines: list[str]) -> None:
        up = f"\x1b[{self.shown}F" if self.shown else ""
        self.stream.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
        self.stream.flush()
        self.shown = len(lines)

    def clear(self) -> None:
        if self.shown:
            self.stream.write(f"\x1b[{self.shown}F\x1b[J")
            self.stream.flush()
            self.shown = 0


def exit_code(returncode: int) -> int:
    """A child's exit status as a shell reports it (128 + N when killed by signal N)."""
    return 128 - returncode if returncode < 0 else returncode


def run_record(cmd: list[str], source: str, interval: float, output: str, quiet: bool = False) -> int:
    """Run ``cmd`` while recording; returns the command's exit code."""
    sampler = Sampler(source, interval=interval)
    try:
        recorder = Recorder(sampler, output, header={"command": cmd})
    except Exception:
        sampler.stop()
        raise
    sampler.start()
    started, cpu_start = time.monotonic(), cpu_seconds()
    sampler.mark("command started")
    interrupted = []

    def on_signal(signum: int, _frame) -> None:
        interrupted.append(signum)
        if signum == signal.SIGTERM and proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    proc = None
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    live = _LiveStatus(sys.stderr) if sys.stderr.isatty() and not quiet else None
    try:
        try:
            proc = subprocess.Popen(cmd)
        except OSError as exc:
            sampler.mark("command failed to start")
            print(f"nbgpu record: cannot run {cmd[0]!r}: {exc.strerror or exc}; check the command "
                  "and your PATH", file=sys.stderr)
            return 127
        while True:
            try:
                proc.wait(timeout=FLUSH_EVERY_S)
                break
            except subprocess.TimeoutExpired:
                pass
            recorder.flush()
            if live is not None:
                live.draw(status_lines(sampler))
        code = exit_code(proc.returncode)
        sampler.mark(f"command exited with code {code}")
        return code
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if live is not None:
            live.clear()
        time.sleep(min(0.05, interval))
        sampler.stop()
        path = recorder.close()
        if not quiet:
            wall_s = time.monotonic() - started
            cpu_pct = 100.0 * (cpu_seconds() - cpu_start) / max(wall_s, 1e-9)
            _print_summary(sampler, path, recorder.rows_written, wall_s, cpu_pct)


def cpu_seconds() -> float:
    """CPU seconds this process (the recorder, not the command it runs) has used so far."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _print_summary(sampler: Sampler, path: str, rows: int, wall_s: float, cpu_pct: float) -> None:
    df = sampler.timeline.to_pandas(host=False)
    lines = summary_text(summarize_frame(df))
    label = " (SIMULATED)" if sampler.simulated else ""
    print(f"nbgpu record: {rows} rows from {len(sampler.devices)} GPU(s){label} written to "
          f"{os.path.abspath(path)}", file=sys.stderr)
    for line in lines:
        print("  " + line, file=sys.stderr)
    print(f"  recorder CPU: {cpu_pct:.2f}% of one core while the command ran ({wall_s:.1f} s)",
          file=sys.stderr)
