"""Where the main thread was: the stack classifier on real CPU torch code, the capture's
split (``cap.where()``), its report line, history columns and recordings.

The classifier tests run each workload in a thread of their own and classify that thread's
frames, as the sampler's thread does for a cell; every workload loops over pure bytecode
between its calls, so each sample lands on the line under test.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections import Counter

import numpy as np
import pytest

import nbgpu
from conftest_profiles import clean_profiles_fixture  # noqa: F401 - fixture
from nbgpu.diagnostics import stacks
from nbgpu.recorder import Recorder
from nbgpu.runfile import load_run

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

RUN = [True]


class SlowDataset(Dataset):
    """A CPU-heavy dataset: each item is a 120x120 numpy product."""

    def __len__(self) -> int:
        return 10**6

    def __getitem__(self, i: int):
        a = np.random.default_rng(i).random((120, 120))
        a = a @ a
        return torch.tensor(a[:4, :4], dtype=torch.float32), i


def loader_loop() -> None:
    dl = DataLoader(SlowDataset(), batch_size=4, num_workers=0)
    while RUN[0]:
        for x, y in dl:  # the data loader line
            del x, y
            if not RUN[0]:
                break


def item_loop() -> None:
    x = torch.rand(2000)
    total = 0.0
    while RUN[0]:
        total += (x * 2).sum().item()


def sleep_loop() -> None:
    while RUN[0]:
        time.sleep(0.005)


def numpy_loop() -> None:
    a = np.random.default_rng(0).random((150, 150))
    while RUN[0]:
        b = np.dot(a, a)
    del b


def torch_loop() -> None:
    a = torch.rand(200, 200)
    while RUN[0]:
        b = torch.matmul(a, a)
    del b


def module_loop() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    x = torch.rand(64, 256)
    while RUN[0]:
        y = model(x)
    del y


def copy_loop() -> None:
    x = torch.rand(256, 256)
    while RUN[0]:
        y = x.to(dtype=torch.float64, copy=True).to("meta")
    del y


def queue_loop() -> None:
    q: queue.Queue = queue.Queue()
    while RUN[0]:
        try:
            q.get(timeout=0.01)
        except queue.Empty:
            pass


def _classified(fn, samples: int = 60) -> tuple[Counter, Counter]:
    """(categories, cell-line texts) of ``samples`` stack samples of ``fn`` running in a thread."""
    RUN[0] = True
    th = threading.Thread(target=fn, daemon=True)
    th.start()
    time.sleep(0.3)  # past the set-up (a DataLoader's first batch, imports)
    cats: Counter = Counter()
    lines: Counter = Counter()
    try:
        for _ in range(samples):
            frame = sys._current_frames()[th.ident]
            category, line = stacks.classify(frame)
            cats[category] += 1
            import linecache

            lines[linecache.getline(*line).strip() if line else None] += 1
            time.sleep(0.003)
    finally:
        RUN[0] = False
        th.join(5)
    return cats, lines


@pytest.mark.parametrize("fn, category", [
    (loader_loop, "data_loader"), (item_loop, "gpu_wait"), (sleep_loop, "idle"), (numpy_loop, "cpu"),
    (torch_loop, "gpu_issue"), (module_loop, "gpu_issue"), (copy_loop, "h2d_copy"), (queue_loop, "idle"),
])
def test_the_classifier_names_what_real_cpu_torch_code_is_doing(fn, category):
    cats, _ = _classified(fn)
    top, count = cats.most_common(1)[0]
    assert top == category, cats
    assert count >= 0.8 * sum(cats.values()), cats


def test_a_sample_carries_the_outermost_user_line():
    _, lines = _classified(loader_loop, 30)
    assert lines.most_common(1)[0][0] == "for x, y in dl:  # the data loader line"


@pytest.mark.parametrize("rel, name, category", [
    ("cuda/__init__.py", "synchronize", "gpu_wait"), ("cuda/streams.py", "synchronize", "gpu_wait"),
    ("_tensor.py", "__repr__", "gpu_wait"), ("_tensor_str.py", "_tensor_str", "gpu_wait"),
    ("utils/data/dataloader.py", "__next__", "data_loader"), ("nn/modules/module.py", "to", "h2d_copy"),
    ("nn/modules/linear.py", "forward", "gpu_issue"), ("optim/adam.py", "step", "gpu_issue"),
])
def test_frames_inside_torch_that_cannot_run_on_a_cpu_build(rel, name, category):
    assert stacks.torch_category(rel, name) == category


@pytest.mark.parametrize("text, category", [
    ("loss_sum += loss.item()", "gpu_wait"), ("out = y.cpu()", "gpu_wait"),
    ("torch.cuda.synchronize()", "gpu_wait"), ("x = x.to(device, non_blocking=True)", "h2d_copy"),
    ("x = x.cuda()", "h2d_copy"), ("time.sleep(15)", "idle"), ("data = open(path).read()", "idle"),
    ("loss.backward()", "gpu_issue"), ("y = torch.matmul(a, b)", "gpu_issue"),
    ("total = sum(range(10))", "cpu"), ("x = x.to(torch.float16)", "gpu_issue"),
    ("label = ', '.join(names)", "cpu"), ("worker.join()", "idle"), ("t.join(timeout=5)", "idle"),
])
def test_a_c_call_from_a_user_line_is_named_by_its_text(text, category):
    assert stacks.line_category(text) == category


def _busy(seconds: float, fn) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        fn()


@pytest.fixture(name="stack_hz")
def stack_hz_fixture():
    """Set ``NbGpu.stack_samples_hz`` for one test; the default again after it."""
    from nbgpu.config import settings

    default = settings().stack_samples_hz
    yield lambda hz: setattr(settings(), "stack_samples_hz", hz)
    settings().stack_samples_hz = default


def test_a_capture_splits_its_time_and_names_its_top_line(clean_profiles, stack_hz):
    stack_hz(40)  # a fine split of 1.6 s, whatever the default rate
    s = nbgpu.Sampler("sim", interval=0.2).start()
    try:
        dl = iter(DataLoader(SlowDataset(), batch_size=8, num_workers=0))
        x = torch.rand(2000)
        with nbgpu.capture(sampler=s) as cap:
            end = time.monotonic() + 1.2
            while time.monotonic() < end:
                batch = next(dl)
            _busy(0.4, lambda: x.sum().item())
        where = cap.where()
        assert list(where["category"]) == list(stacks.CATEGORIES)
        assert where["share"].sum() == pytest.approx(1.0)
        assert where["seconds"].sum() == pytest.approx(cap.duration_s, rel=1e-6)
        shares = dict(zip(where["category"], where["share"], strict=True))
        assert shares["data_loader"] > 0.55 and shares["gpu_wait"] > 0.1, shares
        top = where.attrs["top_line"]
        assert top["text"] == "batch = next(dl)" and top["share"] > 0.55
        # the loop around that line, for a finding to name
        assert cap.split().line_of("data_loader")["loop"][1] == "while time.monotonic() < end:"
        assert 40 * 1.6 * 0.5 <= where.attrs["samples"] <= 40 * 1.6 * 1.5  # about 40 a second
        del batch
        # The report says it: a bar and the line where most time went.
        from nbgpu.profiles.render import where_line

        assert "data loader" in where_line(cap) and "`batch = next(dl)`" in where_line(cap)
        assert 'class="nbgpu-where"' in cap._repr_html_()
    finally:
        s.stop()


def test_stacks_are_sampled_only_while_a_capture_is_open(clean_profiles, stack_hz):
    stack_hz(40)  # many samples in well under a second
    s = nbgpu.Sampler("sim", interval=0.05).start()
    try:
        with nbgpu.capture(sampler=s):
            time.sleep(0.5)
        got = stacks.samples_of(s)
        before = got.sampled
        assert before >= 5
        time.sleep(0.5)  # the sampler runs on; no capture: no sample
        assert got.sampled == before
        with nbgpu.capture(sampler=s) as cap:
            time.sleep(0.5)
        assert got.sampled > before
        assert cap.where().attrs["top_line"]["text"] == "time.sleep(0.5)"
    finally:
        s.stop()


def test_stack_samples_are_written_into_recordings_and_read_back(clean_profiles, tmp_path):
    s = nbgpu.Sampler("sim", interval=0.1).start()
    path = tmp_path / "run.jsonl"
    rec = Recorder(s, str(path))
    try:
        with nbgpu.capture(sampler=s) as cap:
            _busy(0.5, lambda: time.sleep(0.002))
            rec.flush()
            x = torch.rand(500)
            _busy(0.5, lambda: x.sum().item())
    finally:
        rec.close()
        s.stop()
    read = load_run(str(path)).stack_samples()
    t, codes, _ = stacks.samples_of(s).between(cap.start_time, cap.end_time)
    # every sample of the block, in order (one more may come between its end and its release)
    assert [c for _, c, _, _ in read][:len(codes)] == [stacks.CATEGORIES[c] for c in codes], \
        ([round(r[0] - cap.start_time, 4) for r in read], (t - cap.start_time).round(4).tolist())
    assert len(codes) <= len(read) <= len(codes) + 1
    assert {text for _, c, _, text in read} >= {"_busy(0.5, lambda: time.sleep(0.002))",
                                                "_busy(0.5, lambda: x.sum().item())"}
    assert np.allclose([ts for ts, *_ in read][:len(t)], t, atol=1e-3)


def test_history_rows_carry_the_split(clean_profiles, stack_hz):
    stack_hz(40)  # many samples in well under a second
    from nbgpu.profiles import history

    s = nbgpu.Sampler("sim", interval=0.1).start()
    try:
        cap = nbgpu.capture(sampler=s).start()
        time.sleep(0.6)
        cap.finish()
        history.add(history.CellRecord(1, "c1", "time.sleep(0.6)", cap))
        row = nbgpu.history().iloc[-1]
    finally:
        s.stop()
    assert row["share_idle"] > 0.8
    assert sum(row[f"share_{c}"] for c in stacks.CATEGORIES) == pytest.approx(1.0, abs=1e-3)
    assert row["top_line"].startswith("line ") and "time.sleep(0.6)" in row["top_line"]


def test_report_diagnose_judges_a_recording_by_its_stack_samples(clean_profiles, tmp_path, capsys):
    import json

    from nbgpu.cli.diagnose import run_diagnose

    s = nbgpu.Sampler(nbgpu.SimulatedGPUs(count=1, scenario="input_bound"), interval=0.1).start()
    path = tmp_path / "run.jsonl"
    rec = Recorder(s, str(path))
    try:
        dl = iter(DataLoader(SlowDataset(), batch_size=16, num_workers=0))
        with nbgpu.capture(sampler=s):
            end = time.monotonic() + 3.5
            while time.monotonic() < end:
                batch = next(dl)
                rec.flush()
        del batch
    finally:
        rec.close()
        s.stop()
    assert run_diagnose(str(path), ["input_window_s=2", "eval_every_s=0.5"], as_json=True) == 0
    found = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "input_bound"]
    assert found and "of it getting data in (data loader " in found[0]["message"]
    assert "`batch = next(dl)`" in found[0]["message"]
    # The same readings without their stack samples: only a possibility.
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(line for line in path.read_text().splitlines(True) if '"stacks"' not in line))
    assert run_diagnose(str(bare), ["input_window_s=2", "eval_every_s=0.5"], as_json=True) == 0
    found = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "input_bound"]
    assert found and "may be waiting for input" in found[0]["message"]


def test_a_capture_keeps_its_own_stack_samples(clean_profiles, stack_hz):
    stack_hz(40)  # many samples in well under a second
    s = nbgpu.Sampler("sim", interval=0.1).start()
    try:
        with nbgpu.capture(sampler=s) as cap:
            _busy(0.6, lambda: time.sleep(0.002))
    finally:
        s.stop()
    where = cap.where()  # read after the sampler stopped: the capture kept its split at its end
    assert where.attrs["samples"] >= 10
    assert where.set_index("category")["share"]["idle"] == pytest.approx(1.0)
    assert where.attrs["top_line"]["text"] == "_busy(0.6, lambda: time.sleep(0.002))"


def test_stack_samples_hz_zero_turns_sampling_off(clean_profiles, stack_hz):
    s = nbgpu.Sampler("sim", interval=0.05).start()
    try:
        with nbgpu.capture(sampler=s):
            time.sleep(0.3)
        got = stacks.samples_of(s)
        before = got.sampled
        stack_hz(0)
        with nbgpu.capture(sampler=s) as cap:
            time.sleep(0.3)
        assert got.sampled == before and cap.where().attrs["top_line"] is None
    finally:
        s.stop()


def test_a_tensor_read_through_a_builtin_is_a_wait_for_the_gpu():
    loss = torch.tensor(1.5)
    frame = sys._getframe()
    assert stacks.line_category("total += float(loss)", frame) == "gpu_wait"
    assert stacks.line_category("y = loss * 2", frame) == "gpu_issue"
    assert stacks.line_category("total += float(count)", frame) == "cpu"
    del loss


def test_no_frame_of_a_finished_block_is_kept(clean_profiles, stack_hz):
    """Later samples of a block end their walk at its outermost user frame, found once; that
    frame (and what its locals hold) is not kept once the block is released."""
    import gc
    import weakref

    stack_hz(40)

    class Big:
        pass

    s = nbgpu.Sampler("sim", interval=0.05).start()
    try:
        def run_block() -> weakref.ref:
            held = Big()
            with nbgpu.capture(sampler=s) as cap:
                _busy(0.5, lambda: time.sleep(0.002))
            assert cap.where().attrs["top_line"]["text"] == "_busy(0.5, lambda: time.sleep(0.002))"
            return weakref.ref(held)

        ref = run_block()
        gc.collect()
        assert ref() is None
    finally:
        s.stop()
