"""Keras and PyTorch Lightning callbacks that mark each epoch, like ``nbgpu.track``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from .marks import Tracker


def _first_module(*names: str):
    """The first of ``names`` already imported, else the first that imports."""
    errors = []
    for name in sorted(names, key=lambda n: sys.modules.get(n) is None):  # stable: the order given
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise ImportError(f"none of {', '.join(names)} could be imported ({'; '.join(errors)}); "
                      "install the framework whose callback you asked for")


def _callback(base: type, label: str, begin: str, end: str, epoch_of: Callable[..., int]):
    """A ``base`` callback whose ``begin`` hook marks "label N" on every timeline; ``end`` closes
    the epoch, ``on_train_end`` a stopped one. ``.tracker.summary()`` has a row per epoch."""
    def init(self) -> None:
        base.__init__(self)
        self.tracker = Tracker(None, label)

    return type(f"Nbgpu{base.__name__}", (base,), {
        "__init__": init,
        begin: lambda self, *args, **kwargs: self.tracker.begin(int(epoch_of(*args))),
        end: lambda self, *args, **kwargs: self.tracker.end(),
        "on_train_end": lambda self, *args, **kwargs: self.tracker.end("stopped"),
    })()


def keras_callback(label: str = "epoch"):
    """A ``keras.callbacks.Callback`` marking every epoch; pass it to ``model.fit(callbacks=[...])``."""
    keras = _first_module("keras", "tensorflow.keras")
    return _callback(keras.callbacks.Callback, label, "on_epoch_begin", "on_epoch_end",
                     lambda epoch, logs=None: epoch)


def lightning_callback(label: str = "epoch"):
    """A Lightning ``Callback`` marking every training epoch; pass it to ``Trainer(callbacks=[...])``."""
    pl = _first_module("lightning.pytorch", "pytorch_lightning")
    return _callback(pl.Callback, label, "on_train_epoch_start", "on_train_epoch_end",
                     lambda trainer, pl_module: trainer.current_epoch)
