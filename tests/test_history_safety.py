"""The persistent history file (issue 34): shared by several kernels, kept when partly bad,
never a FIFO or someone else's file behind a link, and a failure the notebook user sees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

import nbgpu
from nbgpu import config
from nbgpu.errors import FileError
from nbgpu.profiles import history
from nbgpu.profiles.history import CellRecord, add, keep_history

ROOT = Path(__file__).resolve().parents[1]


class _Cap:
    """A finished capture with no GPU readings: enough for a record to be saved."""

    def __init__(self, t: float) -> None:
        self.start_time, self.end_time, self.status = t, t + 1.0, "ok"
        self.alerts, self.error, self.summary_rows, self.totals = [], None, [], {}
        self.trackers = []  # no nbgpu.track loop

    def series(self, metrics: object) -> dict:
        return {}

    def split(self) -> None:  # no stack samples
        return None


def _rec(n: int, t: float | None = None) -> CellRecord:
    return CellRecord(n, f"cell-{n}", f"x = {n}", _Cap(float(n) if t is None else t))


def _line(n: int, **extra: object) -> str:
    return json.dumps({"v": 1, "execution_count": n, "cell_id": f"old-{n}", "first_line": "y",
                       "source_hash": "abc", "start": 1000.0 + n, "duration_s": 1.0,
                       "status": "ok", **extra})


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv("NBGPU_HISTORY_FILE", raising=False)
    config.reset()
    monkeypatch.setattr(history, "_store", history._Store())
    history.clear()
    yield
    history._store.path = None
    history.clear()
    config.reset()


def _user_warnings(caught: list) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


WRITER = """
import os, sys, time
sys.path.insert(0, {root!r})
from nbgpu.profiles import history
from nbgpu.profiles.history import CellRecord
class Cap:
    def __init__(self, t):
        self.start_time, self.end_time, self.status = t, t + 1.0, "ok"
        self.alerts, self.error, self.summary_rows, self.totals = [], None, [], {{}}
        self.trackers = []
    def series(self, metrics):
        return {{}}
    def split(self):
        return None
history.keep_history({path!r})
while not os.path.exists({go!r}):
    time.sleep(0.005)
for n in range(200):
    history.add(CellRecord(n, "w{who}-%d" % n, "x = %d" % n, Cap({who} * 1000.0 + n)))
"""


def test_two_processes_saving_at_once_keep_every_record(tmp_path):
    path, go = tmp_path / "history.jsonl", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT), path=str(path),
                                                                    go=str(go), who=who)])
             for who in (1, 2)]
    time.sleep(1.0)
    go.touch()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    keep_history(path)
    cells = nbgpu.history()["cell_id"].tolist()
    assert len(cells) == 400 and len(set(cells)) == 400


def test_invalid_utf8_is_skipped_counted_with_one_warning_and_kept(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_bytes((_line(1) + "\n").encode() + b"\xff\xfe broken\n" + (_line(2) + "\n").encode())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        keep_history(path)
    msgs = _user_warnings(caught)
    assert len(msgs) == 1 and "skipped 1" in msgs[0]
    assert nbgpu.history()["execution_count"].tolist() == [1, 2]
    add(_rec(3))
    assert b"\xff\xfe broken" in path.read_bytes()


def test_a_bad_record_is_skipped_and_history_still_reads(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text(_line(1) + "\n" + _line(2, start="yesterday") + "\n" + _line(3) + "\n")
    with pytest.warns(UserWarning, match="skipped 1"):
        keep_history(path)
    add(_rec(4))
    assert nbgpu.history()["execution_count"].tolist() == [1, 3, 4]


def test_lines_nbgpu_does_not_understand_stay_in_the_file(tmp_path):
    path = tmp_path / "history.jsonl"
    lines = ["# my notes", _line(1), json.dumps({"tool": "other"}), json.dumps({"v": 2, "x": 1}),
             _line(2)]
    path.write_text("\n".join(lines) + "\n")
    keep_history(path)
    add(_rec(3))
    kept = path.read_text().splitlines()
    assert kept[:5] == lines and len(kept) == 6


def test_keeping_the_same_file_twice_changes_nothing(tmp_path):
    path = tmp_path / "history.jsonl"
    for n in range(7):
        add(_rec(n))
    keep_history(path)
    keep_history(path)
    assert len(path.read_text().splitlines()) == 7
    assert len(nbgpu.history()) == 7


def _returns_within(fn, seconds: float = 5.0) -> BaseException | None:
    """Run ``fn`` in a thread; fail if it hangs; return what it raised."""
    out: list = []

    def target() -> None:
        try:
            fn()
            out.append(None)
        except BaseException as exc:  # handed back to the test
            out.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert out, "hung on the FIFO"
    return out[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_with_one_line(tmp_path):
    fifo = tmp_path / "history.jsonl"
    os.mkfifo(fifo)
    exc = _returns_within(lambda: keep_history(fifo))
    assert isinstance(exc, FileError) and "FIFO" in str(exc) and "\n" not in str(exc)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_in_the_environment_warns_and_does_not_hang(tmp_path, monkeypatch):
    fifo = tmp_path / "history.jsonl"
    os.mkfifo(fifo)
    monkeypatch.setenv("NBGPU_HISTORY_FILE", str(fifo))
    config.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _returns_within(lambda: add(_rec(1))) is None
    msgs = _user_warnings(caught)
    assert len(msgs) == 1 and "FIFO" in msgs[0]


def test_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    other = tmp_path / "thesis.txt"
    other.write_text("chapter one\n")
    link = tmp_path / "history.jsonl"
    link.symlink_to(other)
    with pytest.raises(FileError, match="symbolic link"):
        keep_history(link)
    add(_rec(1))
    assert other.read_text() == "chapter one\n"


def test_an_unwritable_history_warns_the_user_once(tmp_path):
    folder = tmp_path / "hist"
    keep_history(folder / "history.jsonl")
    shutil.rmtree(folder)
    folder.write_text("")  # the folder is gone: every write fails, as on a read-only disk
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        add(_rec(1))
        add(_rec(2))
    msgs = _user_warnings(caught)
    assert len(msgs) == 1 and str(folder) in msgs[0]
    assert len(nbgpu.history()) == 2


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_folder_warns_the_user_once(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            keep_history(folder / "history.jsonl")
            add(_rec(1))
            add(_rec(2))
        assert len(_user_warnings(caught)) == 1
    finally:
        folder.chmod(0o755)


def test_a_long_file_drops_its_oldest_records_but_no_foreign_line(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "MAX_SAVED", 4)
    path = tmp_path / "history.jsonl"
    path.write_text("# my notes\n")
    keep_history(path)
    for n in range(60):
        add(_rec(n))
    lines = path.read_text().splitlines()
    assert lines[0] == "# my notes" and json.loads(lines[-1])["execution_count"] == 59
    assert path.stat().st_size <= 2048 * 4 + len(lines[-1]) + 1


def test_a_full_disk_warns_once_and_leaves_only_whole_lines(tmp_path):
    """Writes past 3 kB are refused (RLIMIT_FSIZE, as a full disk): one warning, no torn record."""
    path = tmp_path / "history.jsonl"
    code = (
        "import resource, warnings\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (3000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
        "from nbgpu.profiles.history import CellRecord, add, keep_history\n"
        "class C:\n"
        "    def __init__(self, t):\n"
        "        self.start_time, self.end_time, self.status = t, t + 1.0, 'ok'\n"
        "        self.alerts, self.error, self.summary_rows, self.totals = [], None, [], {}\n"
        "        self.trackers = []\n"
        "    def series(self, metrics): return {}\n"
        "    def split(self): return None\n"
        f"keep_history({str(path)!r})\n"
        "for n in range(40):\n"
        "    add(CellRecord(n, f'cell-{n}', f'x = {n}', C(float(n))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("could not be written") == 1, done.stderr
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line)["v"] == 1 for line in lines[:-1])
