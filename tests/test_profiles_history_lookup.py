"""Finding a cell's last run: the same answers as a scan of the history, at a cost that does not
grow with the history (each record's text is hashed once)."""

from __future__ import annotations

import json

import pytest

from nbgpu.profiles import history
from nbgpu.profiles.history import CellRecord, SavedRecord, add, earlier


class _Cap:
    """The little of a capture a record reads to be found."""

    def __init__(self, t: float) -> None:
        self.start_time, self.end_time, self.status = t, t + 1.0, "ok"


@pytest.fixture(autouse=True)
def empty_history():
    history.clear()
    yield
    history.clear()


def _rec(n: int, source: str, cell_id: str | None = None) -> CellRecord:
    return CellRecord(n, cell_id, source, _Cap(float(n)))


def previous(record):
    """The newest earlier run of the cell, as the cell report's comparison takes it."""
    runs = earlier(record, 1)
    return runs[-1] if runs else None


def _scan(record):
    """What previous() should give: the newest earlier record of the same cell id or the same text."""
    items = history.records()
    at = next((i for i, r in enumerate(items) if r is record), len(items))
    for rec in reversed(items[:at]):
        if (record.cell_id and rec.cell_id == record.cell_id) or rec.source_hash == record.source_hash:
            return rec
    return None


def test_previous_finds_the_newest_earlier_run_by_cell_id_or_text():
    a = _rec(1, "x = 1", "c1")
    b = _rec(2, "y = 2", "c2")
    c = _rec(3, "x = 1  # edited", "c1")  # same cell, new text
    d = _rec(4, "y = 2", "c9")  # same text, another cell
    e = _rec(5, "z = 3")
    for r in (a, b, c, d, e):
        add(r)
    assert previous(a) is None
    assert previous(c) is a
    assert previous(d) is b
    assert previous(e) is None
    again = _rec(6, "x = 1  # edited", "c1")
    add(again)
    assert previous(again) is c
    for r in (a, b, c, d, e, again):
        assert previous(r) is _scan(r)


def test_previous_of_a_record_not_in_the_history_is_the_newest_match():
    add(_rec(1, "x = 1"))
    newest = _rec(2, "x = 1")
    add(newest)
    stray = _rec(3, "x = 1")  # never added
    assert previous(stray) is newest


def test_records_dropped_from_a_full_history_are_never_found(monkeypatch):
    monkeypatch.setattr(history, "_records", history.deque(maxlen=3))
    history.clear()
    old = _rec(1, "x = 1")
    add(old)
    for n in range(2, 5):
        add(_rec(n, f"other {n}"))
    last = _rec(5, "x = 1")
    add(last)
    assert old not in history.records()
    assert previous(last) is None


def test_saved_records_from_an_earlier_kernel_serve_as_last_runs(tmp_path):
    path = tmp_path / "history.jsonl"
    line = {"v": 1, "source_hash": history.source_hash("x = 1"), "cell_id": None,
            "execution_count": 7, "start": 1.0}
    path.write_text(json.dumps(line) + "\n")
    history.keep_history(path)
    history.keep_history(False)  # the saved cells stay in the history; nothing more is written
    rec = _rec(8, "x = 1")
    add(rec)
    found = previous(rec)
    assert isinstance(found, SavedRecord) and found.execution_count == 7
    assert found is _scan(rec)


def test_a_long_history_is_not_hashed_again_for_each_new_cell(monkeypatch):
    for n in range(500):
        add(_rec(n, f"cell number {n}"))
    calls = []
    real = history.source_hash
    monkeypatch.setattr(history, "source_hash", lambda text: calls.append(text) or real(text))
    rec = _rec(501, "a cell never run before")
    add(rec)
    assert previous(rec) is None
    assert len(calls) <= 1  # the new cell's own text, once
