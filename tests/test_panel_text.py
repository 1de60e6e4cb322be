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
