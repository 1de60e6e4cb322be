"""The panel's HTML text: escaped once per distinct text, and still escaped."""

from __future__ import annotations

from nbgpu.widgets import text


def test_texts_are_escaped_and_the_memory_of_them_stays_bounded() -> None:
    html = text.values_html([("<b>&", 'say "hi"', False), ("42 %", "ok", True)])
    assert "&lt;b&gt;&amp;" in html and "&quot;hi&quot;" in html and "<b>&" not in html
    assert text.values_html([("<b>&", 'say "hi"', False), ("42 %", "ok", True)]) == html
    for i in range(text.MAX_ESCAPED * 2):
        text.badge(f"t{i}<", "red")
    assert len(text._escaped) <= text.MAX_ESCAPED
    assert text.badge("x<y", "red").count("x&lt;y") == 1


def test_each_column_says_its_value_in_its_unit_and_a_dash_when_there_is_none() -> None:
    import math

    from nbgpu.sources.base import Device
    from nbgpu.widgets.columns import COLUMNS

    card = Device(0, "GPU", mem_total_bytes=80 * 2**30, power_limit_w=700.0)
    row = {"util_pct": 87.4, "mem_used_bytes": 40 * 2**30, "power_w": 301.0, "temp_c": 61.0,
           "pcie_rx_bytes_per_s": 2**30, "pcie_tx_bytes_per_s": math.nan}
    said = {k: text.gpu_value(col, row, card) for k, col in COLUMNS.items()}
    assert said["util"] == "87 %" and said["power"] == "301/700 W"
    assert said["mem"] == "40/80"  # GiB, as the column title says
    assert "61" in said["temp"] and said["pcie"].startswith("↓1.0 GiB/s")
    assert text.gpu_value(COLUMNS["power"], {"power_w": 300.0}, Device(1, "GPU")) == "300 W"
    assert {text.gpu_value(col, {}, card) for col in COLUMNS.values()} == {"–"}


def test_value_texts_with_kept_metric_sets_are_the_texts_without() -> None:
    import itertools
    import math

    from nbgpu.metrics import HOST_KEY
    from nbgpu.sources.base import Device
    from nbgpu.widgets.columns import COLUMNS
    from nbgpu.widgets.readout import reported_sets, value_texts

    rows = [Device(0, "GPU", metrics=("util_pct", "mem_used_bytes", "power_w", "temp_c", "sm_active_pct")),
            Device(1, "GPU", metrics=()),
            Device("1/0", "slice", parent=1, mig=True, metrics=("mem_used_bytes",)),
            Device(2, "GPU", metrics=("tensor_active_pct", "util_pct")), Device(HOST_KEY, "host")]
    states = ("live", "stale", "failed", "unsupported", None)
    for k, (a, b) in enumerate(itertools.product(states, states)):
        latest = {}
        for i, dev in enumerate(rows[:-1]):
            st = {m: (a if (i + k) % 2 else b) for m in
                  ("util_pct", "mem_used_bytes", "power_w", "temp_c", "sm_active_pct", "tensor_active_pct")}
            st = {m: s for m, s in st.items() if s is not None}
            latest[dev.key] = {"states": st, "util_pct": 40.0 + i, "mem_used_bytes": 2.0**33,
                               "temp_c": math.nan, "last_good": {"temp_c": 61.0}, "power_w": 300.0,
                               "sm_active_pct": 9.0}
        host = {"host_cpu_pct": 12.0, "host_ram_used_bytes": 2.0**34, "host_ram_total_bytes": 2.0**36}
        for col in COLUMNS.values():
            for running, lost in ((True, {}), (False, {2: 1.7e9})):
                want = value_texts(col, rows, latest, host, running, lost)
                assert value_texts(col, rows, latest, host, running, lost, reported_sets(rows)) == want


def test_a_columns_tooltip_is_said_once_and_a_row_that_differs_keeps_its_own() -> None:
    """Rows inherit their column's tooltip (the browser shows an ancestor's title); only a row
    whose tooltip differs (stale, the host row) carries one: the values' HTML goes out every
    refresh, and 45 copies of one help text were half of it."""
    import re

    help_text = "time a kernel was running"
    html = text.values_html([("91 %", help_text, False), ("stale", "last good value 90 %", True),
                             ("5 %", "CPU of the whole machine", False)], help_text)
    assert html.count(help_text) == 1
    assert re.search(r'class="[^"]*nbgpu-w[^"]*" title="time a kernel was running"', html)
    rows = re.findall(r'<div class="nbgpu-r[^"]*"([^>]*)>([^<]*)</div>', html)
    assert rows == [("", "91 %"), (' title="last good value 90 %"', "stale"),
                    (' title="CPU of the whole machine"', "5 %")]
