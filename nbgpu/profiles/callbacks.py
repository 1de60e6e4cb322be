"""Keras and PyTorch Lightning callbacks that mark each epoch, like ``nbgpu.track``."""

from __future__ import annotations

import importlib
import sys

from .marks import Tracker


def _first_module(*names: str):
    """The first of ``names`` already imported, else the first that imports."""
    for name in names:
        if sys.modules.get(name) is not None:
            return sys.modules[name]
    errors = []
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise ImportError(f"none of {', '.join(names)} could be imported ({'; '.join(errors)}); "
                      "install the framework whose callback you asked for")


def keras_callback(label: str = "epoch"):
    """A ``keras.callbacks.Callback`` marking every epoch; pass it to ``model.fit(callbacks=[...])``."""
    keras = _first_module("keras", "tensorflow.keras")

    class NbgpuKerasCallback(keras.callbacks.Callback):
        """Marks "epoch N" on every timeline at each epoch's start."""

        def __init__(self) -> None:
            super().__init__()
            self.tracker = Tracker(None, label)

        def on_epoch_begin(self, epoch, logs=None):
            self.tracker.begin(int(epoch))

        def on_epoch_end(self, epoch, logs=None):
            self.tracker.end()

        def on_train_end(self, logs=None):
            self.tracker.end("stopped")

    return NbgpuKerasCallback()


def lightning_callback(label: str = "epoch"):
    """A Lightning ``Callback`` marking every training epoch; pass it to ``Trainer(callbacks=[...])``."""
    pl = _first_module("lightning.pytorch", "pytorch_lightning")

    class NbgpuLightningCallback(pl.Callback):
        """Marks "epoch N" on every timeline at each training epoch's start."""

        def __init__(self) -> None:
            super().__init__()
            self.tracker = Tracker(None, label)

        def on_train_epoch_start(self, trainer, pl_module):
            self.tracker.begin(int(trainer.current_epoch))

        def on_train_epoch_end(self, trainer, pl_module):
            self.tracker.end()

        def on_train_end(self, trainer, pl_module):
            self.tracker.end("stopped")

    return NbgpuLightningCallback()
