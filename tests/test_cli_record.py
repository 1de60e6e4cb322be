"""`nbgpu record` and `nbgpu report` run as real processes, with simulated GPUs."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

from nbgpu import Sampler, SimulatedGPUs
from nbgpu.cli.report import load_run
from nbgpu.files import LEGACY_KEYS
from nbgpu.recorder import Recorder

NBGPU = [sys.executable, "-m", "nbgpu.cli"]
PY = sys.executable


def nbgpu(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*NBGPU, *args], capture_output=True, text=True, timeout=timeout, **kw)


def read_lines(path) -> tuple[list[dict], list[dict]]:
    rows, events = [], []
    with open(path) as fh:
        for line in fh:
            rec = json.loads(line)
            (events if "event" in rec else rows).append(rec)
    return rows, events


def test_exit_code_passes_through_and_the_file_is_complete(tmp_path):
    out = tmp_path / "run.jsonl"
    done = nbgpu("record", "--source", "sim", "--interval", "0.25", "-o", str(out), "--",
                 PY, "-c", "import time; time.sleep(2.5); raise SystemExit(3)")
    assert done.returncode == 3, done.stderr
    rows, events = read_lines(out)  # every line is whole JSON
    assert events[0]["event"] == "run" and events[0]["command"][0] == PY
    labels = [e.get("label") for e in events]
    assert "command started" in labels and "command exited with code 3" in labels
    assert events[-1]["event"] == "sampler" and events[-1]["label"] == "stopped"
    gpus = {r["gpu_id"] for r in rows}
    assert gpus == {0, 1}
    times = pd.to_datetime([r["timestamp"] for r in rows if r["gpu_id"] == 0], format="ISO8601")
    assert (times[-1] - times[0]).total_seconds() >= 2.0
    assert max(pd.Series(times).diff().dt.total_seconds().dropna()) < 1.0  # no hole
    last = rows[-1]
    for key in ("timestamp", "gpu_id", *LEGACY_KEYS):
        assert key in last, key
    assert last["memory_used_gb"] == pytest.approx(last["mem_used_bytes"] / 1e9, rel=1e-6)
    # The summary goes to stderr; the command's own output stays untouched.
    assert "GPU 0:" in done.stderr and "SIMULATED" in done.stderr and "recorder CPU" in done.stderr
    assert done.stdout == ""


def test_killed_recorder_leaves_all_but_the_last_second(tmp_path):
    out = tmp_path / "run.jsonl"
    proc = subprocess.Popen([*NBGPU, "record", "--source", "sim", "-o", str(out), "--",
                             PY, "-c", "import time; time.sleep(30)"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    children: list[psutil.Process] = []
    try:
        deadline = time.time() + 30
        while time.time() < deadline and (not out.exists() or out.stat().st_size < 2000):
            time.sleep(0.2)
        time.sleep(3.0)
        children = psutil.Process(proc.pid).children(recursive=True)
        killed_at = time.time()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        # The command gets the parent-death signal: it does not outlive its recorder.
        _, alive = psutil.wait_procs(children, timeout=10)
        assert children and not alive, alive
    finally:
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        proc.stderr.close()
    rows, events = read_lines(out)
    assert events[0]["event"] == "run"
    newest = max(pd.Timestamp(r["timestamp"]).timestamp() for r in rows)
    # Flushed every second, and the newest tick waits for its host reading, so about 1.5 s
    # is lost at most. The bound leaves room for a busy CI machine.
    assert killed_at - newest < 2.5, killed_at - newest
    per_gpu = pd.DataFrame(rows).groupby("gpu_id")["timestamp"].count()
    assert set(per_gpu.index) == {0, 1} and per_gpu.min() >= 6

    html_path = tmp_path / "report.html"
    done = nbgpu("report", str(out), "-o", str(html_path))
    assert done.returncode == 0, done.stderr
    page = html_path.read_text()
    assert page.count("<svg") == 1 and "<path" in page
    assert "Summary per GPU" in page and "NVIDIA H200 (simulated)" in page
    assert "<script" not in page and 'src="http' not in page and 'href="http' not in page


def test_report_shows_summary_marks_and_alerts(tmp_path):
    out = tmp_path / "run.jsonl"
    assert nbgpu("record", "--source", "sim", "-q", "-o", str(out), "--", PY, "-c",
                 "import time; time.sleep(1.5); raise SystemExit(3)").returncode == 3
    with open(out, "a") as fh:  # an alert as the diagnostics engine's recorder lines write it
        fh.write(json.dumps({"timestamp": "2026-01-01T00:00:00+00:00", "event": "alert",
                             "rule": "idle_gpu", "severity": "warning", "gpu_id": 1,
                             "start": "2026-01-01T00:00:00+00:00", "end": None,
                             "message": "GPU 1 <idle>", "suggestion": "check the data loader"}) + "\n")
        fh.write('{"timestamp": "2026-01-01T00:00:0')  # a torn last line
    run = load_run(str(out))
    assert run.skipped_lines == 1 and [e["rule"] for e in run.events if e["event"] == "alert"] == ["idle_gpu"]
    assert [label for _, label in run.marks()] == ["command started", "command exited with code 3"]
    done = nbgpu("report", str(out))
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "run.html").read_text()
    assert "GPU 1 &lt;idle&gt;" in page and "check the data loader" in page
    assert "command exited with code 3" in page and "1 unreadable line(s) skipped" in page
    summary = page.split("Summary per GPU")[1].split("</table>")[0]
    assert summary.count("<tr>") == 3  # header + 2 GPUs
    assert "SIMULATED" in page


def rows_in(path) -> int:
    """Rows of a recorded file, counted without nbgpu's reader."""
    if str(path).endswith(".csv"):
        return len(pd.read_csv(path))
    if str(path).endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_metadata(path).num_rows
    return len(read_lines(path)[0])


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet"])
def test_record_prints_what_report_computes_and_counts_true_rows(tmp_path, ext):
    from nbgpu.cli.report import summarize_run, summary_lines

    out = tmp_path / f"run.{ext}"
    done = nbgpu("record", "--source", "sim", "--interval", "0.2", "-o", str(out), "--", PY, "-c",
                 "import time; time.sleep(1.5)")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / f"run.{ext}.partial.jsonl").exists()
    run = load_run(str(out))
    assert set(run.frame["gpu"]) == {0, 1} and run.frame["util_pct"].notna().any()
    summary = summarize_run(run)
    for r in summary.rows:  # a short run: the counter is read once, so energy is integrated power
        assert r["energy_j"] == pytest.approx(r["power_mean_w"] * r["duration_s"], rel=0.25), r
    figures = summary_lines(summary)
    printed = [line.strip() for line in done.stderr.splitlines()]
    assert figures and all(f"SIMULATED {line}" in printed for line in figures), (figures, done.stderr)
    n = rows_in(out)
    assert n == len(run.frame) and f"nbgpu record: {n} rows from 2 GPU(s)" in done.stderr
    if ext != "csv":  # JSON lines and Parquet carry the run's header and marks
        assert run.header["command"][0] == PY and "simulated" in run.header["source"].lower()
        assert {d["name"] for d in run.header["devices"]} == {"NVIDIA H200 (simulated)"}
        assert [label for _, label in run.marks()][:1] == ["command started"]
        assert "command exited with code 0" in [label for _, label in run.marks()]
    assert nbgpu("report", str(out), "-o", str(tmp_path / "r.html")).returncode == 0
    assert "<svg" in (tmp_path / "r.html").read_text()


def test_recorder_keys_match_timeline_to_jsonl(tmp_path):
    s = Sampler(SimulatedGPUs(count=2), interval=0.2)
    rec = Recorder(s, str(tmp_path / "a.jsonl"))
    now = 1.9e9
    for i in range(9):
        s.step(now + 0.2 * i)
        if i == 5:
            rec.flush()
    rec.close()
    s.timeline.to_jsonl(str(tmp_path / "b.jsonl"))
    s.stop()
    mine, _ = read_lines(tmp_path / "a.jsonl")
    theirs, _ = read_lines(tmp_path / "b.jsonl")
    theirs_keys = set(theirs[-1])
    assert set(mine[-1]) <= theirs_keys
    assert {"timestamp", "gpu_id", *LEGACY_KEYS} <= set(mine[-1])
    # one row per tick and GPU; buffered power averaged into it
    assert len(mine) <= 2 * (s.status().ticks + 1)


def test_samples_drained_after_their_tick_was_written_are_not_moved_to_a_later_tick(tmp_path):
    # Utilisation is drained every few seconds (4 s with nobody watching), so when a tick's
    # row is due its samples may still be in NVML's buffer. Flushed once a second, the file
    # must hold each tick's own mean, the one the whole timeline gives afterwards.
    clock = [1.9e9]
    sim = SimulatedGPUs(count=1, seed=4, clock=lambda: clock[0], scenario="input_bound")
    s = Sampler(sim, interval=1.0, clock=lambda: clock[0], diagnostics=False)
    recs = [Recorder(s, str(tmp_path / "a.jsonl")), Recorder(s, str(tmp_path / "a.csv"))]
    for k in range(1, 3001):  # 30 s in 10 ms steps, a flush each second
        clock[0] = 1.9e9 + 0.01 * k
        if clock[0] >= s.next_wake():
            s.step(clock[0])
        if k % 100 == 0:
            for rec in recs:
                rec.flush()
    s.request("edge")  # the last step of a stopping thread drains what the buffers still hold
    s.step(clock[0])
    for rec in recs:
        rec.close()
    s.stop()
    mine, _ = read_lines(tmp_path / "a.jsonl")
    written = {round(pd.Timestamp(r["timestamp"]).timestamp(), 3): r["gpu_util_percent"] for r in mine}
    frame = s.timeline.to_pandas()
    truth = {round(t.timestamp(), 3): u for t, u in zip(frame["time"], frame["util_pct"], strict=True)}
    common = [t for t in sorted(written) if t in truth and truth[t] == truth[t]][2:]
    assert len(common) >= 20
    wrong = [(t, written[t], truth[t]) for t in common if written[t] != pytest.approx(truth[t], abs=0.05)]
    assert not wrong, wrong[:5]
    written_csv = pd.read_csv(tmp_path / "a.csv")
    assert written_csv["host_ram_used_bytes"].iloc[1:].notna().all()  # each tick with its host row


def test_recorder_writes_alerts_once(tmp_path):
    from nbgpu import Alert

    s = Sampler(SimulatedGPUs(count=2), interval=0.2)
    t0 = 1.9e9
    alerts = [Alert("memory_leak", "warning", 0, t0, t0 + 1, "memory grows", "free caches"),
              Alert("idle_gpu", "info", 1, t0, None, "GPU 1 idle", "use it")]
    s.alert_list = lambda: list(alerts)
    rec = Recorder(s, str(tmp_path / "a.jsonl"))
    for i in range(3):
        s.step(t0 + 0.2 * i)
    rec.flush()
    rec.flush()
    rec.close()
    s.stop()
    _, events = read_lines(tmp_path / "a.jsonl")
    written = [(e["rule"], e["gpu_id"], e["end"] is None) for e in events if e["event"] == "alert"]
    assert written == [("memory_leak", 0, False), ("idle_gpu", 1, True)]


def test_live_status_on_a_terminal_and_quiet_in_a_pipe(tmp_path):
    master, slave = pty.openpty()
    proc = subprocess.Popen([*NBGPU, "record", "--source", "sim", "-o", str(tmp_path / "a.jsonl"), "--",
                             PY, "-c", "import time; time.sleep(2.5)"],
                            stderr=slave, stdout=subprocess.DEVNULL)
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
    proc.wait(timeout=30)
    os.close(master)
    text = seen.decode(errors="replace")
    assert "\x1b[2KGPU 0" in text and "\x1b[2KGPU 1" in text and "util" in text
    piped = nbgpu("record", "--source", "sim", "-o", str(tmp_path / "b.jsonl"), "--", PY, "-c",
                  "import time; time.sleep(1.5)")
    assert "\x1b[" not in piped.stderr and "GPU 0:" in piped.stderr


@pytest.mark.parametrize("args", [
    ["record", "--interval", "-1", "--", "true"],
    ["record", "--source", "bogus", "--", "true"],
    ["record", "--source", "sim"],
    ["record", "--source", "sim", "-o", "run.txt", "--", "true"],
    ["export", "--port", "99999"],
    ["frobnicate"],
    [],
])
def test_bad_arguments_give_one_line_and_exit_2(args, tmp_path):
    done = nbgpu(*args, cwd=tmp_path)
    assert done.returncode == 2, done
    if args:
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "error" in done.stderr


def test_failures_give_one_line(tmp_path):
    done = nbgpu("report", str(tmp_path / "missing.jsonl"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "no such file" in done.stderr
    done = nbgpu("record", "--source", "sim", "-q", "-o", str(tmp_path / "x.jsonl"), "--",
                 "no-such-command-xyz")
    assert done.returncode == 127 and "cannot run 'no-such-command-xyz'" in done.stderr


def test_help_of_every_command():
    done = nbgpu("--help")
    assert done.returncode == 0
    for cmd in ("record", "report", "demo", "export"):
        assert cmd in done.stdout
        sub = nbgpu(cmd, "--help")
        assert sub.returncode == 0 and "usage: nbgpu " + cmd in sub.stdout
    assert "-- CMD ARGS" in nbgpu("record", "--help").stdout
    assert "127.0.0.1" in nbgpu("export", "--help").stdout


def test_a_tick_row_keeps_the_peak_of_the_samples_folded_into_it(tmp_path):
    # A memory peak between two ticks (the 10 ms memory lane a capture holds) is what the
    # OOM rule needs on replay: the row keeps it in mem_used_max_bytes, as Timeline does.
    clock = [1.9e9]
    sim = SimulatedGPUs(count=1, seed=2, clock=lambda: clock[0], scenario="leak")
    s = Sampler(sim, interval=1.0, clock=lambda: clock[0], diagnostics=False)
    rec = Recorder(s, str(tmp_path / "a.jsonl"))
    with s.fast_memory(0.01):
        for k in range(1, 1201):
            clock[0] = 1.9e9 + 0.01 * k
            if clock[0] >= s.next_wake():
                s.step(clock[0])
            if k % 100 == 0:
                rec.flush()
    rec.close()
    s.stop()
    mine, _ = read_lines(tmp_path / "a.jsonl")
    frame = s.timeline.to_pandas()
    peaks = frame["mem_used_max_bytes"]
    truth = {round(t.timestamp(), 3): m for t, m in zip(frame["time"], peaks, strict=True)}
    written = {round(pd.Timestamp(r["timestamp"]).timestamp(), 3): r.get("mem_used_max_bytes") for r in mine}
    common = [t for t in sorted(written) if t in truth][1:-1]  # the final flush folds the rest in
    assert len(common) >= 8
    assert all(written[t] == pytest.approx(truth[t]) for t in common)
    assert any(r["mem_used_max_bytes"] > r["mem_used_bytes"] for r in mine[1:])  # a peak above the mean
