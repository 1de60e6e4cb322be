"""Send a widget's new arrays or texts as the one message ``hold_sync`` would, for less CPU.

``with mark.hold_sync(): mark.x, mark.y = x, y`` validates each array (bqplot squeezes a
``(1, n)`` array to ``(n,)``), compares it with the old one (traittypes: no message for an
equal array), runs traitlets' notification for each, then builds the state through
``get_state`` and ipywidgets' buffer split: about 40 us a mark, five marks every refresh.
``send_xy`` keeps the parts the front end sees (the trait's own validation, the same
"changed" rule, the same state, buffers and message) and drops the notification round
trip; ``send_values`` does the same for the value texts (about 25 us each). A native
float array bqplot would send as it is gets its state built here, without the serializer's
conversion checks (the same dict); the equality test skips ``np.array_equal``'s conversions
for plain arrays (the same rule). Where anything
else takes part (an observer of those traits, a sync already held, a front end update
being applied, a trait neither an array nor a text) it takes the plain path, and so does a
widget class that lacks one of the ipywidgets and traitlets internals read here (another
version of them): slower, never wrong.
``tests/test_panel_refresh_sync.py`` checks the messages equal the plain path's (written
against ipywidgets 8, traittypes 0.2, bqplot 0.13).
"""

from __future__ import annotations

import numpy as np
from bqplot.traits import array_to_json
from traitlets import All, Unicode
from traittypes import Array

# Native float arrays, which bqplot's ``array_to_json`` sends as they are: its name for each.
_PLAIN_FLOATS = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def send_xy(mark, x: np.ndarray, y: np.ndarray) -> None:
    """Set ``mark.x`` and ``mark.y`` and send what changed in one update message (or none)."""
    send_values(mark, x=x, y=y)


def send_values(widget, **values: object) -> None:
    """Set these array or text traits of ``widget`` and send what changed in one message (or none).

    What the plain path (``with widget.hold_sync():`` then setting each) would send: an array
    is sent when it is not ``np.array_equal`` to the old one (traittypes' rule), a text when
    it differs (traitlets' rule), each validated by its own trait.
    """
    traits = _direct_traits(type(widget), tuple(values))
    if (traits is None or not _internals_present(widget) or _observed(widget, values)
            or widget._holding_sync or widget._property_lock):
        with widget.hold_sync():
            for name, value in values.items():
                setattr(widget, name, value)
        return
    kept = widget._trait_values
    state: dict = {}
    buffers: list = []
    paths: list = []
    for trait, (name, value) in zip(traits, values.items(), strict=True):
        new = trait._validate(widget, value)
        old = kept.get(name, trait.default_value)
        kept[name] = new
        if isinstance(trait, Unicode):
            if old != new:
                state[name] = new
            continue
        if _equal(old, new):  # traittypes sends nothing for an equal array
            continue
        to_json = trait.metadata.get("to_json") or widget._trait_to_json
        part = _plain_json(new) if to_json is array_to_json else None
        if part is None:
            part = dict(to_json(new, widget))
        buffers.append(part.pop("value"))
        paths.append([name, "value"])
        state[name] = part
    if state:
        widget._send({"method": "update", "state": state, "buffer_paths": paths}, buffers=buffers)


_traits_of: dict[tuple[type, tuple[str, ...]], list | None] = {}


def _direct_traits(cls: type, names: tuple[str, ...]) -> list | None:
    """The traits of ``cls`` named ``names``, or None when one is neither an array nor a text
    (the plain path then); looked up once per class and names."""
    key = (cls, names)
    if key not in _traits_of:
        traits = [getattr(cls, name) for name in names]
        _traits_of[key] = traits if all(isinstance(t, (Array, Unicode)) for t in traits) else None
    return _traits_of[key]


# The internals the direct path reads or calls, as ipywidgets 8 and traitlets 5 name them.
_INTERNALS = ("_trait_values", "_trait_notifiers", "_holding_sync", "_property_lock", "_send",
              "_trait_to_json")
_internals_of: dict[type, bool] = {}


def _internals_present(widget) -> bool:
    """Whether ``widget`` has every internal the direct path uses (looked at once per class)."""
    cls = type(widget)
    found = _internals_of.get(cls)
    if found is None:
        found = _internals_of[cls] = all(hasattr(widget, name) for name in _INTERNALS)
    return found


def _observed(widget, names) -> bool:
    """Whether anyone observes one of ``names`` of ``widget`` (their notification must then run)."""
    notifiers = widget._trait_notifiers
    return any(notifiers.get(name) for name in (*names, All))


def _equal(old: object, new: np.ndarray) -> bool:
    """``np.array_equal(old, new)``, without its conversions when both are plain arrays, and
    False at once when their first elements differ (a line's x moves with the clock)."""
    if type(old) is not np.ndarray or type(new) is not np.ndarray:
        return np.array_equal(old, new)
    if old.shape != new.shape:
        return False
    if old.size and old.dtype == new.dtype and old.dtype.kind in "biuf" and old.item(0) != new.item(0):
        return False  # (a NaN there too: unequal, as array_equal says)
    return bool((old == new).all())


def _plain_json(ar: np.ndarray) -> dict | None:
    """What ``array_to_json`` gives for a native float array (None for any other): its memory
    (a C-contiguous copy where it is not contiguous), its dtype's name, its shape, no type."""
    name = _PLAIN_FLOATS.get(ar.dtype) if type(ar) is np.ndarray else None
    if name is None:
        return None
    if not ar.flags.c_contiguous:
        ar = np.ascontiguousarray(ar)
    return {"value": memoryview(ar), "dtype": name, "shape": ar.shape, "type": None}
