"""The HTML report in a real headless browser (Debian's chromium driven by Playwright), on real results.

Set-up: ``bash scripts/setup.sh --test`` installs chromium (apt) and Playwright's Python package; Playwright's own
browser download is not used. The screenshot is kept as ``artifacts/report.png``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from mirage.cli import main as cli_main
from mirage.report import report_html

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
EVIL = "</script><script>window.__mirage_pwned = 2</script><img src=x onerror='window.__mirage_pwned=3'>"


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: run `bash scripts/setup.sh --test`.")
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `bash scripts/setup.sh --test` (apt-get install chromium).")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def report(real_results, tmp_path_factory):
    """The report of the real results, plus a copy of the generated one whose texts carry markup, written through
    the ``mirage view`` command."""
    generated, forced = real_results
    evil = copy.deepcopy(generated)
    evil.id = "evil"
    evil.question = "Markup <i>inside</i> the question? " + EVIL
    for span in evil.spans:
        span.text = EVIL
    for tok in evil.tokens:
        for cue in tok.top_context:
            cue.token = EVIL
    folder = tmp_path_factory.mktemp("report")
    results = folder / "results.jsonl"
    results.write_text("".join(json.dumps({"key": f"{i}:x", "index": i, **r.to_dict()}) + "\n"
                               for i, r in enumerate([generated, forced, evil])))
    out = folder / "report.html"
    assert cli_main(["view", str(results), "-o", str(out)]) == 0
    return out, [generated, forced, evil]


def test_report_is_self_contained_and_escaped(report):
    path, _ = report
    html = path.read_text()
    assert "http://" not in html and "https://" not in html and "src=" not in html.replace("src=x", "")
    assert html.count("<script") == 2  # the data block and the page script, nothing from the results
    assert html == report_html(report[1], title="mirage report: results.jsonl")


def test_report_in_a_real_browser(browser, report):
    path, results = report
    generated = results[0]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(path.as_uri())
    entries = page.locator("nav .entry")
    assert entries.count() == 3

    # Search narrows the list; clearing it brings every item back.
    page.fill("#search", "sub-divisions")
    assert page.locator("nav li:not([hidden]) .entry").count() == 1
    assert "1 of 3" in page.inner_text("#count")
    page.fill("#search", "")
    assert page.locator("nav li:not([hidden]) .entry").count() == 3

    # Clicking an item shows its panel.
    entries.nth(1).click()
    assert page.locator("section.item:not([hidden])").get_attribute("data-item") == "2"
    entries.nth(0).click()
    panel = page.locator("section.item:not([hidden])")
    assert panel.get_attribute("data-item") == "1"
    assert "active" in (entries.nth(0).get_attribute("class") or "")
    assert generated.question in panel.locator("h2").inner_text()

    # Highlighted spans: one mark per attributed span, coloured, with its document ids.
    marks = panel.locator(".answer mark.mirage-span")
    assert generated.spans and marks.count() == len(generated.spans)
    for k, span in enumerate(generated.spans):
        assert marks.nth(k).get_attribute("data-docs") == ",".join(map(str, span.docs))
        assert marks.nth(k).evaluate("m => getComputedStyle(m).backgroundColor") != "rgba(0, 0, 0, 0)"
    # Both citation sets per sentence, disagreements marked.
    rows = panel.locator("table.sentences tbody tr")
    assert rows.count() == len(generated.sentences)
    for k, s in enumerate(generated.sentences):
        mirage_cell = rows.nth(k).locator("td.mirage").inner_text()
        self_cell = rows.nth(k).locator("td.self").inner_text()
        assert all(f"[{d}]" in mirage_cell for d in s.mirage_citations) and (s.mirage_citations or "none" in mirage_cell)
        assert all(f"[{d}]" in self_cell for d in s.self_citations) and (s.self_citations or "none" in self_cell)
        differ = sorted(s.mirage_citations) != sorted(s.self_citations)
        assert ("differ" in (rows.nth(k).get_attribute("class") or "")) == differ
    # The CTI chart has one bar per answer token.
    assert panel.locator("svg.cti rect").count() == len(generated.tokens)

    # A document holding <script> shows as text, and nothing from it ran.
    docs_text = panel.locator("ol.docs").inner_text()
    assert "<script>window.__mirage_pwned = 1</script>" in docs_text
    assert "Kitchen notes <b>not bold</b>" in docs_text
    assert page.evaluate("window.__mirage_pwned") is None

    # Hovering a span shows its top context tokens.
    marks.first.hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    cue = next(t for t in generated.tokens if t.index in generated.spans[0].tokens and t.top_context).top_context[0]
    assert cue.token.strip() in tip.inner_text()

    path_png = ROOT / "artifacts" / "report.png"
    path_png.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(path_png), full_page=True)
    assert path_png.stat().st_size > 10_000

    # Markup inside answers, spans and context tokens (also in the embedded JSON) stays text.
    entries.nth(2).click()
    evil = page.locator("section.item:not([hidden])")
    assert EVIL in evil.locator("h2").inner_text()
    evil.locator("mark.mirage-span").first.hover()
    tip.wait_for(state="visible")
    assert EVIL in tip.inner_text()
    assert page.evaluate("window.__mirage_pwned") is None
    assert errors == []
    page.close()
