"""Adversarial values (issue 34, items 9-11): huge numbers, non-string labels, file names that
are not UTF-8, recordings with very many keys and escape codes in labels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest_cli import CraftedPrometheus
from conftest_profiles import kernel_fixture  # noqa: F401 - fixture
from nbgpu import Sampler
from nbgpu.cli import main
from nbgpu.svg import svg_timeline

ROOT = Path(__file__).resolve().parents[1]
NBGPU = [sys.executable, "-m", "nbgpu.cli"]
HUGE = (1e308, -1e308)


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("values") / "run.jsonl")
    code = main(["record", "--source", "sim", "--interval", "0.1", "-q", "-o", path, "--",
                 sys.executable, "-c", "import time; time.sleep(0.5)"])
    assert code == 0
    return path


def _rewrite(src: str, dst: Path, change) -> Path:
    """A copy of the recording ``src`` with ``change(record)`` applied to each reading line."""
    out = []
    with open(src) as fh:
        for i, line in enumerate(fh):
            data = json.loads(line)
            if "gpu_id" in data:
                change(i, data)
            out.append(json.dumps(data))
    dst.write_text("\n".join(out) + "\n")
    return dst


def test_svg_draws_values_at_the_ends_of_the_float_range():
    df = pd.DataFrame({"time": pd.to_datetime([1.7e9 + i for i in range(6)], unit="s", utc=True),
                       "gpu": [0] * 6, "util_pct": [1e308, -1e308, 5.0, 1e308, np.inf, -np.inf],
                       "power_w": [-1e308] * 6})
    page = svg_timeline(df, ["util_pct", "power_w"])
    assert page.startswith("<svg") and page.endswith("</svg>")


@pytest.mark.parametrize("command", ["report", "compare"])
def test_huge_values_in_a_recording_are_not_a_traceback(command, run_file, tmp_path):
    def huge(i, data):
        for key in ("util_pct", "gpu_util_percent", "power_w", "temp_c", "temperature_c"):
            data[key] = HUGE[i % 2]

    bad = _rewrite(run_file, tmp_path / "huge.jsonl", huge)
    args = [str(bad)] if command == "report" else [str(bad), run_file]
    done = subprocess.run([*NBGPU, command, *args, "-o", str(tmp_path / "out.html")], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode in (0, 2) and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 1


@pytest.mark.parametrize("command", ["report", "report-out", "compare", "compare-out", "diagnose"])
def test_a_file_name_that_is_not_utf8_is_not_a_traceback(command, run_file, tmp_path):
    folder = os.fsencode(tmp_path)
    name = os.path.join(folder, b"\xffrun.jsonl")
    with open(run_file, "rb") as src, open(name, "wb") as dst:
        dst.write(src.read())
    text = os.fsdecode(name)
    out = os.fsdecode(os.path.join(folder, b"\xfeout.html"))
    args = {"report": ["report", text], "report-out": ["report", run_file, "-o", out],
            "compare": ["compare", text, run_file], "compare-out": ["compare", run_file, text, "-o", out],
            "diagnose": ["report", "--diagnose", text]}[command]
    # a strict UTF-8 terminal, where printing an undecodable name raises
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8", LC_ALL="C.UTF-8")
    done = subprocess.run([*NBGPU, *args], capture_output=True, timeout=120, env=env)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")


def test_a_cell_fed_crafted_prometheus_values_shows_none_of_them():
    from nbgpu.profiles.capture import Capture
    from nbgpu.profiles.render import static_html
    from nbgpu.sources.prometheus import PrometheusSource

    good = {"gpu": "0", "Hostname": "n1", "modelName": "H200"}
    odd = {"gpu": "1", "Hostname": 7, "modelName": ["H200"], "UUID": {"a": 1}}  # labels not strings
    prom = CraftedPrometheus([
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", **good}, [1e308, -1e308, -50, 40]),
        ({"__name__": "DCGM_FI_DEV_GPU_TEMP", **good}, [-50, 1e308, 45, -1e308]),
        ({"__name__": "DCGM_FI_DEV_POWER_USAGE", **good}, [1e308, 200, -1e308, 300]),
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", **odd}, [10, 20, 30, 40]),
    ])
    sampler = Sampler(PrometheusSource(prom.url, timeout_s=2.0, poll_s=0.1), interval=0.1, host=False)
    try:
        sampler.start()
        cap = Capture(sampler).start()
        time.sleep(0.6)
        cap.finish()
        page = static_html(cap)
        df = sampler.timeline.to_pandas()
    finally:
        sampler.stop()
        prom.close()
    assert "<svg" in page
    mine = df[df["gpu"] == "n1/0"]
    for col, lo, hi in (("util_pct", 0, 100), ("temp_c", 0, 200), ("power_w", 0, 1e6)):
        seen = mine[col].dropna()
        assert len(seen) and seen.between(lo, hi).all(), (col, seen.tolist())
    assert set(df["gpu"]) >= {"n1/0"}


def test_a_recording_with_100000_distinct_keys_reads_in_bounded_memory(run_file, tmp_path):
    import resource

    with open(run_file) as fh:
        header = fh.readline()
        first = json.loads(fh.readline())
    lines, k = [header.strip()], 0
    for n in range(1000):
        rec = {"timestamp": first["timestamp"], "gpu_id": n % 2, "util_pct": 5}
        for _ in range(100):
            rec[f"k{k}"] = 1
            k += 1
        lines.append(json.dumps(rec))
    keys = tmp_path / "keys.jsonl"
    keys.write_text("\n".join(lines) + "\n")

    def small_memory() -> None:  # 1.5 GB of address space: a frame of every key cannot fit
        resource.setrlimit(resource.RLIMIT_AS, (1500 * 2**20, resource.RLIM_INFINITY))

    done = subprocess.run([*NBGPU, "report", str(keys), "-o", str(tmp_path / "keys.html")],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          preexec_fn=small_memory)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-500:]
    assert "k99999" not in (tmp_path / "keys.html").read_text()


ESC = "\x1b[2J\x1b[31mred"


def test_escape_codes_in_labels_are_not_printed_raw(run_file, tmp_path, capsys):
    def evil(i, data):
        data["gpu_id"] = f"{ESC}/{data['gpu_id']}"

    bad = _rewrite(run_file, tmp_path / "ansi.jsonl", evil)
    capsys.readouterr()
    assert main(["compare", str(bad), run_file]) == 0
    out = capsys.readouterr()
    assert "\x1b" not in out.out + out.err and "\\x1b[31mred" in out.out


def test_escape_codes_in_labels_are_not_in_the_findings(tmp_path, capsys):
    from conftest_diagnostics import drive, sim_sampler

    s, clock = sim_sampler("imbalance", count=2)  # 40 s in which GPU 1 idles beside GPU 0
    drive(s, clock, 40.0)
    s.timeline.to_jsonl(str(tmp_path / "run.jsonl"))
    s.stop()

    def evil(i, data):
        data["gpu_id"] = f"{ESC}/{data['gpu_id']}"

    bad = _rewrite(str(tmp_path / "run.jsonl"), tmp_path / "ansi.jsonl", evil)
    with open(bad, "a") as fh:  # a cell mark named with escape codes: findings are listed under it
        fh.write(json.dumps({"timestamp": "2027-01-15T08:00:01+00:00", "event": "mark", "label": ESC}) + "\n")
    capsys.readouterr()
    assert main(["report", "--diagnose", str(bad)]) == 0
    out = capsys.readouterr().out
    assert "imbalance" in out and "\\x1b[31mred" in out
    assert "\x1b" not in out


def test_escape_codes_in_labels_are_not_in_the_record_summary(tmp_path, capsys):
    labels = {"gpu": "0", "Hostname": ESC}
    prom = CraftedPrometheus([({"__name__": "DCGM_FI_DEV_GPU_UTIL", **labels}, [10, 20, 30, 40]),
                        ({"__name__": "DCGM_FI_DEV_POWER_USAGE", **labels}, [90, 95, 99, 98])])
    try:
        capsys.readouterr()
        code = main(["record", "--source", f"prometheus={prom.url}", "--interval", "0.1", "-o",
                     str(tmp_path / "r.jsonl"), "--", sys.executable, "-c", "import time; time.sleep(1.5)"])
    finally:
        prom.close()
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "GPU " in out.err and "\\x1b[31mred" in out.err
    assert "\x1b" not in out.err


@pytest.mark.parametrize("bad", [["x"], {"a": 1}, 3.5, True])
def test_device_labels_that_are_not_text_are_not_a_traceback(bad, run_file, tmp_path, capsys):
    with open(run_file) as fh:
        header, *rest = fh.read().splitlines()
    head = json.loads(header)
    for key in ("name", "uuid", "parent", "host"):
        head["devices"][0][key] = bad
    crafted = tmp_path / "labels.jsonl"
    crafted.write_text("\n".join([json.dumps(head), *rest]) + "\n")
    assert main(["report", str(crafted), "-o", str(tmp_path / "r.html")]) == 0
    assert main(["compare", str(crafted), run_file, "-o", str(tmp_path / "c.html")]) == 0


def test_escape_codes_in_labels_are_not_in_the_live_lines_on_a_terminal(tmp_path):
    import pty

    labels = {"gpu": "0", "Hostname": ESC}
    prom = CraftedPrometheus([({"__name__": "DCGM_FI_DEV_GPU_UTIL", **labels}, [10, 20, 30, 40])])
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([*NBGPU, "record", "--source", f"prometheus={prom.url}", "-o",
                                 str(tmp_path / "a.jsonl"), "--", sys.executable, "-c",
                                 "import time; time.sleep(2.5)"], stderr=slave, stdout=subprocess.DEVNULL,
                                env=dict(os.environ, PYTHONPATH=str(ROOT)))
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(master)
        prom.close()
    text = seen.decode(errors="replace")
    assert "\x1b[2KGPU \\x1b[2J\\x1b[31mred/0" in text  # the live line, its label escaped
    assert "\x1b[31m" not in text and "\x1b[2J" not in text


def test_a_gpumon_cell_fed_by_a_prometheus_of_huge_values_is_not_a_traceback(kernel):
    lab = {"gpu": "0", "Hostname": "n1", "modelName": "H200"}
    prom = CraftedPrometheus([
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", **lab}, [1e308, -1e308, 1e308, -1e308]),
        ({"__name__": "DCGM_FI_DEV_POWER_USAGE", **lab}, [1e308, 200, -1e308, 300]),
        ({"__name__": "DCGM_FI_DEV_FB_USED", **lab}, [1e308, 1024, -1e308, 2048]),
    ])
    try:
        reply, outputs = kernel.run(f"%load_ext nbgpu\n%gpumon --source prometheus={prom.url} --interval 0.2")
        assert reply["status"] == "ok", outputs
        reply, outputs = kernel.run("%%gpumon\nimport time\ntime.sleep(1.5)")
    finally:
        kernel.run("%gpumon stop")
        prom.close()
    assert reply["status"] == "ok", outputs
    said = json.dumps(outputs)
    assert "OverflowError" not in said and "Traceback" not in said
