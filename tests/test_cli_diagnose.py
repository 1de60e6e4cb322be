"""`nbgpu report --diagnose`: a recording replayed through the diagnostics rules."""

from __future__ import annotations

import json

import pytest

from conftest_diagnostics import drive, fired, sim_sampler
from nbgpu.cli import main


def _recording(path, scenario: str = "imbalance", seconds: float = 40.0, marks: bool = False) -> str:
    s, clock = sim_sampler(scenario, count=2)
    drive(s, clock, seconds)
    live = {a.rule for a in fired(s)}
    out = str(path)
    if out.endswith(".csv"):
        s.timeline.to_csv(out)
    elif out.endswith(".parquet"):
        s.timeline.to_parquet(out)
    else:
        s.timeline.to_jsonl(out)
        if marks:
            with open(out, "a") as fh:
                for i, t in enumerate((1, 20)):
                    stamp = f"2027-01-15T08:00:{t:02d}+00:00"
                    mark = {"event": "mark", "timestamp": stamp, "label": f"cell {i + 1}"}
                    fh.write(json.dumps(mark) + "\n")
    s.stop()
    assert "imbalance" in live or scenario != "imbalance" or seconds < 30  # the live rules see it too
    return out


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet"])
def test_diagnose_lists_the_finding_the_live_rules_raise(tmp_path, capsys, ext):
    if ext == "parquet":
        pytest.importorskip("pyarrow")
    path = _recording(tmp_path / f"run.{ext}")
    assert main(["report", "--diagnose", path]) == 0
    out = capsys.readouterr().out
    assert "imbalance [warning] GPU 1" in out and "GPU 1 idle" in out


def test_a_threshold_moves_the_bound(tmp_path, capsys):
    path = _recording(tmp_path / "run.jsonl")
    assert main(["report", "--diagnose", path, "--threshold", "imbalance_gap_pct=100"]) == 0
    assert "imbalance" not in capsys.readouterr().out
    assert main(["report", "--diagnose", path, "--threshold", "imbalance_gap_pct=20",
                 "--threshold", "imbalance_window_s=15"]) == 0
    assert "imbalance" in capsys.readouterr().out


def test_findings_are_grouped_by_cell_when_the_run_has_marks(tmp_path, capsys):
    path = _recording(tmp_path / "run.jsonl", marks=True)
    assert main(["report", "--diagnose", path]) == 0
    out = capsys.readouterr().out
    assert "cell cell 1:" in out


def test_the_exit_mark_of_record_is_not_a_cell(tmp_path, capsys):
    path = _recording(tmp_path / "run.jsonl")
    with open(path, "a") as fh:
        fh.write(json.dumps({"event": "mark", "timestamp": "2027-01-15T08:00:39+00:00",
                             "label": "command exited with code 0"}) + "\n")
    assert main(["report", "--diagnose", path]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}:") and "cell" not in out.splitlines()[0]


def test_json_parses(tmp_path, capsys):
    path = _recording(tmp_path / "run.jsonl")
    assert main(["report", "--diagnose", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rules = {f["rule"] for f in doc["findings"]}
    assert "imbalance" in rules
    f = next(f for f in doc["findings"] if f["rule"] == "imbalance")
    assert f["gpu"] == 1 and f["severity"] == "warning" and f["message"]


@pytest.mark.parametrize("item", ["nope=1", "imbalance_gap_pct=abc", "imbalance_gap_pct", "disabled=1",
                                  "imbalance_gap_pct=-3"])
def test_a_bad_threshold_is_one_line_and_exit_2(tmp_path, capsys, item):
    path = _recording(tmp_path / "run.jsonl", seconds=2)
    assert main(["report", "--diagnose", path, "--threshold", item]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "threshold" in err


def test_a_bad_file_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["report", "--diagnose", str(tmp_path / "missing.jsonl")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not a recording\n")
    assert main(["report", "--diagnose", str(bad)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_quiet_run_has_no_findings(tmp_path, capsys):
    path = _recording(tmp_path / "run.jsonl", scenario="steady", seconds=20)
    assert main(["report", "--diagnose", path]) == 0
    assert "no findings" in capsys.readouterr().out


def test_a_file_nbgpu_record_wrote_replays(tmp_path, capsys):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = str(tmp_path / "run.jsonl")
    proc = subprocess.run([sys.executable, "-m", "nbgpu.cli", "record", "--source", "sim",
                           "--interval", "0.1", "-q", "-o", path, "--", sys.executable, "-c",
                           "import time; time.sleep(2)"],
                          env=dict(os.environ, PYTHONPATH=root), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert main(["report", "--diagnose", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc["findings"], list) and all(f["cell"] is None for f in doc["findings"])


def test_a_recording_with_cell_events_is_judged_per_cell(tmp_path, capsys):
    path = _recording(tmp_path / "run.jsonl")
    with open(path, "a") as fh:
        for label, t0, t1 in (("short", 1, 4), ("long", 5, 39)):
            fh.write(json.dumps({"event": "cell", "timestamp": f"2027-01-15T08:00:{t0:02d}+00:00",
                                 "label": label, "start": f"2027-01-15T08:00:{t0:02d}+00:00",
                                 "end": f"2027-01-15T08:00:{t1:02d}+00:00"}) + "\n")
    assert main(["report", "--diagnose", path, "--json"]) == 0
    cells = {c["cell"]: c for c in json.loads(capsys.readouterr().out)["cells"]}
    # 3 s, shorter than the windows: judged on its own readings only, never on those before it
    assert all(f["message"].endswith("(judged on the cell's 3.0 s)") for f in cells["short"]["findings"])
    long = cells["long"]
    assert "imbalance" in {f["rule"] for f in long["findings"]}
    assert all(long["start_s"] <= f["start_s"] or "since before" in f["message"] for f in long["findings"])
    assert main(["report", "--diagnose", path]) == 0
    out = capsys.readouterr().out
    assert "cell short (" in out and "cell long (" in out
