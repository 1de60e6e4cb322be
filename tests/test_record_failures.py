"""`nbgpu record` fails cleanly: one line, the command's exit code kept, the file valid."""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys

import pytest

from nbgpu import Sampler, SimulatedGPUs
from nbgpu.errors import FileError
from nbgpu.recorder import Recorder

NBGPU = [sys.executable, "-m", "nbgpu.cli"]
PY = sys.executable


def record(out, child: str, timeout: float = 90, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*NBGPU, "record", "--source", "sim", "--interval", "0.2", "-o", str(out), "--",
                           PY, "-c", child], capture_output=True, text=True, timeout=timeout, **kw)


def nbgpu_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("nbgpu record:")]


@pytest.mark.parametrize("kind", ["folder", "fifo", "read-only"])
def test_an_unwritable_output_is_one_line_before_the_command_starts(tmp_path, kind):
    marker = tmp_path / "ran"
    out = tmp_path / "out.jsonl"
    if kind == "folder":
        out.mkdir()
    elif kind == "fifo":
        os.mkfifo(out)
    elif os.geteuid() == 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        out = folder / "out.jsonl"
    else:
        os.chmod(tmp_path, 0o500)
    try:
        done = record(out, f"open({str(marker)!r}, 'w').close()")
    finally:
        if kind == "read-only":
            if os.geteuid() == 0:
                subprocess.run(["umount", str(out.parent)], check=True)
            else:
                os.chmod(tmp_path, 0o700)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and "cannot write" in lines[0], done.stderr
    assert not marker.exists()  # the command never started


def test_a_full_disk_mid_run_is_one_line_and_keeps_the_exit_code(tmp_path):
    """The kernel refuses writes past 12 kB (RLIMIT_FSIZE): recording stops, the command runs on."""
    out = tmp_path / "run.jsonl"
    marker = tmp_path / "finished"
    limit = 12_000

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    child = f"import time; time.sleep(4); open({str(marker)!r}, 'w').close(); raise SystemExit(5)"
    done = record(out, child, preexec_fn=small_files)
    assert done.returncode == 5, done.stderr
    assert marker.exists()  # waited for, not killed
    lines = nbgpu_lines(done.stderr)
    assert len(lines) == 1 and str(out) in lines[0] and "recording stopped" in lines[0], done.stderr
    assert ".tmp" not in lines[0]
    size = out.stat().st_size
    assert 0 < size <= limit
    with open(out) as fh:
        records = [json.loads(line) for line in fh]  # every line whole
    assert records[0]["event"] == "run" and any("gpu_id" in r and "event" not in r for r in records)


def test_recorder_write_failure_leaves_a_true_count_and_a_valid_file(tmp_path, monkeypatch):
    s = Sampler(SimulatedGPUs(count=2), interval=0.2, host=False)
    out = tmp_path / "run.jsonl"
    rec = Recorder(s, str(out))
    now = 1.9e9
    for i in range(5):
        s.step(now + 0.2 * i)
    s.request("edge")  # as nbgpu record asks before each flush: the buffers drained up to now
    s.step(now + 0.9)
    rec.flush()
    good = rec.rows_written
    assert good > 0
    for i in range(5, 10):
        s.step(now + 0.2 * i)
    s.request("edge")
    s.step(now + 1.9)
    real_write = os.write
    budget = [3]

    def fills_up(fd, data):
        budget[0] -= 1
        if budget[0] < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", fills_up)
    with pytest.raises(FileError) as info:
        rec.flush()
    monkeypatch.undo()
    assert str(out) in str(info.value) and "disk is full" in str(info.value)
    rec.abandon()
    with open(out) as fh:
        rows = [r for r in map(json.loads, fh) if "event" not in r]
    assert len(rows) == rec.rows_written == good + 3
    s.stop()


def test_events_are_never_skipped_or_repeated_after_the_deque_wraps(tmp_path):
    s = Sampler(SimulatedGPUs(count=1), interval=0.2, host=False)
    out = tmp_path / "run.jsonl"
    rec = Recorder(s, str(out))
    maxlen = s.store.events.maxlen
    labels = []
    for batch in range(12):
        for i in range(maxlen // 5):
            label = f"m{batch}-{i}"
            s.mark(label, t=1.9e9 + len(labels))
            labels.append(label)
        rec.flush()
    rec.close()
    s.stop()
    with open(out) as fh:
        written = [r["label"] for r in map(json.loads, fh) if r.get("event") == "mark"]
    assert len(labels) > 2 * maxlen
    assert written == labels
