"""``%config NbGpu.*`` in a real kernel reaches the sampler a new panel starts."""

from __future__ import annotations

import pytest

from conftest_profiles import kernel_fixture  # noqa: F401 - fixture

pytestmark = pytest.mark.kernel


def test_config_interval_reaches_a_new_monitor(kernel):
    reply, outputs = kernel.run("%load_ext nbgpu\n%config NbGpu.interval = 0.7\n"
                                "import nbgpu\nm = nbgpu.GPUMonitor(source='sim')")
    assert reply["status"] == "ok", outputs
    assert kernel.value("m.sampler.interval") == 0.7
    assert kernel.value("nbgpu.Sampler('sim').interval") == 0.7


VALID = {"NBGPU_INTERVAL": ("0.5", 0.5), "NBGPU_WINDOW_S": ("120", 120.0),
         "NBGPU_HISTORY_FILE": ("/tmp/h.jsonl", "/tmp/h.jsonl"), "NBGPU_PRICE_PER_KWH": ("0.3", 0.3),
         "NBGPU_CURRENCY": ("CHF", "CHF"), "NBGPU_CARBON_G_PER_KWH": ("400", 400.0),
         "NBGPU_FLIGHT_RECORDER": ("0", False), "NBGPU_EXPORTER_PORT": ("9555", 9555),
         "NBGPU_STACK_SAMPLES_HZ": ("4", 4)}


@pytest.mark.kernel  # a fresh interpreter each: the settings are read once a process
@pytest.mark.parametrize("var", sorted(VALID))
def test_every_environment_variable_sets_its_setting_from_its_text(var):
    import os
    import subprocess
    import sys

    from nbgpu.config import ENV

    assert set(VALID) == set(ENV)  # a new variable gets a row here
    raw, want = VALID[var]
    code = f"from nbgpu.config import settings; print(repr(settings().{ENV[var]}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **{var: raw}))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == repr(want)


@pytest.mark.kernel  # a fresh interpreter: the settings are read once a process
@pytest.mark.parametrize("var", ["NBGPU_PRICE_PER_KWH", "NBGPU_CARBON_G_PER_KWH"])
def test_a_negative_rate_in_the_environment_is_refused_in_one_line(var):
    import os
    import subprocess
    import sys

    code = "from nbgpu.config import settings; settings()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **{var: "-1"}))
    assert done.returncode != 0 and f"${var}='-1' is not a valid setting" in done.stderr
    assert ">= 0" in done.stderr.strip().splitlines()[-1]


def test_the_cells_and_history_settings_act_in_a_running_kernel(kernel, tmp_path):
    """``%config NbGpu.cells`` turns per-cell profiling on and off at once, ``cells_min_s``
    decides which cells get a line, ``history_path`` keeps the history in that file."""
    history = tmp_path / "history.jsonl"
    reply, outputs = kernel.run("%load_ext nbgpu\nimport nbgpu, time\nfrom nbgpu import session\n"
                                "session.ensure_sampler('sim', 0.1)\n"
                                f"%config NbGpu.history_path = {str(history)!r}\n"
                                "%config NbGpu.cells_min_s = 0\n%config NbGpu.cells = 'on'")
    assert reply["status"] == "ok", outputs
    assert "profiling every cell" in str(outputs)
    _, outputs = kernel.run("time.sleep(0.3)")
    assert outputs, "a profiled cell of 0.3 s gets its line at cells_min_s 0"
    kernel.run("%config NbGpu.cells_min_s = 30")
    _, outputs = kernel.run("time.sleep(0.3)")
    assert not outputs, outputs  # profiled, kept, but too short for a line
    kept = len(history.read_text().splitlines())
    assert kept >= 2 and kernel.value("len(nbgpu.history())") >= kept
    kernel.run("%config NbGpu.cells = 'off'")
    before = kernel.value("len(nbgpu.history())")
    kernel.run("time.sleep(0.1)")
    assert kernel.value("len(nbgpu.history())") == before


def test_the_gpus_setting_reaches_a_new_panel_given_none(kernel):
    reply, outputs = kernel.run("%load_ext nbgpu\nimport nbgpu\n%config NbGpu.gpus = '1'")
    assert reply["status"] == "ok", outputs
    try:
        assert kernel.value("nbgpu.GPUMonitor(source='sim:2', start=False).gpus") == [1]
        assert kernel.value("nbgpu.GPUMonitor(source='sim:2', gpus=0, start=False).gpus") == [0]
        reply, outputs = kernel.run("%config NbGpu.gpus = '5'\n%gpumon --source sim:2")
        said = str(outputs)  # a magic's one line, naming the setting the list came from
        assert "out of range" in said and "NbGpu.gpus = '5'" in said and "Traceback" not in said, said
    finally:
        kernel.run("%config NbGpu.gpus = ''")
    assert kernel.value("nbgpu.GPUMonitor(source='sim:2', start=False).gpus") is None


def test_a_thresholds_file_reaches_a_new_sampler_given_none(kernel, tmp_path):
    path = tmp_path / "thresholds.json"
    path.write_text('{"idle_window_s": 30}')
    reply, outputs = kernel.run("%load_ext nbgpu\nimport nbgpu\n"
                                f"%config NbGpu.thresholds_file = {str(path)!r}")
    assert reply["status"] == "ok", outputs
    try:
        assert kernel.value("nbgpu.Sampler('sim').diagnostics.thresholds.idle_window_s") == 30
        given = "nbgpu.Sampler('sim', thresholds={'eval_every_s': 3}).diagnostics.thresholds"
        assert kernel.value(f"{given}.idle_window_s") == 10  # given thresholds win, whole
        kernel.run(f"%config NbGpu.thresholds_file = {str(path) + '.gone'!r}")
        reply, outputs = kernel.run("try:\n    nbgpu.Sampler('sim')\nexcept nbgpu.NbgpuError as e:\n"
                                    "    print('said:', e)")
        said = str(outputs)
        assert "cannot read thresholds from" in said and "(NbGpu.thresholds_file)" in said, said
    finally:
        kernel.run("%config NbGpu.thresholds_file = ''")
