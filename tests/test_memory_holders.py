"""nbgpu.memory_by_name on CPU tensors in a plain namespace: what holds memory, counted once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

torch = pytest.importorskip("torch")

import nbgpu  # noqa: E402
from nbgpu.holders import CAP  # noqa: E402

MB = 1 << 20


def table(ns: dict, **kw):
    return nbgpu.memory_by_name(device="cpu", namespace=ns, **kw).set_index("name")


def test_a_tensor_and_its_views_are_counted_once_and_shared_names_say_so():
    x = torch.zeros(MB // 4)  # 1 MiB of float32
    t = table({"x": x, "views": [x[:10], x[10:], x.view(-1)], "y": x})
    assert t.loc["x", "bytes"] == MB and t.loc["views", "bytes"] == MB
    assert "views share storage" in t.loc["views", "note"]
    assert t.loc["views", "kind"] == "list of 3 tensors"
    assert set(t.loc["x", "shared_with"].split(", ")) == {"views", "y"}


def test_largest_first_and_nothing_for_names_without_tensors():
    t = nbgpu.memory_by_name(device="cpu", namespace={"a": torch.zeros(10), "b": torch.zeros(1000), "s": "x"})
    assert list(t["name"]) == ["b", "a"]


def test_module_parameters_gradients_and_buffers_apart():
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.BatchNorm1d(256))
    model(torch.zeros(4, 256)).sum().backward()
    t = table({"model": model})
    params = sum(p.numel() * 4 for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    assert t.loc["model", "bytes"] == 2 * params + buffers
    assert "parameters" in t.loc["model", "kind"] and "gradients" in t.loc["model", "kind"]
    assert "buffers" in t.loc["model", "kind"]


def test_optimizer_state_is_listed_and_params_are_shared_with_the_model():
    model = torch.nn.Linear(128, 128)
    opt = torch.optim.Adam(model.parameters())
    model(torch.zeros(2, 128)).sum().backward()
    opt.step()
    t = table({"model": model, "opt": opt})
    params = sum(p.numel() * 4 for p in model.parameters())
    assert t.loc["opt", "bytes"] >= 2 * params  # exp_avg and exp_avg_sq


@dataclass
class Batch:
    inputs: object
    labels: object


class Raising:
    def __init__(self) -> None:
        self.kept = torch.zeros(100)

    @property
    def boom(self):
        raise AssertionError("a property was called")

    def __getattr__(self, name):
        raise AssertionError(f"__getattr__ called for {name}")


def test_cycles_dataclasses_and_objects_whose_attributes_raise():
    cyc: list = [torch.zeros(10)]
    cyc.append(cyc)
    d = {"inner": {"t": torch.zeros(20)}}
    d["self"] = d
    t = table({"cyc": cyc, "d": d, "batch": Batch(torch.zeros(5), torch.zeros(3)), "obj": Raising()})
    assert t.loc["cyc", "bytes"] == 40 and t.loc["d", "bytes"] == 80
    assert t.loc["batch", "bytes"] == 32 and t.loc["obj", "bytes"] == 400


def test_depth_bounds_the_walk():
    ns = {"deep": [[[[torch.zeros(10)]]]]}
    assert table(ns, depth=4).loc["deep", "bytes"] == 40
    assert "deep" not in table(ns, depth=2).index


def test_a_huge_list_is_capped_and_says_so():
    big = [0] * 100_000 + [torch.zeros(10)]
    t = table({"big": [torch.zeros(1), *big]})
    assert "capped" in t.loc["big", "note"] and t.loc["big", "bytes"] == 4
    assert CAP == 10_000


def test_output_cache_and_kept_exceptions_are_holders():
    def fail():
        big = torch.zeros(1000)  # noqa: F841 - held by the traceback
        raise ValueError("no")

    try:
        fail()
    except ValueError as exc:
        err = exc
    t = table({"Out": {3: torch.zeros(7)}, "_": torch.zeros(2), "err": err})
    assert t.loc["Out[3]", "bytes"] == 28 and bool(t.loc["Out[3]", "hidden"])
    assert bool(t.loc["_", "hidden"]) and t.loc["err", "bytes"] == 4000


def test_without_torch_cuda_there_are_no_cuda_rows_for_cpu():
    t = nbgpu.memory_by_name(device="cpu", namespace={"x": torch.zeros(3)})
    assert "not reachable from a name" not in set(t["name"])


def test_the_last_error_lists_its_frames_locals_once(monkeypatch):
    import sys

    def fail():
        big = torch.zeros(1000)  # noqa: F841 - held by the traceback
        raise ValueError("no")

    try:
        fail()
    except ValueError:
        _, value, tb = sys.exc_info()
    monkeypatch.setattr(sys, "last_traceback", tb, raising=False)
    monkeypatch.setattr(sys, "last_value", value, raising=False)
    t = table({})
    assert t.loc["fail: big (traceback)", "bytes"] == 4000
    assert bool(t.loc["fail: big (traceback)", "hidden"])
    assert "sys.last_value" not in t.index


def test_torch_is_never_imported_when_the_user_did_not():
    import subprocess
    import sys

    code = ("import sys, nbgpu; t = nbgpu.memory_by_name(namespace={'x': [1]}); "
            "print(len(t), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "False"]


def test_nested_huge_containers_stay_bounded_and_a_bad_device_is_one_line():
    nest = [torch.zeros(1), [[[0] * 100 for _ in range(5_000)] for _ in range(2)]]
    t = table({"nest": nest}, depth=4)  # under CAP per container, 1,000,000 objects in all
    assert "capped" in t.loc["nest", "note"]
    with pytest.raises(nbgpu.BadArgumentError) as err:
        nbgpu.memory_by_name(device="gpu-ish", namespace={})
    assert "\n" not in str(err.value)


class SideEffects:
    """Every attribute read through Python code is recorded: the walk must make none."""

    calls: ClassVar[list] = []

    def __init__(self) -> None:
        self.t = torch.zeros(8)

    @property
    def loaded(self):
        SideEffects.calls.append("loaded")
        return torch.zeros(1000)

    @property
    def __class__(self):  # isinstance() falls back to this when the type does not match
        SideEffects.calls.append("__class__")
        return SideEffects

    def __getattribute__(self, name):
        if name != "__dict__":
            SideEffects.calls.append(name)
        return object.__getattribute__(self, name)


def test_no_property_or_getattribute_of_the_user_runs():
    SideEffects.calls = []
    obj = SideEffects()
    SideEffects.calls.clear()
    t = table({"obj": obj, "objs": [obj, SideEffects()], "d": {"o": obj}})
    assert SideEffects.calls == []
    assert t.loc["obj", "bytes"] == 32 and t.loc["objs", "bytes"] == 64


def test_a_namespace_changed_by_another_thread_while_walked_gives_no_error():
    import threading

    ns = {f"v{i}": {"t": torch.zeros(1), "n": list(range(50))} for i in range(2_000)}
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            d = ns[f"v{i % 2_000}"]
            d[f"k{i}"] = i  # grows and shrinks the dicts being walked
            d.pop(f"k{i - 50}", None)
            i += 1

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        for _ in range(5):
            assert len(table(ns)) == 2_000
    finally:
        stop.set()
        worker.join()


def test_what_each_release_would_give_back_counts_only_what_no_name_keeps():
    import sys

    kept = torch.zeros(250)  # 1,000 bytes, also a name

    def fail():
        mine = torch.zeros(500)  # noqa: F841 - 2,000 bytes only the traceback holds
        also = kept  # noqa: F841
        raise ValueError("no")

    try:
        fail()
    except ValueError as exc:
        err = exc
    ns = {"kept": kept, "Out": {1: torch.zeros(1000)}, "_": torch.zeros(10)}
    frame = nbgpu.memory_by_name(device="cpu", namespace=ns, error=err)
    assert "fail: mine (traceback)" in set(frame["name"])
    assert frame.attrs["freed_by"] == {"outputs": 4040, "traceback": 2000, "all_hidden": 6040}
    assert frame.attrs["named_bytes"] == 1000 + 2000 + 4000 + 40
    assert getattr(sys, "last_traceback", None) is not err.__traceback__


def test_a_leak_finding_names_what_holds_the_memory_now(monkeypatch):
    import time

    import __main__
    from conftest_diagnostics import FakeClock, drive, fired
    from nbgpu import Sampler, SimulatedGPUs

    # CPU tensors stand for the GPU's; the rule asks ``cuda_device`` which device a GPU is
    monkeypatch.setattr(nbgpu.holders, "cuda_device", lambda *a, **k: "cpu")
    monkeypatch.setattr(__main__, "losses", [torch.zeros(MB // 4) for _ in range(3)], raising=False)
    clock = FakeClock(time.time())  # a live evaluation: names are of this process, now
    s = Sampler(SimulatedGPUs(count=1, scenario="leak", clock=clock), interval=0.5, clock=clock)
    s.started_at = clock()
    drive(s, clock, 30)
    (alert,) = fired(s, "memory_leak")
    assert alert.suggestion.startswith("Held most by `losses`: list of 3 tensors, 3.0 MiB"), alert.suggestion
    assert "`%gpumon free NAME` releases one" in alert.suggestion
    assert alert.evidence["holders"][0] == "`losses`: list of 3 tensors, 3.0 MiB"


def test_a_replayed_leak_names_no_holders_of_this_process(monkeypatch):
    import __main__
    from conftest_diagnostics import drive, fired, sim_sampler

    monkeypatch.setattr(nbgpu.holders, "cuda_device", lambda *a, **k: "cpu")
    monkeypatch.setattr(__main__, "losses", [torch.zeros(MB // 4)], raising=False)
    s, clock = sim_sampler("leak", count=1)  # judged at another time than now
    drive(s, clock, 30)
    (alert,) = fired(s, "memory_leak")
    assert "holders" not in alert.evidence and "Held most" not in alert.suggestion


def test_odd_containers_and_a_dict_property_run_no_user_code():
    calls = []

    class SneakyList(list):
        def __iter__(self):
            calls.append("__iter__")
            return super().__iter__()

        def __len__(self):
            calls.append("__len__")
            return 0

    class SneakyDict(dict):
        def values(self):
            calls.append("values")
            return super().values()

    class OwnDict:
        @property
        def __dict__(self):
            calls.append("__dict__")
            raise RuntimeError("no")

    t = table({"l": SneakyList([torch.zeros(4)]), "d": SneakyDict(a=torch.zeros(2)), "o": OwnDict()})
    assert calls == []
    assert t.loc["l", "bytes"] == 16 and t.loc["d", "bytes"] == 8 and "o" not in t.index
