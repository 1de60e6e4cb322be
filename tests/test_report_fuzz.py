"""`nbgpu report` on bad files: one line each and exit code 2, never a traceback (also fuzzed)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbgpu import Sampler, SimulatedGPUs
from nbgpu.cli import main
from nbgpu.recorder import Recorder

# NBGPU_FUZZ_EXAMPLES raises the count per strategy for a longer run (default 120).
EXAMPLES = int(os.environ.get("NBGPU_FUZZ_EXAMPLES", "120"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TRIED: dict[str, int] = {}
OUTCOMES = {"reported": 0, "refused in one line": 0}


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> dict[str, bytes]:
    """A short recording of two simulated GPUs in each format, driven by a fake clock."""
    folder = tmp_path_factory.mktemp("valid")
    out = {}
    for ext in ("jsonl", "csv", "parquet"):
        s = Sampler(SimulatedGPUs(count=2, seed=3), interval=0.2, host=False)
        path = str(folder / f"run.{ext}")
        rec = Recorder(s, path, header={"command": ["python", "train.py"]})
        for i in range(12):
            s.step(1.9e9 + 0.2 * i)
            if i == 5:
                s.mark("epoch 1", t=1.9e9 + 1.0)
            if i % 4 == 3:
                rec.flush()
        rec.close()
        s.stop()
        with open(path, "rb") as fh:
            out[ext] = fh.read()
    return out


def report_of(tmp_path, name: str, data: bytes) -> tuple[int, str]:
    """Exit code and stderr of ``nbgpu report`` on ``data`` written as ``name``."""
    path = tmp_path / name
    path.write_bytes(data)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["report", str(path), "-o", str(tmp_path / "out.html")])
    return code, err.getvalue()


def check_outcome(code: int, err: str) -> None:
    assert code in (0, 2), (code, err)
    OUTCOMES["reported" if code == 0 else "refused in one line"] += 1
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("nbgpu report: error: cannot read"), err


def bad_cases(tmp_path) -> dict[str, tuple[str, str]]:
    """name -> (path, words the one line must hold)."""
    (tmp_path / "random.jsonl").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "notime.csv").write_text("gpu,util_pct\n0,50\n")
    (tmp_path / "corrupt.parquet").write_bytes(b"PAR1" + os.urandom(300) + b"PAR1")
    (tmp_path / "badtime.jsonl").write_text(json.dumps({"timestamp": "yesterday-ish", "gpu_id": 0,
                                                        "util_pct": 5}) + "\n")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "folder.jsonl").mkdir()
    (tmp_path / "badtime.csv").write_text("time,gpu,util_pct\n2026-01-01T00:00:00+00:00,0,1\nnoon,0,2\n")
    return {"random": ("random.jsonl", "no nbgpu records"), "notime": ("notime.csv", "no `time` column"),
            "corrupt": ("corrupt.parquet", "not a valid Parquet file"),
            "badtime": ("badtime.jsonl", "'yesterday-ish' is not an ISO 8601 time"),
            "empty": ("empty.csv", "empty"), "folder": ("folder.jsonl", "folder"),
            "badtime-csv": ("badtime.csv", "row 2: 'noon' is not an ISO 8601 time")}


def test_each_bad_file_is_one_line_and_exit_code_2(tmp_path, capsys):
    for name, (file, words) in bad_cases(tmp_path).items():
        path = str(tmp_path / file)
        assert main(["report", path]) == 2, name
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, (name, err)
        assert path in err and words in err, (name, err)


def test_a_bad_file_in_a_real_process_has_no_traceback(tmp_path):
    bad_cases(tmp_path)
    done = subprocess.run([sys.executable, "-m", "nbgpu.cli", "report", str(tmp_path / "corrupt.parquet")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("text", ["INF", "-inf", "Infinity"])
def test_an_infinite_value_reads_as_not_measured_and_the_report_is_drawn(tmp_path, valid, text):
    """No GPU metric is infinite: such a cell is unreadable, like text, and reads NaN (the
    fuzzer found that one made the report's timeline scale raise OverflowError)."""
    from nbgpu.runfile import load_run

    lines = valid["csv"].decode().splitlines()
    header = lines[0].split(",")
    col = header.index("power_w")
    row = lines[3].split(",")
    row[col] = text
    lines[3] = ",".join(row)
    data = ("\n".join(lines) + "\n").encode()
    code, err = report_of(tmp_path, "inf.csv", data)
    assert code == 0, err
    run = load_run(str(tmp_path / "inf.csv"))
    power = run.frame["power_w"]
    assert power.notna().any() and not power.isin([float("inf"), float("-inf")]).any()
    assert power.isna().sum() >= 1


def mutate(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    """Apply (kind, position, bytes) edits: overwrite, insert, delete or cut."""
    out = bytearray(data)
    for kind, pos, chunk in edits:
        at = pos % (len(out) + 1)
        if kind == 0:
            out[at:at + len(chunk)] = chunk
        elif kind == 1:
            out[at:at] = chunk
        elif kind == 2:
            del out[at:at + max(1, len(chunk))]
        else:
            del out[at:]
    return bytes(out)


EDITS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1 << 20), st.binary(min_size=0, max_size=8)),
                 min_size=1, max_size=6)
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                           | st.text(max_size=12), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=5)


def test_fuzzed_inputs_never_give_a_traceback(tmp_path, valid):
    @FUZZ
    @given(ext=st.sampled_from(["jsonl", "csv", "parquet"]), data=st.binary(max_size=2000))
    def random_bytes(ext, data):
        TRIED["random bytes"] = TRIED.get("random bytes", 0) + 1
        check_outcome(*report_of(tmp_path, f"r.{ext}", data))

    @FUZZ
    @given(ext=st.sampled_from(["jsonl", "csv", "parquet"]), edits=EDITS)
    def mutated_bytes(ext, edits):
        TRIED["mutated files"] = TRIED.get("mutated files", 0) + 1
        check_outcome(*report_of(tmp_path, f"m.{ext}", mutate(valid[ext], edits)))

    @FUZZ
    @given(picks=st.lists(st.tuples(st.integers(0, 10_000), st.text(max_size=16), JSON_VALUES),
                          min_size=1, max_size=5))
    def mutated_records(picks):
        TRIED["mutated JSON records"] = TRIED.get("mutated JSON records", 0) + 1
        lines = valid["jsonl"].decode().splitlines()
        for where, key, value in picks:
            i = where % len(lines)
            rec = json.loads(lines[i])
            keys = list(rec)
            rec[keys[where % len(keys)] if where % 3 else key] = value
            lines[i] = json.dumps(rec)
        check_outcome(*report_of(tmp_path, "j.jsonl", ("\n".join(lines) + "\n").encode()))

    @FUZZ
    @given(picks=st.lists(st.tuples(st.integers(0, 10_000), st.text(max_size=12)), min_size=1, max_size=5))
    def mutated_cells(picks):
        TRIED["mutated CSV cells"] = TRIED.get("mutated CSV cells", 0) + 1
        lines = [line.split(",") for line in valid["csv"].decode().splitlines()]
        for where, text in picks:
            row = lines[where % len(lines)]
            row[where % len(row)] = text
        check_outcome(*report_of(tmp_path, "c.csv", "\n".join(",".join(r) for r in lines).encode()))

    for check in (random_bytes, mutated_bytes, mutated_records, mutated_cells):
        check()
    total = sum(TRIED.values())
    print(f"\nreport reader fuzzed with {total} inputs, 0 tracebacks: {TRIED}, {OUTCOMES}")
    assert total >= 4 * min(EXAMPLES, 100)
    assert OUTCOMES["reported"] and OUTCOMES["refused in one line"]  # both paths were exercised
