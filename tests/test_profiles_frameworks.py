"""Keras / Lightning callbacks and PyTorch allocator figures, with stand-in framework modules.

The frameworks are replaced by small fakes in ``sys.modules`` so the tests check nbgpu's
side (marks, spans, peak-counter handling) without TensorFlow, Lightning or a GPU.
"""

from __future__ import annotations

import sys
import time
import types

import pytest

import nbgpu
from conftest_profiles import clean_profiles_fixture, sim_sampler_fixture  # noqa: F401 - fixtures
from nbgpu.profiles.callbacks import keras_callback, lightning_callback


class _Base:
    def __init__(self) -> None:
        pass


def test_keras_callback_marks_each_epoch(sim_sampler, monkeypatch):
    keras = types.ModuleType("keras")
    keras.callbacks = types.SimpleNamespace(Callback=_Base)
    monkeypatch.setitem(sys.modules, "keras", keras)
    cb = keras_callback()
    assert isinstance(cb, _Base)
    for epoch in range(2):
        cb.on_epoch_begin(epoch)
        time.sleep(0.2)
        cb.on_epoch_end(epoch)
    cb.on_train_end()
    assert [label for _, label in sim_sampler.timeline.marks()] == ["epoch 0", "epoch 1"]
    rows = cb.tracker.summary(per_gpu=False)
    assert rows["iteration"].tolist() == [0, 1]
    assert rows["duration_s"].between(0.15, 0.35).all()


def test_lightning_callback_uses_trainer_epochs(sim_sampler, monkeypatch):
    pl = types.ModuleType("lightning.pytorch")
    pl.Callback = _Base
    monkeypatch.setitem(sys.modules, "lightning.pytorch", pl)
    cb = lightning_callback(label="train epoch")
    trainer = types.SimpleNamespace(current_epoch=7)
    cb.on_train_epoch_start(trainer, None)
    cb.on_train_epoch_end(trainer, None)
    assert [label for _, label in sim_sampler.timeline.marks()] == ["train epoch 7"]


def test_missing_framework_says_what_to_install(monkeypatch):
    for name in ("keras", "tensorflow.keras", "tensorflow"):
        monkeypatch.setitem(sys.modules, name, None)  # makes the import fail
    with pytest.raises(ImportError, match="install the framework"):
        keras_callback()


class FakeCuda:
    """The few torch.cuda calls nbgpu makes, over one device with a settable peak."""

    def __init__(self) -> None:
        self.peak = 0.0
        self.allocated = 0.0
        self.resets = 0

    def is_initialized(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def max_memory_allocated(self, i: int) -> float:
        return self.peak

    def reset_peak_memory_stats(self, i: int) -> None:
        self.resets += 1
        self.peak = self.allocated

    def memory_allocated(self, i: int) -> float:
        return self.allocated

    def memory_reserved(self, i: int) -> float:
        return 8e9

    def max_memory_reserved(self, i: int) -> float:
        return max(8e9, self.peak)

    def get_device_properties(self, i: int):
        return types.SimpleNamespace(uuid="not-a-known-uuid")

    def alloc(self, n: float) -> None:
        self.allocated += n
        self.peak = max(self.peak, self.allocated)


def test_torch_peak_is_reset_at_start_and_nested_blocks_keep_the_outer_peak(sim_sampler, monkeypatch):
    cuda = FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cuda.alloc(5e9)
    cuda.alloc(-4e9)  # before the block: peak 5 GB, 1 GB still allocated
    with nbgpu.capture(gpus=[0]) as outer:
        assert cuda.resets == 1 and cuda.peak == 1e9
        cuda.alloc(3e9)  # 4 GB: the outer block's peak
        cuda.alloc(-3e9)
        with nbgpu.capture(gpus=[0]) as inner:  # resets the counter again
            cuda.alloc(1e9)
            cuda.alloc(-1e9)
    assert inner.summary["torch_peak_allocated_bytes"].iloc[0] == 2e9
    assert outer.summary["torch_peak_allocated_bytes"].iloc[0] == 4e9
    assert outer.summary["torch_reserved_end_bytes"].iloc[0] == 8e9


def test_without_cuda_started_no_torch_columns(sim_sampler, monkeypatch):
    class NotStarted(FakeCuda):
        def is_initialized(self) -> bool:
            return False

    cuda = NotStarted()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    with nbgpu.capture() as cap:
        pass
    assert cuda.resets == 0
    assert "torch_peak_allocated_bytes" not in cap.summary.columns
