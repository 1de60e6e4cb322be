"""``nbgpu record``: run a command, sample the GPUs meanwhile, write the timeline as it grows.
A failed write stops the recording (the file valid to its last line), never the command; on
Linux the command gets SIGTERM if the recorder is killed."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from ..errors import FileError
from ..recorder import Recorder
from ..runfile import load_run
from ..sampler import Sampler
from ..units import fmt_celsius, fmt_pct, fmt_used_of, fmt_watts
from .report import summarize_run, summary_lines
from .shared_options import shown

FLUSH_EVERY_S = 1.0
PR_SET_PDEATHSIG = 1


def status_lines(sampler: Sampler) -> list[str]:
    """One line per GPU with its newest util, memory (GiB), power and temperature."""
    lines = []
    for row in sampler.latest():
        mem = f"{fmt_used_of(row.get('mem_used_bytes'), row.get('mem_total_bytes'))} GiB"
        power = f"{fmt_watts(row.get('power_w'))}/{fmt_watts(row.get('power_limit_w'))}"
        state = ("  LOST" if row["state"] == "lost" else "") + ("  SIMULATED" if sampler.simulated else "")
        lines.append(f"GPU {row['gpu']:<4} util {fmt_pct(row.get('util_pct')):>4}  mem {mem:<16}"
                     f" power {power:<12} {fmt_celsius(row.get('temp_c'))}{state}")
    return lines


def _redraw(drawn: int, lines: list[str]) -> int:
    """Draw ``lines`` on stderr over the ``drawn`` lines drawn before; how many are drawn now."""
    up = f"\x1b[{drawn}F\x1b[J" if drawn else ""
    sys.stderr.write(up + "".join(f"\x1b[2K{shown(line)}\n" for line in lines))
    sys.stderr.flush()
    return len(lines)


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to send the child SIGTERM when this process dies; else None."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the recorder died before the call: act as the signal would
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _write(step: Callable[[], object], recorder: Recorder, failed: list, running: bool) -> None:
    """Run a write ``step`` of ``recorder``; if it fails, say so in one line and stop recording
    (the file keeps what it holds) but let the command run on."""
    try:
        step()
    except FileError as exc:
        failed.append(exc)
        recorder.abandon()
        kept = "the file" if recorder.journal == recorder.path else recorder.journal
        then = "; waiting for the command to finish" if running else ""
        print(f"nbgpu record: {exc}; recording stopped, {kept} is valid up to its last complete line{then}",
              file=sys.stderr, flush=True)


def _cannot_run(name: str, why: str, kept: str) -> int:
    print(f"nbgpu record: cannot run {name!r}: {why}; check the command and your PATH{kept}", file=sys.stderr)
    return 127


def _temporary_beside(output: str) -> str | None:
    """A new empty file beside an existing regular ``output`` (not .parquet), same extension; or None."""
    if not os.path.isfile(output) or os.path.islink(output) or output.lower().endswith(".parquet"):
        return None
    folder, name = os.path.split(os.path.abspath(output))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".nbgpu-record-", suffix="-" + name, dir=folder)
    except OSError:
        return None  # the Recorder will say in one line why the folder cannot be written
    os.close(fd)
    return tmp


def _discard(path: str | None) -> None:
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)


def run_record(cmd: list[str], source: str, interval: float, output: str, quiet: bool = False) -> int:
    """Run ``cmd`` while recording; its exit code (127, ``output`` untouched, if it is not found)."""
    if shutil.which(cmd[0]) is None:
        return _cannot_run(cmd[0], "no such command or not executable", f" ({output} left as it was)")
    sampler = Sampler(source, interval=interval)
    # An existing file is replaced only once the command has started (exec can still fail).
    pending = _temporary_beside(output)
    try:
        recorder = Recorder(sampler, pending or output, header={"command": cmd})
    except BaseException:
        _discard(pending)
        sampler.stop()
        raise
    failed: list[FileError] = []
    sampler.start()
    started, cpu_start = time.monotonic(), time.process_time()  # the recorder's own CPU
    sampler.mark("command started")
    proc = None

    def on_signal(signum: int, _frame) -> None:  # Ctrl-C reaches the command; SIGTERM is passed on
        if signum == signal.SIGTERM and proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    live = sys.stderr.isatty() and not quiet
    drawn = 0
    try:
        try:
            proc = subprocess.Popen(cmd, preexec_fn=die_with_parent())
        except OSError as exc:
            sampler.mark("command failed to start")
            if pending:
                recorder.abandon()
                quiet = True  # no recording to summarize
                _discard(pending)
            kept = f" ({output} left as it was)" if pending else ""
            return _cannot_run(cmd[0], exc.strerror or str(exc), kept)
        try:  # the recording, open and growing, takes the place of the file it replaces
            if pending:
                os.replace(pending, output)
                recorder.path = recorder.journal = recorder._file.path = output
        except OSError as exc:
            print(f"nbgpu record: cannot replace {output} ({exc.strerror or exc}); recording to {pending}",
                  file=sys.stderr, flush=True)
        while True:
            # Buffers drained during the wait, so the flush writes every tick up to about now.
            sampler.request("edge")
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=FLUSH_EVERY_S)
                break
            if not failed:
                _write(recorder.flush, recorder, failed, running=True)
            if live and not failed:  # a terminal showing the newest values: someone looks
                sampler.watch()
                drawn = _redraw(drawn, status_lines(sampler))
        code = 128 - proc.returncode if proc.returncode < 0 else proc.returncode  # as a shell says it
        sampler.mark(f"command exited with code {code}")
        return code
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if drawn:
            _redraw(drawn, [])
        time.sleep(min(0.05, interval))
        sampler.stop()
        if not failed:
            _write(recorder.close, recorder, failed, running=False)
        if not quiet and not failed:
            wall_s = time.monotonic() - started
            cpu_pct = 100.0 * (time.process_time() - cpu_start) / max(wall_s, 1e-9)
            _print_summary(sampler, recorder, wall_s, cpu_pct)


def _print_summary(sampler: Sampler, recorder: Recorder, wall_s: float, cpu_pct: float) -> None:
    """The figures ``nbgpu report`` gives for the file just written (read back: one code path)."""
    label = " (SIMULATED)" if sampler.simulated else ""
    print(f"nbgpu record: {recorder.rows_written} rows from {len(sampler.devices)} GPU(s){label} written to "
          f"{os.path.abspath(recorder.path)}", file=sys.stderr)
    for line in summary_lines(summarize_run(load_run(recorder.path))):
        print(("  SIMULATED " if sampler.simulated else "  ") + shown(line), file=sys.stderr)
    print(f"  recorder CPU: {cpu_pct:.2f}% of one core while the command ran ({wall_s:.1f} s)",
          file=sys.stderr)
