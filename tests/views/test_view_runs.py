"""``mirage view`` of run folders: a bias study (its modes side by side per query, the "moved" filters, the study's
tables) and an ELI5 scoring run (the attribution report of its answers under the run's summary). On real runs of the
embedded model: a slice of the shipped bias run (tests/data/bias_run_small) and a two-answer ELI5 run
(tests/data/eli5_run_small); their READMEs say where they come from. The pages go through the ``mirage view``
command and are opened in a real headless browser (Debian's chromium driven by Playwright, set up as for
tests/views/test_report_browser.py)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from mirage.attribution.prompts import format_prompt, load_template
from mirage.bias.metrics import cited_docs
from mirage.bias.protocol import BiasConfig, doc_sides
from mirage.bias.records import BiasRecord
from mirage.bias.results import BiasStudyResult
from mirage.bias.tables import render_markdown
from mirage.cli import main
from mirage.config import ConfigError, PromptConfig
from mirage.data.inputs import Document, InputError
from mirage.runs.files import read_run_records
from mirage.views.bias_report import (
    bias_report_html,
    bias_run_view,
    markdown_html,
    query_views,
    read_bias_records,
    read_items_file,
    read_templates,
    run_modes,
    sentence_cites,
    text_from_prompt,
    texts_from_prompts,
)
from mirage.views.scoring_report import read_eli5_answers
from mirage.views.view import view_kind

ROOT = Path(__file__).resolve().parents[2]
BIAS_RUN = ROOT / "tests" / "data" / "bias_run_small"
ELI5_RUN = ROOT / "tests" / "data" / "eli5_run_small"
EVIL = "</script><script>window.__mirage_pwned = 2</script><img src=x onerror='window.__mirage_pwned=3'>"


@pytest.fixture(scope="module")
def records() -> list[BiasRecord]:
    return read_bias_records(BIAS_RUN)


@pytest.fixture(scope="module")
def result() -> BiasStudyResult:
    return BiasStudyResult.load(BIAS_RUN / "results.json")


def _cited_sets(recs: list[BiasRecord], key: str) -> set[frozenset[int]]:
    return {frozenset(d for sentence in getattr(r, key) for d in sentence) for r in recs}


# --- the view model -------------------------------------------------------------------------------------------------


def test_queries_whose_citations_moved_between_modes(records, result):
    modes = run_modes(records, result.config["modes"])
    assert modes == ("vanilla", "informed", "counterfactual")
    views = query_views(records, modes)
    assert [v.item_id for v in views] == list(dict.fromkeys(r.item_id for r in records))
    for v in views:
        recs = [r for r in records if r.item_id == v.item_id]
        assert len(recs) == len(modes) and all(a is not None for a in v.answers)
        assert v.self_moved == (len(_cited_sets(recs, "self_citations")) > 1)
        assert v.mirage_moved == (len(_cited_sets(recs, "mirage_citations")) > 1)
    # the slice holds each case, so the filters have something to keep and something to drop
    moved = {v.item_id: (v.self_moved, v.mirage_moved) for v in views}
    assert moved == {"fi-21": (True, True), "fi-25": (False, False), "fi-42": (False, True)}


def test_each_document_carries_its_label_and_citations_per_mode(records, result):
    cfg = BiasConfig.from_dict(result.config)
    name = {"first": result.metadata["first"], "second": result.metadata["second"]}
    modes = run_modes(records, cfg.modes)
    by_key = {(r.item_id, r.mode): r for r in records}
    for v in query_views(records, modes, sides={name["first"]: "first", name["second"]: "second"}):
        relevant = [d.relevant for d in v.docs]
        assert relevant.count(True) == 1
        for k, mode in enumerate(modes):
            rec = by_key[(v.item_id, mode)]
            sides = doc_sides(tuple(relevant), mode, cfg)  # what the protocol says each document shows
            for doc, side in zip(v.docs, sides):
                cell = doc.modes[k]
                assert cell.label == rec.labels[doc.doc - 1] == (None if side is None else name[side])
                assert cell.side == side
                assert cell.self_cited == (doc.doc in cited_docs(rec, "self"))
                assert cell.mirage_cited == (doc.doc in cited_docs(rec, "mirage"))
        # informed and counterfactual swap every label
        informed, counterfactual = (modes.index(m) for m in ("informed", "counterfactual"))
        assert all(d.modes[informed].label != d.modes[counterfactual].label for d in v.docs)


def test_sentences_carry_both_citation_sets(records):
    for rec in records:
        rows = sentence_cites(rec)
        assert [list(s.self_citations) for s in rows] == rec.self_citations
        assert [list(s.mirage_citations) for s in rows] == rec.mirage_citations
        assert all(s.text in rec.answer for s in rows)


def test_texts_recovered_from_the_prompts_equal_the_items(records, tmp_path):
    """A folder without items.jsonl (as the shipped run) has its questions and documents read from the prompts."""
    items = read_items_file(BIAS_RUN / "items.jsonl")
    recovered = texts_from_prompts(records, read_templates(BIAS_RUN))
    assert sorted(recovered) == sorted(items) == sorted({r.item_id for r in records})
    for item_id, text in items.items():
        assert (recovered[item_id].question, recovered[item_id].docs) == (text.question, text.docs)
        assert recovered[item_id].source == "prompt" and text.source == "items"
    # the page of such a folder shows them, and says where they came from
    folder = tmp_path / "run"
    shutil.copytree(BIAS_RUN, folder, ignore=shutil.ignore_patterns("items.jsonl"))
    view = bias_run_view(folder)
    assert [q.question for q in view.queries] == [items[q.item_id].question for q in view.queries]
    assert "read from the stored prompts (3 of 3 queries)" in view.texts_note


def test_texts_read_back_from_a_prompt_with_titled_and_untitled_documents():
    """Through a template with both document forms (the question before the documents), as mirage builds it."""
    template = load_template(PromptConfig(name="selfcitation"))
    docs = (Document("Salmonella", "Raw eggs can carry it, see Document [7].\nAnswer: not the prompt's end."),
            Document("", "Heat kills it; flour can carry E. coli."), Document("Baking", "Bake at 180 degrees."))
    question = "Why is raw cookie dough risky?"
    built = format_prompt(template, question, docs)
    text = text_from_prompt(built.text, template, len(docs))
    assert text is not None and text.question == question
    assert text.docs == tuple((d.title, d.text) for d in docs)
    assert text_from_prompt(built.text, template, len(docs) + 1) is None  # not that many documents
    assert text_from_prompt(built.contextless_text, template, len(docs)) is None
    # a template that marks every sentence with its document's number (selfcitation_marked): the marks are the
    # template's, and the texts read back are the documents'
    marked = load_template(PromptConfig(name="selfcitation_marked"))
    built = format_prompt(marked, question, docs)
    assert "Raw eggs can carry it, see Document [7] [1].\nAnswer: not the prompt's end [1]." in built.text
    assert "Heat kills it; flour can carry E. coli [2]." in built.text
    assert text_from_prompt(built.text, marked, len(docs)).docs == tuple((d.title, d.text) for d in docs)
    with pytest.raises(ConfigError, match=r"selfcitation_marked'?: sentence_mark must contain \{ID\}"):
        dataclasses.replace(marked, sentence_mark=" [x]")


def test_gzipped_and_plain_generations_read_the_same(tmp_path):
    plain = tmp_path / "generations.jsonl"
    plain.write_bytes(gzip.decompress((BIAS_RUN / "generations.jsonl.gz").read_bytes()))
    assert read_run_records(plain) == read_run_records(BIAS_RUN / "generations.jsonl.gz")
    assert len(read_run_records(plain)) == 9


def test_the_study_tables_come_from_tables_md_or_results_json(result, tmp_path):
    page = bias_report_html(bias_run_view(BIAS_RUN))
    assert markdown_html((BIAS_RUN / "tables.md").read_text(encoding="utf-8")) in page
    for header in ("CAS precision", "CAB precision", "Precision", "Recall"):
        assert f"<th>{header}</th>" in page
    folder = tmp_path / "run"
    shutil.copytree(BIAS_RUN, folder, ignore=shutil.ignore_patterns("tables.md"))
    assert markdown_html(render_markdown(result)) in bias_report_html(bias_run_view(folder))
    # markup in the markdown stays text
    assert "<script>" not in markdown_html("| a |\n|---|\n| <script>x</script> |")


def test_a_run_without_cab_shows_no_plot_and_says_why(records, result, tmp_path):
    """A study without the counterfactual mode has no CAB: its page embeds no figure (not the one a cab.png left in
    the folder would draw) and says, in one line, which option runs the modes CAB needs."""
    from mirage.bias.protocol import load_metadata
    from mirage.bias.results import summarize
    from mirage.bias.study import write_outputs
    from mirage.bias.tables import NO_CAB

    folder = tmp_path / "run"
    shutil.copytree(BIAS_RUN, folder, ignore=shutil.ignore_patterns("generations.jsonl*", "tables.md"))
    kept = [r for r in records if r.mode != "counterfactual"]
    (folder / "generations.jsonl").write_text("".join(r.to_json() + "\n" for r in kept), encoding="utf-8")
    cfg = BiasConfig.from_dict({**result.config, "modes": ["vanilla", "informed"]})
    write_outputs(summarize(kept, cfg=cfg, metadata=load_metadata(cfg), model=result.model, data=result.data,
                            mirage_config=result.mirage_config), folder)
    assert (folder / "cab.png").exists()  # the copied run's, which drew another study's CAB
    view = bias_run_view(folder)
    assert view.cab_png is None and view.cab_note == NO_CAB
    page = bias_report_html(view)
    assert 'alt="CAB per model' not in page and f'<p class="note no-cab">{NO_CAB}</p>' in page
    assert 'alt="CAB per model' in bias_report_html(bias_run_view(BIAS_RUN))  # a study with CAB shows it


# --- what PATH is ---------------------------------------------------------------------------------------------------


def test_view_tells_what_a_path_is(tmp_path):
    assert view_kind(BIAS_RUN) == ("bias", BIAS_RUN)
    assert view_kind(ELI5_RUN) == ("eli5", ELI5_RUN)
    assert view_kind(BIAS_RUN / "generations.jsonl.gz") == ("bias", BIAS_RUN)  # a run's file opens its folder
    assert view_kind(ELI5_RUN / "results.json") == ("eli5", ELI5_RUN)
    assert view_kind(tmp_path / "results.jsonl") == ("results", tmp_path / "results.jsonl")


def test_a_folder_that_is_no_run_is_refused_naming_what_was_expected(tmp_path, capsys):
    with pytest.raises(InputError, match=f"^{re.escape(str(tmp_path))} is a folder mirage view cannot open: it is "
                       "empty. Give a results JSONL written by `mirage attribute`, a bias-study run folder "
                       r"\(generations.jsonl or generations.jsonl.gz, and results.json"):
        view_kind(tmp_path)
    # a run's summary without its per-answer file (as the shipped ELI5 summary): the error says which file is missing
    shipped = tmp_path / "eli5_summary_only"
    shutil.copytree(ROOT / "benchmarks" / "results" / "eli5_smollm2_selfcitation", shipped,
                    ignore=shutil.ignore_patterns("answers.jsonl*"))
    with pytest.raises(InputError, match=r"with its results.json it lacks generations.jsonl \(the bias run's "
                       r"generations\) or answers.jsonl \(the ELI5 run's attributed answers\)"):
        view_kind(shipped)
    out = tmp_path / "page.html"
    assert main(["view", str(shipped), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mirage: error: {shipped} is a folder mirage view cannot open: it holds ")
    assert "results.json" in err and not out.exists()
    # a folder of studies (a protocol's, a sweep's): the error names them and the overview
    protocol = tmp_path / "protocol"
    for name in ("hai", "gender"):
        shutil.copytree(BIAS_RUN, protocol / name)
    (protocol / "protocol.md").write_text("# overview\n")
    with pytest.raises(InputError, match=f"is no run but holds run folders; open one at a time, e.g. mirage view "
                       f"{re.escape(str(protocol / 'gender'))}. Its runs: .*gender, .*hai; the overview of all "
                       f"of them is {re.escape(str(protocol / 'protocol.md'))}"):
        view_kind(protocol)
    # a run folder is viewed alone
    assert main(["view", str(BIAS_RUN), str(ELI5_RUN), "-o", str(out)]) == 2
    assert "mirage view opens one run folder at a time" in capsys.readouterr().err


def test_eli5_answers_in_seed_and_row_order():
    results = read_eli5_answers(ELI5_RUN, [42])
    stored = read_run_records(ELI5_RUN / "answers.jsonl.gz")
    assert len(results) == len(stored) == 2
    assert [r.id for r in results] == [f"row {rec['line']} · seed {rec['seed']}"
                                       for rec in sorted(stored, key=lambda rec: rec["line"])]
    assert all(r.sentences and len(r.self_citations) == len(r.mirage_citations) for r in results)


# --- the pages in a browser -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bias_page(tmp_path_factory, records):
    """The slice's page written by ``mirage view``. The shipped run asked for no explanations and every answer was
    attributed, so the copy's first record gets an explanation and the last an error (both carrying markup) to
    show how the page lays them out; the other records are the run's own."""
    folder = tmp_path_factory.mktemp("bias") / "run"
    shutil.copytree(BIAS_RUN, folder)
    rows = read_run_records(BIAS_RUN / "generations.jsonl.gz")
    rows[0]["explanation"] = "I cited document 1 because " + EVIL
    rows[-1]["error"] = "nothing to attribute " + EVIL
    (folder / "generations.jsonl.gz").unlink()
    (folder / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = folder.parent / "bias.html"
    assert main(["view", str(folder), "-o", str(out)]) == 0
    return out, [BiasRecord.from_dict(r) for r in rows]


def _self_contained(html: str, scripts: int) -> None:
    assert "<link" not in html and html.count("<script") == scripts
    assert all(src.startswith("data:") for src in re.findall(r'src="([^"]*)"', html))


def test_bias_run_in_a_real_browser(browser, bias_page):
    path, recs = bias_page
    _self_contained(path.read_text(encoding="utf-8"), scripts=1)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(path.as_uri())

    # The study's tables first.
    tables = page.locator("section#tables")
    assert tables.is_visible() and tables.locator("th", has_text="CAB precision").count() == 2
    assert tables.locator("img").evaluate("i => i.naturalWidth") > 0  # cab.png, embedded

    # One entry per query; the "moved" filters keep the queries whose cited documents differ between modes.
    entries = page.locator("nav .entry[data-item]:not(.tables-entry)")
    assert entries.count() == 3 and page.inner_text("#count") == "3 of 3 queries"
    page.select_option("#filter", "self")
    assert page.inner_text("#count") == "1 of 3 queries"
    assert page.locator("nav li:not([hidden]) .entry").count() == 1
    assert "fi-21" in page.locator("nav li:not([hidden]) .entry").inner_text()
    page.select_option("#filter", "mirage")
    assert page.inner_text("#count") == "2 of 3 queries"
    assert page.locator("nav li:not([hidden]) .entry").count() == 2
    page.select_option("#filter", "all")
    assert page.locator("nav li:not([hidden]) .entry").count() == 3
    page.fill("#search", "Jämijärvi")
    assert page.inner_text("#count") == "1 of 3 queries"
    page.fill("#search", "")

    # A query: its modes side by side, each document's label in each mode, the relevant one marked.
    order = list(dict.fromkeys(r.item_id for r in recs))
    item_id = recs[0].item_id  # the query whose record carries the explanation
    entries.nth(order.index(item_id)).click()
    panel = page.locator("section.query:not([hidden])")
    assert not tables.is_visible()
    assert item_id in panel.locator(".meta").first.inner_text()
    mine = {r.mode: r for r in recs if r.item_id == item_id}
    columns = panel.locator(".modes > .mode")
    assert [columns.nth(k).get_attribute("data-mode") for k in range(3)] == ["vanilla", "informed", "counterfactual"]
    boxes = [columns.nth(k).bounding_box() for k in range(3)]
    assert all(abs(b["y"] - boxes[0]["y"]) < 1 for b in boxes) and boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
    for k, mode in enumerate(["vanilla", "informed", "counterfactual"]):
        rec = mine[mode]
        assert columns.nth(k).locator(".answer").first.inner_text().strip() == rec.raw_answer.strip()
        assert columns.nth(k).locator("table.sentences tbody tr").count() == len(rec.self_citations)
        cells = panel.locator(f"table.labels tbody td[data-mode='{mode}']")
        assert [cells.nth(d).get_attribute("data-label") for d in range(5)] == [lb or "" for lb in rec.labels]
        assert [("mirage" in cells.nth(d).inner_text()) for d in range(5)] == [
            d + 1 in cited_docs(rec, "mirage") for d in range(5)]
    relevant = panel.locator("table.labels tbody tr.relevant")
    assert relevant.count() == 1 and relevant.get_attribute("data-doc") == str(mine["vanilla"].relevant[0])
    labels = panel.locator("table.labels tbody tr.relevant .label")
    assert [labels.nth(k).inner_text() for k in range(labels.count())] == ["Human", "LLM"]

    # The explanation and the error are shown as text; nothing of them ran.
    explanation = panel.locator("details.explanation")
    assert explanation.count() == 1 and EVIL in explanation.inner_text()
    entries.nth(order.index(recs[-1].item_id)).click()
    assert EVIL in page.locator("section.query:not([hidden]) .note").inner_text()
    assert page.evaluate("window.__mirage_pwned") is None
    shot = ROOT / "artifacts" / "bias_view.png"
    shot.parent.mkdir(exist_ok=True)
    entries.nth(0).click()
    page.screenshot(path=str(shot), full_page=True)
    assert errors == []
    page.close()


def test_eli5_run_in_a_real_browser(browser, tmp_path):
    out = tmp_path / "eli5.html"
    assert main(["view", str(ELI5_RUN), "-o", str(out)]) == 0
    _self_contained(out.read_text(encoding="utf-8"), scripts=2)
    results = read_eli5_answers(ELI5_RUN, [42])
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(out.as_uri())
    summary = page.locator("details.run-summary")
    assert summary.is_visible()
    table = summary.locator("pre").inner_text()
    assert "self-citation" in table and "MIRAGE" in table and "sentences with no citation (%)" in table
    assert page.locator("nav .entry").count() == len(results)
    page.locator("nav .entry").nth(1).click()
    panel = page.locator("section.item:not([hidden])")
    assert results[1].question in panel.locator("h2").inner_text()
    assert results[1].id in panel.locator(".meta").first.inner_text()
    rows = panel.locator("table.sentences tbody tr")
    assert rows.count() == len(results[1].sentences)
    for k, s in enumerate(results[1].sentences):
        mirage_cell = rows.nth(k).locator("td.mirage").inner_text()
        assert (all(f"[{d}]" in mirage_cell for d in s.mirage_citations)
                and (s.mirage_citations or "none" in mirage_cell))
    assert errors == []
    page.close()
