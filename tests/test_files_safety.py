"""Exports never destroy what is at the path, and fail with one line naming the user's path."""

from __future__ import annotations

import contextlib
import errno
import inspect
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from nbgpu.errors import FileError, NbgpuError
from nbgpu.files import LineFile, write_csv, write_jsonl, write_parquet
from nbgpu.runfile import load_run

ROOT = os.geteuid() == 0
WRITERS = {"csv": write_csv, "jsonl": write_jsonl, "parquet": write_parquet}


def frame(rows: int = 20) -> pd.DataFrame:
    """A timeline frame as ``Timeline.to_pandas`` gives it: UTC times, a GPU key, metric columns."""
    t = pd.to_datetime(1.7e9 + np.arange(rows) * 0.5, unit="s", utc=True)
    return pd.DataFrame({"time": t, "gpu": np.arange(rows) % 2, "util_pct": np.linspace(0, 99, rows),
                         "mem_used_bytes": np.arange(rows) * 2.0**30, "power_w": 100.0 + np.arange(rows)})


def one_line(exc: BaseException, path: str) -> None:
    text = str(exc)
    assert isinstance(exc, NbgpuError) and isinstance(exc, FileError)
    assert "\n" not in text and path in text, text
    assert ".tmp" not in text and "nbgpu-" not in text, text
    assert exc.path == path


def no_temp_files(folder) -> None:
    assert not [n for n in os.listdir(folder) if n.endswith(".tmp")], os.listdir(folder)


@contextlib.contextmanager
def tmpfs(where, options: str):
    """A tmpfs mounted at ``where`` (root only; skips where mounting is not allowed)."""
    os.makedirs(where, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_a_fifo_is_refused_and_stays_a_fifo(tmp_path, fmt):
    path = str(tmp_path / f"pipe.{fmt}")
    os.mkfifo(path)
    with pytest.raises(FileError) as info:
        WRITERS[fmt](frame(), path)
    one_line(info.value, path)
    assert "FIFO" in str(info.value)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
    no_temp_files(tmp_path)


def test_a_socket_is_refused(tmp_path):
    path = str(tmp_path / "s.csv")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(path)
        with pytest.raises(FileError) as info:
            write_csv(frame(), path)
    one_line(info.value, path)
    assert "socket" in str(info.value) and stat.S_ISSOCK(os.lstat(path).st_mode)


@pytest.mark.skipif(not ROOT, reason="creating a device node needs root")
def test_a_character_device_is_refused_and_stays_a_device(tmp_path):
    path = str(tmp_path / "full.csv")
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # the numbers of /dev/full
    with pytest.raises(FileError) as info:
        write_csv(frame(), path)
    one_line(info.value, path)
    assert "character device" in str(info.value)
    st = os.lstat(path)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 7)


def test_a_symlink_is_followed_and_its_target_written(tmp_path):
    target = tmp_path / "data" / "run.csv"
    target.parent.mkdir()
    target.write_text("old\n")
    os.chmod(target, 0o640)
    link = tmp_path / "latest.csv"
    link.symlink_to(target)
    write_csv(frame(), str(link))
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert pd.read_csv(target)["util_pct"].iloc[-1] == pytest.approx(99.0)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    no_temp_files(target.parent)
    no_temp_files(tmp_path)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_new_files_get_the_umask_mode(tmp_path, umask):
    old = os.umask(umask)
    try:
        for fmt, write in WRITERS.items():
            path = tmp_path / f"new.{fmt}"
            write(frame(), str(path))
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask, fmt
    finally:
        os.umask(old)


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o664, 0o444, 0o200])
def test_existing_files_keep_their_mode(tmp_path, mode):
    for fmt, write in WRITERS.items():
        path = tmp_path / f"old.{fmt}"
        path.write_text("x")
        os.chmod(path, mode)
        write(frame(), str(path))
        assert stat.S_IMODE(os.stat(path).st_mode) == mode, fmt
        assert path.stat().st_size > 1


def test_a_folder_an_empty_path_and_a_missing_folder_are_one_line(tmp_path):
    for path in (str(tmp_path), str(tmp_path / "no" / "such" / "dir" / "x.csv")):
        with pytest.raises(FileError) as info:
            write_csv(frame(), path)
        one_line(info.value, path)
    with pytest.raises(FileError) as info:
        write_jsonl(frame(), "")
    assert "empty" in str(info.value) and "\n" not in str(info.value)


def test_a_read_only_folder_is_one_line_naming_the_path(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    keep = folder / "keep.csv"
    keep.write_text("precious\n")
    with contextlib.ExitStack() as stack:
        if ROOT:  # root writes through permission bits: use a read-only filesystem
            stack.enter_context(tmpfs(folder, "ro,size=1m"))
            path = str(folder / "run.csv")
        else:
            os.chmod(folder, 0o500)
            stack.callback(os.chmod, folder, 0o700)
            path = str(keep)
        with pytest.raises(FileError) as info:
            write_csv(frame(), path)
        one_line(info.value, path)
        assert "read-only" in str(info.value) or "permission" in str(info.value)
    assert keep.read_text() == "precious\n"


@pytest.mark.skipif(not ROOT, reason="mounting a small filesystem needs root")
def test_a_full_disk_keeps_the_old_file_and_names_the_path(tmp_path):
    small = tmp_path / "small"
    with tmpfs(small, "size=64k"):
        path = small / "run.jsonl"
        write_jsonl(frame(5), str(path))
        before = path.read_bytes()
        with pytest.raises(FileError) as info:
            write_jsonl(frame(5000), str(path))
        one_line(info.value, str(path))
        assert "disk is full" in str(info.value)
        assert path.read_bytes() == before
        no_temp_files(small)


def test_a_file_size_limit_fails_cleanly_in_a_real_process(tmp_path):
    """The kernel refuses the write (RLIMIT_FSIZE, EFBIG): one line, the old file intact."""
    path = tmp_path / "run.csv"
    write_csv(frame(5), str(path))
    before = path.read_bytes()
    script = textwrap.dedent(f"""
        import resource, sys
        import numpy as np, pandas as pd
        from nbgpu.errors import FileError
        from nbgpu.files import write_csv
        exec({inspect.getsource(frame)!r})  # this module's frame(), without importing the module
        big = frame(5000)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        try:
            write_csv(big, {str(path)!r})
        except FileError as exc:
            print(exc)
            sys.exit(9)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 9, done.stderr
    line = done.stdout.strip()
    assert line.count("\n") == 0 and str(path) in line and "ulimit" in line and ".tmp" not in line
    assert path.read_bytes() == before
    no_temp_files(tmp_path)


def test_line_file_cuts_back_to_the_last_whole_line_on_a_full_disk(tmp_path, monkeypatch):
    path = str(tmp_path / "run.jsonl")
    out = LineFile(path)
    for i in range(3):
        out.write(json.dumps({"n": i}))
    real_write = os.write
    calls = []

    def half_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(FileError) as info:
        out.write(json.dumps({"n": 3, "pad": "x" * 50}))
    monkeypatch.undo()
    one_line(info.value, path)
    assert "disk is full" in str(info.value)
    out.close()
    with open(path) as fh:
        assert [json.loads(line)["n"] for line in fh] == [0, 1, 2]


def test_parquet_carries_events_in_its_metadata(tmp_path):
    events = [{"timestamp": "2026-01-01T00:00:00+00:00", "event": "run", "command": ["python", "x.py"]},
              {"timestamp": "2026-01-01T00:00:01+00:00", "event": "mark", "label": "epoch 1"}]
    path = str(tmp_path / "run.parquet")
    write_parquet(frame(), path, events=events)
    run = load_run(path)
    assert run.header["command"] == ["python", "x.py"]
    assert [label for _, label in run.marks()] == ["epoch 1"]
    assert len(run.frame) == 20


def test_parquet_takes_cards_and_mig_slices_in_one_file(tmp_path):
    df = frame(4)
    df["gpu"] = pd.Series([0, "0/1", 1, "0/1"], dtype=object)
    path = str(tmp_path / "mig.parquet")
    write_parquet(df, path)
    assert sorted(load_run(path).frame["gpu"]) == ["0", "0/1", "0/1", "1"]
