"""The panel's HTML text: escaped once per distinct text, and still escaped."""

from __future__ import annotations

from nbgpu.widgets import text


def test_texts_are_escaped_and_the_memory_of_them_stays_bounded() -> None:
    html = text.values_html([("<b>&", 'say "hi"', False), ("42 %", "ok", True)])
    assert "&lt;b&gt;&amp;" in html and "&quot;hi&quot;" in html and "<b>&" not in html
    assert text.values_html([("<b>&", 'say "hi"', False), ("42 %", "ok", True)]) == html
    for i in range(text.MAX_ESCAPED * 2):
        text.badge(f"t{i}<", "red")
    assert text._escape.cache_info().currsize <= text.MAX_ESCAPED
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
