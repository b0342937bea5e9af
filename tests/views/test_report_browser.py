"""The HTML report in a real headless browser (Debian's chromium driven by Playwright), on real results.

Set-up: ``bash scripts/setup.sh --test`` installs chromium (apt) and Playwright's Python package; Playwright's own
browser download is not used. The screenshot is kept as ``artifacts/report.png``.
"""

from __future__ import annotations

import copy
import csv
import io
import json
from pathlib import Path

import pytest

from mirage import Mirage, MirageConfig
from mirage.attribution.prompts import mark_sentences
from mirage.cli import main as cli_main
from mirage.views.rendering import NO_SELF_CITATION
from mirage.views.report import align_sentences, cue_share, report_html, span_cues

ROOT = Path(__file__).resolve().parents[2]
EVIL = "</script><script>window.__mirage_pwned = 2</script><img src=x onerror='window.__mirage_pwned=3'>"


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
        assert (all(f"[{d}]" in mirage_cell for d in s.mirage_citations)
                and (s.mirage_citations or "none" in mirage_cell))
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

    # The documents show the saliency as heat over their text, the prompt's scaffolding greyed.
    heat = panel.locator("ol.docs mark.heat")
    assert heat.count() > 0
    scaffold = panel.locator("ol.docs .scaffold").first
    assert scaffold.inner_text().startswith("Document [1]")
    grey = scaffold.evaluate("e => getComputedStyle(e).color")
    assert grey != panel.locator("ol.docs .doctext").first.evaluate("e => getComputedStyle(e).color")

    # Hovering a span shows its top context tokens with their shares, and outlines the heat it drew on.
    marks.first.hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    token = next(t for t in generated.tokens if t.index in generated.spans[0].tokens and t.top_context)
    assert token.top_context[0].token.strip() in tip.inner_text()
    first = span_cues(generated, generated.spans[0])[0]  # the strongest share over the span's tokens
    assert first["share"] == pytest.approx(max(cue_share(t, c) for t in generated.tokens
                                               if t.index in generated.spans[0].tokens for c in t.top_context),
                                           abs=1e-4)
    assert tip.locator("tr").first.inner_text().split()[-1] == f"{100 * first['share']:.1f}%"
    linked = panel.locator("ol.docs mark.heat.linked")
    assert linked.count() > 0
    span_tokens = {str(i) for i in generated.spans[0].tokens}
    assert all(span_tokens & set((linked.nth(k).get_attribute("data-tokens") or "").split())
               for k in range(linked.count()))

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


@pytest.fixture(scope="module")
def compare_report(report, tmp_path_factory):
    """Two runs written through ``mirage view A B``: A holds the generated, forced and markup items; B a copy of the
    forced one citing another document in its first sentence, the markup item unchanged, and an item of its own."""
    generated, forced, evil = report[1]
    forced_b = copy.deepcopy(forced)
    s0 = forced_b.sentences[0]
    s0.mirage_citations = [] if s0.mirage_citations else [1]
    only_b = copy.deepcopy(generated)
    only_b.question = "Is raw cookie dough safe to eat?"
    folder = tmp_path_factory.mktemp("compare")
    paths = []
    for name, run in [("a.jsonl", [generated, forced, evil]), ("b.jsonl", [forced_b, copy.deepcopy(evil), only_b])]:
        paths.append(folder / name)
        paths[-1].write_text("".join(json.dumps(r.to_dict()) + "\n" for r in run))
    out = folder / "compare.html"
    assert cli_main(["view", *map(str, paths), "-o", str(out)]) == 0
    return out, (generated, forced, evil), (forced_b, only_b)


def _marks(ids: list[int]) -> str:
    return "".join(f"[{i}]" for i in ids)


def _download(page, button) -> list[list[str]]:
    with page.expect_download() as info:
        button.click()
    text = Path(info.value.path()).read_text(encoding="utf-8")
    assert text.startswith("\ufeff")
    return list(csv.reader(io.StringIO(text[1:])))


def test_two_runs_compared_in_a_real_browser(browser, compare_report):
    path, (generated, forced, evil), (forced_b, only_b) = compare_report
    page = browser.new_page(viewport={"width": 1400, "height": 900}, accept_downloads=True)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(path.as_uri())
    html = path.read_text()
    assert "http://" not in html and "https://" not in html and html.count("<script") == 2

    # Items matched by question and documents; those in one run only are listed as such.
    entries = page.locator("nav .entry")
    assert entries.count() == 4
    assert "only in A" in entries.nth(0).inner_text() and "only in B" in entries.nth(3).inner_text()
    assert "A ≠ B" in entries.nth(1).inner_text() and "A ≠ B" not in entries.nth(2).inner_text()
    assert "1 only in A, 1 only in B" in page.inner_text("header")

    # Both runs side by side.
    entries.nth(1).click()
    panel = page.locator("section.item:not([hidden])")
    assert panel.locator(".runs").first.locator(".run .answer").count() == 2
    assert panel.locator(".run h3.runlabel").first.inner_text() == "A: a.jsonl"
    rows = panel.locator("table.sentences tbody tr")
    assert rows.count() == len(align_sentences(forced, forced_b)) == len(forced.sentences)
    assert "diverge" in (rows.nth(0).get_attribute("class") or "")
    assert all("diverge" not in (rows.nth(k).get_attribute("class") or "") for k in range(1, rows.count()))
    assert panel.locator("ol.docs").count() == 2 and panel.locator("ol.docs mark.heat").count() > 0

    # The filter: items, then rows, where the two runs' citations differ.
    page.select_option("#filter", "runs")
    assert "3 of 4" in page.inner_text("#count")
    assert page.locator("nav li:not([hidden]) .entry").count() == 3
    assert entries.nth(2).locator("xpath=..").get_attribute("hidden") is not None
    visible = panel.locator("table.sentences tbody tr:not([hidden])")
    assert visible.count() == 1

    # CSV of the visible rows of this item's table.
    table = _download(page, panel.locator("button.csv"))
    assert table[0] == ["Sentence", "A self-citation", "A mirage", "B self-citation", "B mirage", "agreement"]
    s_a, s_b = forced.sentences[0], forced_b.sentences[0]

    def self_cell(res, s) -> str:  # a given answer without marks has no self-citation: the cell says so
        return _marks(s.self_citations + s.invalid_self_citations) if res.can_self_cite else NO_SELF_CITATION

    assert table[1:] == [[s_a.text, self_cell(forced, s_a), _marks(s_a.mirage_citations), self_cell(forced_b, s_b),
                          _marks(s_b.mirage_citations), table[1][5]]]
    assert "A ≠ B" in table[1][5]

    # CSV of every listed item, rows as filtered.
    listed = _download(page, page.locator("#csv-all"))
    assert listed[0][:3] == ["item", "question", "Sentence"]
    assert [(r[0], r[1]) for r in listed[1:]] == (
        [("1", generated.question)] * len(generated.sentences) + [("2", forced.question)]
        + [("4", only_b.question)] * len(only_b.sentences))

    # mirage against self-citation, within each run.
    page.select_option("#filter", "self")
    def differs(r) -> bool:  # a given answer without citation marks has no self-citation to differ from
        return r.can_self_cite and any(sorted(s.mirage_citations) != sorted(s.self_citations) for s in r.sentences)

    differ = [differs(r) for r in (generated, forced, evil)]
    differ[1] = differ[1] or differs(forced_b)
    differ.append(differs(only_b))
    assert page.locator("nav li:not([hidden]) .entry").count() == sum(differ)
    page.select_option("#filter", "all")
    assert "4 of 4" in page.inner_text("#count")

    # Markup stays text in both columns; hovering a span of run B shows its context.
    entries.nth(2).click()
    panel = page.locator("section.item:not([hidden])")
    assert EVIL in panel.locator("h2").inner_text()
    panel.locator('.answer[data-run="1"] mark.mirage-span').first.hover()
    page.locator("#tip").wait_for(state="visible")
    assert EVIL in page.inner_text("#tip")
    assert page.evaluate("window.__mirage_pwned") is None

    entries.nth(1).click()
    path_png = ROOT / "artifacts" / "report_compare.png"
    page.screenshot(path=str(path_png), full_page=True)
    assert errors == []
    page.close()


#: An item attributed under selfcitation_marked, whose prompt writes `` [n]`` after each sentence of document n.
MARKED_DOCS = [{"title": "Cats", "text": "Why do cats purr? They purr when content. They also purr when hurt!"},
               {"title": "", "text": "Dogs bark. Highly scalable, dogs fetch sticks."},
               {"title": "Birds", "text": "Birds sing at dawn. They nest in trees."}]


@pytest.fixture(scope="module")
def marked_report(tiny_causal, tmp_path_factory):
    """The report, written through ``mirage view``, of a given answer attributed under selfcitation_marked (the tiny
    in-memory model: the cards' layout does not depend on the model)."""
    cfg = MirageConfig().replace(prompt={"name": "selfcitation_marked"}, cti={"std_k": 0.0},
                                 cci={"top_k": 8, "top_percent": None})
    res = Mirage(tiny_causal, config=cfg).attribute("Why do cats purr?", MARKED_DOCS,
                                                    answer="They purr when content [1]. Highly scalable [2].")
    folder = tmp_path_factory.mktemp("marked")
    (folder / "attributed.jsonl").write_text(json.dumps(res.to_dict()) + "\n")
    assert cli_main(["view", str(folder / "attributed.jsonl"), "-o", str(folder / "report.html")]) == 0
    return folder / "report.html", res


def test_marked_documents_show_in_their_own_cards(browser, marked_report):
    path, res = marked_report
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(path.as_uri())
    cards = page.locator("section.item:not([hidden]) ol.docs li.doc")
    assert cards.count() == len(MARKED_DOCS)
    marked = [mark_sentences(d["text"], f" [{i}]") for i, d in enumerate(MARKED_DOCS, start=1)]
    for i, (doc, text) in enumerate(zip(MARKED_DOCS, marked), start=1):
        shown = cards.nth(i - 1).locator(".doctext")
        content = shown.evaluate("e => { const c = e.cloneNode(true); c.querySelectorAll('.scaffold')"
                                 ".forEach(s => s.remove()); return c.textContent.replace(/\\s+/g, ' ').trim(); }")
        assert content == f"{doc['title']}{text}".strip()  # its own text with its marks, nothing else
        words = shown.inner_text()
        assert words.startswith(f"Document [{i}]")
        assert all(f"[{j}]" not in words for j in range(1, len(MARKED_DOCS) + 1) if j != i)
    # Each card lists its document's selected context, scaffolding marked as such and the document's words not.
    base, words_kept = res.prompt.index(res.context), 0
    for i, (doc, text) in enumerate(zip(MARKED_DOCS, marked), start=1):
        head = f"Document [{i}](Title: {doc['title']}): " if doc["title"] else f"Document [{i}]: "
        at = res.prompt.index(head + text, base)
        content = [(at + len(head), at + len(head + text))]
        content += [(at + len(head) - 3 - len(doc["title"]), at + len(head) - 3)] if doc["title"] else []
        expected = sorted((c.text.strip(), not any(a < c.end and c.start < b for a, b in content))
                          for c in res.context_spans if c.doc == i)
        chips = cards.nth(i - 1).locator(".ctx .cue").evaluate_all(
            "cs => cs.map(c => [c.firstChild.textContent.trim(), c.classList.contains('scaffold')])")
        assert sorted(map(tuple, chips)) == expected
        words_kept += sum(not scaffold for _, scaffold in expected)
    assert words_kept > 0
    assert errors == []
    page.close()
