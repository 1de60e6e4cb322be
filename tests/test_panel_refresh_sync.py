"""A line's x and y sent in one direct message: exactly what ``hold_sync`` would send, or nothing."""

from __future__ import annotations

import numpy as np
import pytest
from bqplot import LinearScale, Lines

from nbgpu.widgets.sync import send_values, send_xy


def _recorded(mark: Lines) -> list:
    sent: list = []
    mark._send = lambda msg, buffers=None: sent.append((msg, [bytes(memoryview(b)) for b in buffers or ()]))
    return sent


def _pair(x0: np.ndarray, y0: np.ndarray) -> tuple[Lines, Lines]:
    scales = {"x": LinearScale(), "y": LinearScale()}
    return Lines(x=x0, y=y0, scales=scales), Lines(x=x0, y=y0, scales=scales)


def _canonical(sent: list) -> list:
    """Messages with the state's keys in one order (``hold_sync`` sends a set's order)."""
    out = []
    for msg, buffers in sent:
        by_key = dict(zip([p[0] for p in msg["buffer_paths"]], buffers, strict=True))
        keys = sorted(msg["state"])
        out.append((msg["method"], [(k, msg["state"][k]) for k in keys],
                    [[k, "value"] for k in keys], [by_key[k] for k in keys]))
    return out


ROWS = np.arange(32, dtype=np.float32).reshape(4, 8)
WITH_NAN = np.where(ROWS > 20, np.nan, ROWS).astype(np.float32)
CASES = {
    "both new": (ROWS, ROWS + 1, ROWS - 1, ROWS * 2),
    "one row (squeezed to 1-D)": (ROWS, ROWS, ROWS[:1] - 5, ROWS[:1] + 5),
    "x unchanged": (ROWS, ROWS + 1, ROWS.copy(), ROWS * 3),
    "y with NaN, the same again": (ROWS, WITH_NAN, ROWS + 1, WITH_NAN.copy()),
    "nothing changed": (ROWS, ROWS + 1, ROWS.copy(), ROWS + 1),
    "new width": (ROWS, ROWS, np.zeros((4, 3), np.float32), np.ones((4, 3), np.float32)),
    # Arrays bqplot's serializer converts or copies, beside the native float ones it sends as they are.
    "float64": (ROWS, ROWS, ROWS.astype(np.float64) + 1, ROWS.astype(np.float64)),
    "int64 (sent as int32)": (ROWS, ROWS, ROWS.astype(np.int64), ROWS.astype(np.int64) + 2),
    "not contiguous": (ROWS, ROWS, ROWS.T + 1, ROWS[:, ::2] + 1),
    "big-endian": (ROWS, ROWS, (ROWS + 1).astype(">f4"), (ROWS + 2).astype(">f8")),
    "equal values, other dtype": (ROWS, ROWS, ROWS.astype(np.float64), ROWS.astype(np.int32)),
    "only the first element differs": (ROWS, ROWS, np.r_[[99.0], ROWS.ravel()[1:]].reshape(4, 8), ROWS),
    "NaN first, the same again": (WITH_NAN[::-1], ROWS, WITH_NAN[::-1].copy(), ROWS),
    "int64 past 2**53, float64 equal after promotion": (
        np.full((2, 3), 2**53 + 1, np.int64), ROWS, np.full((2, 3), 2.0**53), ROWS),
}


def _no_plain_path():
    raise AssertionError("send_xy took the plain path")


@pytest.mark.parametrize("case", list(CASES))
def test_send_xy_sends_what_hold_sync_sends(case: str) -> None:
    x0, y0, x1, y1 = CASES[case]
    plain, fast = _pair(x0, y0)
    sent_plain, sent_fast = _recorded(plain), _recorded(fast)
    with plain.hold_sync():
        plain.x, plain.y = x1, y1
    fast.hold_sync = _no_plain_path
    send_xy(fast, x1, y1)
    assert _canonical(sent_fast) == _canonical(sent_plain)
    assert len(sent_fast) <= 1  # x and y together, or nothing
    for name in ("x", "y"):
        got, want = getattr(fast, name), getattr(plain, name)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert fast.get_state(["x", "y"]).keys() == plain.get_state(["x", "y"]).keys()


def test_send_xy_rejects_what_the_trait_rejects() -> None:
    mark, _ = _pair(ROWS, ROWS)
    _recorded(mark)
    with pytest.raises(Exception, match="Dimension mismatch"):
        send_xy(mark, np.zeros((2, 2, 2), np.float32), ROWS)


def test_send_xy_takes_the_plain_path_for_an_observed_mark() -> None:
    mark, _ = _pair(ROWS, ROWS)
    sent = _recorded(mark)
    seen: list = []
    mark.observe(lambda change: seen.append(change["name"]), names=["x", "y"])
    send_xy(mark, ROWS + 1, ROWS + 2)
    assert sorted(seen) == ["x", "y"] and len(sent) == 1


@pytest.mark.parametrize("texts", [("<b>1 %</b>", "<b>2 %</b>"), ("<b>1 %</b>", "<b>1 %</b>"), ("", "x")])
def test_send_values_sends_what_setting_an_html_value_sends(texts: tuple[str, str]) -> None:
    import ipywidgets as widgets

    plain, fast = widgets.HTML(texts[0]), widgets.HTML(texts[0])
    sent_plain, sent_fast = _recorded(plain), _recorded(fast)
    plain.value = texts[1]
    fast.hold_sync = _no_plain_path
    send_values(fast, value=texts[1])
    assert sent_fast == sent_plain and fast.value == plain.value


def test_a_widget_without_the_internals_read_takes_the_plain_path_and_sends_the_same(monkeypatch) -> None:
    """Another ipywidgets or traitlets, without one of the private names read: slower, not broken."""
    import ipywidgets as widgets

    from nbgpu.widgets import sync

    monkeypatch.setattr(sync, "_INTERNALS", (*sync._INTERNALS, "_a_name_this_version_lacks"))
    monkeypatch.setattr(sync, "_internals_of", {})
    plain, other = widgets.HTML("a"), widgets.HTML("a")
    sent_plain, sent_other = _recorded(plain), _recorded(other)
    held: list = []
    hold = other.hold_sync

    def counted_hold():
        held.append(True)
        return hold()

    other.hold_sync = counted_hold
    plain.value = "b"
    send_values(other, value="b")
    assert held and sent_other == sent_plain and other.value == "b"
