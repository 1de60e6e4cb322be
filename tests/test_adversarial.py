"""Adversarial inputs (issue 34): markup from outside, outputs over inputs, slow or huge bounds,
compare's exit codes and deeply nested JSON."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from nbgpu import Sampler, SimulatedGPUs
from nbgpu.cli import main
from nbgpu.errors import BadArgumentError
from nbgpu.profiles.capture import Capture
from nbgpu.profiles.comparison import parse_bound
from nbgpu.profiles.render import static_html, summary_html

EVIL = "<img src=x onerror=alert(1)>"
ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"


def test_cell_report_escapes_names_keys_and_marks():
    sampler = Sampler(SimulatedGPUs(count=1, seed=3, name=EVIL), interval=0.05, host=False).start()
    try:
        cap = Capture(sampler).start()
        sampler.mark(EVIL)
        time.sleep(0.3)
        cap.finish()
        page = static_html(cap)
    finally:
        sampler.stop()
    assert "<img" not in page
    assert ESCAPED in page
    from nbgpu.widgets.cell_report import build_widget

    view = build_widget(cap)
    html_values = [c.value for c in view.children if hasattr(c, "value") and isinstance(c.value, str)]
    assert html_values and not any("<img" in v for v in html_values)
    rows = [dict(r, gpu=EVIL) for r in cap.summary_rows]
    table = summary_html(rows)
    assert "<img" not in table and ESCAPED in table


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("adv") / "run.jsonl")
    code = main(["record", "--source", "sim", "--interval", "0.1", "-q", "-o", path, "--",
                 sys.executable, "-c", "import time; time.sleep(0.5)"])
    assert code == 0
    return path


def _lines(path) -> int:
    with open(path) as fh:
        return sum(1 for _ in fh)


def test_report_refuses_output_over_its_input(run_file, capsys):
    before = Path(run_file).read_text()
    assert main(["report", run_file, "-o", run_file]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "same file" in err[0]
    assert Path(run_file).read_text() == before


def test_report_of_html_refuses_to_replace_itself(tmp_path, capsys):
    page = tmp_path / "run.html"
    page.write_text("<html>a report</html>")
    assert main(["report", str(page)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert page.read_text() == "<html>a report</html>"


def test_compare_refuses_output_over_an_input(run_file, capsys):
    before = Path(run_file).read_text()
    assert main(["compare", run_file, run_file, "-o", run_file]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "same file" in err[-1] and "Traceback" not in "".join(err)
    assert Path(run_file).read_text() == before


def test_record_keeps_an_existing_file_when_the_command_does_not_start(run_file, capsys):
    lines = _lines(run_file)
    assert main(["record", "--source", "sim", "-q", "-o", run_file, "--", "nbgpu-no-such-command-x"]) == 127
    assert _lines(run_file) == lines


def test_fail_if_parses_in_linear_time():
    t = time.monotonic()
    with pytest.raises(BadArgumentError):
        parse_bound("energy_j>" + " " * 50_000 + "x")
    assert time.monotonic() - t < 2.0


@pytest.mark.parametrize("text", ["energy_j>+1e308kWh", "energy_j>1e400J", "energy_j>+1e999%"])
def test_fail_if_refuses_overflowing_limits(text, run_file, capsys):
    with pytest.raises(BadArgumentError, match="finite"):
        parse_bound(text)
    assert main(["compare", run_file, run_file, "--fail-if", text]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_compare_unreadable_input_exits_2(run_file, tmp_path, capsys):
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "missing.jsonl"), run_file]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nbgpu compare: error:")


def test_compare_empty_run_exits_2_with_a_user_line(run_file, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    with open(run_file) as fh:
        empty.write_text(fh.readline())  # the header line only: no readings
    capsys.readouterr()
    assert main(["compare", str(empty), run_file]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "summarize()" not in err[0] and "no GPU readings" in err[0]


@pytest.mark.parametrize("command", ["report", "compare"])
def test_deeply_nested_json_is_one_line(command, run_file, tmp_path, capsys):
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "\n")
    args = [str(deep)] if command == "report" else [str(deep), run_file]
    out = ["-o", str(tmp_path / "out.html")]
    capsys.readouterr()
    assert main([command, *args, *out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Recursion" not in err[0]
    assert not os.path.exists(tmp_path / "out.html")


def test_exporter_answers_while_many_clients_trickle():
    import socket
    import threading
    import urllib.request

    from nbgpu.exporter import Exporter, registry_for

    sampler = Sampler(SimulatedGPUs(count=1, seed=1), interval=0.1, host=False).start()
    exporter = Exporter(registry_for(sampler), port=0, timeout_s=5, request_deadline_s=1.0)
    socks = []
    stop = None
    try:
        for _ in range(80):
            s = socket.create_connection(("127.0.0.1", exporter.port), timeout=2)
            s.sendall(b"G")
            socks.append(s)
        stop = threading.Event()

        def trickle():  # one byte to each every 0.5 s, as slow clients do, until the end
            while not stop.wait(0.5):
                for s in socks:
                    try:
                        s.sendall(b"E")
                    except OSError:
                        pass

        threading.Thread(target=trickle, daemon=True).start()
        t0 = time.monotonic()
        with urllib.request.urlopen(exporter.url, timeout=8) as resp:
            assert resp.status == 200
        assert time.monotonic() - t0 < 8
    finally:
        if stop is not None:
            stop.set()
        for s in socks:
            s.close()
        exporter.close()
        sampler.stop()


def _trickling_http_server(step_s: float = 0.2):
    """A peer that answers valid JSON one byte every ``step_s``; yields its URL."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()
    body = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)

    def serve_one(conn):
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)
                for i in range(len(answer)):
                    if stop.is_set():
                        return
                    conn.sendall(answer[i:i + 1])
                    time.sleep(step_s)
            except OSError:
                pass

    def accept():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", lambda: (stop.set(), listener.close())


def test_prometheus_source_gives_up_on_a_trickling_answer():
    from nbgpu.errors import SourceError
    from nbgpu.sources.prometheus import PrometheusSource

    url, stop = _trickling_http_server()
    try:
        source = PrometheusSource(url, timeout_s=1.0)
        t = time.monotonic()
        with pytest.raises(SourceError, match="slowly"):
            source.open()
        assert time.monotonic() - t < 2.0
        source.state = "ok"  # as after a good open: a trickling poll must leave it unreachable
        t = time.monotonic()
        source.read(time.time())
        assert time.monotonic() - t < 2.0
        assert source.state == "unreachable"
    finally:
        stop()


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:abc", "http://[::1]:99999"])
def test_prometheus_bad_urls_are_one_line_errors(url):
    from nbgpu.errors import NbgpuError
    from nbgpu.sources.prometheus import PrometheusSource

    with pytest.raises(NbgpuError):
        source = PrometheusSource(url, timeout_s=0.5)
        source.open()


def test_record_keeps_an_existing_file_when_the_command_cannot_exec(run_file, tmp_path, capsys):
    script = tmp_path / "not-a-program"
    script.write_text("this is text, not a program\n")
    script.chmod(0o755)
    before = Path(run_file).read_text()
    assert main(["record", "--source", "sim", "-q", "-o", run_file, "--", str(script)]) == 127
    assert Path(run_file).read_text() == before
    assert sorted(os.listdir(os.path.dirname(run_file))) == ["run.jsonl"]
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("host", ["", "bad host!"])
def test_export_bad_host_is_one_line_exit_2(host, capsys):
    capsys.readouterr()
    assert main(["export", "--source", "sim", "--host", host, "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0] and "host" in err[0]


def test_exporter_logs_the_queue_depth_warning_once_per_episode():
    import logging

    from nbgpu.exporter import install_queue_filter

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("waitress.queue")
    logger.addHandler(handler)
    try:
        install_queue_filter()
        install_queue_filter(quiet_s=0.3)  # replaces the first: else its 60 s would hold the second back
        for depth in range(1, 500):
            logger.warning("Task queue depth is %d", depth)
        assert len(records) == 1
        time.sleep(0.35)
        logger.warning("Task queue depth is %d", 3)
        assert len(records) == 2
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:abc"])
def test_export_from_a_malformed_prometheus_url_is_one_line_exit_2(url, capsys):
    capsys.readouterr()
    assert main(["export", "--source", f"prometheus={url}", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Prometheus URL" in err[0]
