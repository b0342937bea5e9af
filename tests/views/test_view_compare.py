"""``mirage view`` beyond one run: two runs compared item by item, saliency shares, the documents' heat and
scaffolding, the notebook fragment, and results written before shares existed. Real results of a tiny in-memory
model under two settings; the page in a browser is tests/views/test_report_browser.py's."""

from __future__ import annotations

import copy
import json
import re

import pytest

from mirage import AttributionResult, Mirage, MirageConfig
from mirage.attribution.prompts import mark_sentences
from mirage.cli import main
from mirage.views.report import (
    align_sentences,
    cue_share,
    display,
    doc_regions,
    heat_of,
    is_scaffolding,
    item_view,
    pair_runs,
    report_html,
    result_to_html,
    row_flags,
    run_view,
)

IKHWAN = {"question": "When was the Ikhwan formed?",
          "docs": [{"title": "Ikhwan <b>history</b>", "text": "The Ikhwan was formed in 1913 by Abdulaziz."},
                   {"title": "", "text": "Other text about 1920 & <script>window.__x = 1</script>."}],
          "output": "It was 1913 [1]. Later [2] maybe."}
PARIS = {"question": "What is the capital of France?",
         "docs": [{"title": "France", "text": "Paris is the capital of France."}], "output": "Paris [1]."}
SKY = {"question": "Why is the sky blue?",
       "docs": [{"title": "Sky", "text": "Rayleigh scattering makes the sky blue."},
                {"title": "Sea", "text": "The sea reflects the sky."}], "output": "Scattering [1][2]."}
SETTING_A = MirageConfig().replace(cti={"std_k": 0.0}, cci={"top_k": 3, "top_percent": None})
SETTING_B = MirageConfig().replace(cti={"std_k": 0.0}, cci={"top_k": 2, "top_percent": None},
                                   aggregation={"context": "content", "keep_saliency": True})


def _attribute(lm, cfg, items):
    m = Mirage(lm, config=cfg)
    return [m.attribute(it["question"], it["docs"], answer=it["output"]) for it in items]


@pytest.fixture(scope="module")
def runs(tiny_causal):
    """Run A (all context tokens) over Ikhwan and Paris; run B (content only, saliency kept) over Sky and Ikhwan."""
    return _attribute(tiny_causal, SETTING_A, [IKHWAN, PARIS]), _attribute(tiny_causal, SETTING_B, [SKY, IKHWAN])


def _write(path, results):
    path.write_text("".join(json.dumps({"key": f"k{i}", "index": i, **r.to_dict()}) + "\n"
                            for i, r in enumerate(results)), encoding="utf-8")
    return path


def _older(res: AttributionResult) -> AttributionResult:
    """The result as a mirage from before shares, sentence scores and the saliency matrix would have stored it."""
    data = res.to_dict()
    data.pop("saliency", None)
    for s in data["sentences"]:
        s.pop("doc_scores", None)
    for t in data["tokens"]:
        t.pop("doc_shares", None)
        for c in t["top_context"]:
            c.pop("share", None)
    return AttributionResult.from_dict(data)


def test_items_are_matched_by_question_and_documents_not_by_position_or_id(runs):
    a, b = runs
    b = copy.deepcopy(b)
    b[1].id = "another-id"
    pairs = pair_runs(a, b)
    assert [(x and x.question, y and y.question) for x, y in pairs] == [
        (IKHWAN["question"], IKHWAN["question"]), (PARIS["question"], None), (None, SKY["question"])]
    # The same question over other documents is another item.
    other_docs = copy.deepcopy(b[1])
    other_docs.docs[1]["text"] += " More."
    assert [(x is None, y is None) for x, y in pair_runs(a[:1], [other_docs])] == [(False, True), (True, False)]
    # The n-th repeat of an item matches the n-th repeat.
    twice = pair_runs([a[0], a[0]], [b[1], b[1]])
    assert [(x is a[0], y is b[1]) for x, y in twice] == [(True, True), (True, True)]


def test_sentences_align_by_position_for_one_answer_and_by_text_otherwise(runs):
    a, b = runs
    first, second = a[0], b[1]
    assert first.answer == second.answer
    assert [(x.index, y.index) for x, y in align_sentences(first, second)] == [(0, 0), (1, 1)]
    shorter = copy.deepcopy(second)
    shorter.answer = shorter.sentences[1].text
    shorter.sentences = shorter.sentences[1:]
    pairs = align_sentences(first, shorter)
    assert [(x and x.text, y and y.text) for x, y in pairs] == [
        (first.sentences[0].text, None), (first.sentences[1].text, second.sentences[1].text)]


def test_rows_flag_differences_between_runs_and_within_each(runs):
    a, b = runs
    b = copy.deepcopy(b)
    b[1].sentences[0].mirage_citations = [2]  # run B now cites another document for the first sentence
    items = [item_view(pair, k) for k, pair in enumerate(pair_runs(a, b), start=1)]
    both, only_a, only_b = items
    assert [r.runs_differ for r in both.rows] == [True, not _same_row(both.rows[1])]
    assert [r.self_differ for r in both.rows] == [
        any(sorted(s.mirage_citations) != sorted(s.self_citations) for s in row.cells) for row in both.rows]
    assert ("diverge", "A ≠ B") in row_flags(both.rows[0], ["A", "B"])
    assert (only_a.only, only_b.only) == (0, 1)
    assert only_a.n_runs_differ == len(only_a.rows) and row_flags(only_a.rows[0], ["A", "B"])[-1] == (
        "diverge", "only in A")
    assert row_flags(only_b.rows[0], ["A", "B"])[-1] == ("diverge", "only in B")
    # One run: mirage against self-citation only.
    single = item_view([a[0]], 1)
    assert single.only is None and single.n_runs_differ == 0
    assert [f for r in single.rows for f in row_flags(r, [])] == [
        ("differ", "differ") if r.self_differ else ("agree", "agree") for r in single.rows]


def _same_row(row) -> bool:
    x, y = row.cells
    return sorted(x.mirage_citations) == sorted(y.mirage_citations) and sorted(x.self_citations) == sorted(
        y.self_citations)


def test_cue_shares_are_the_stored_ones_or_computed_from_the_stored_scores(runs):
    res = runs[0][0]
    cued = [t for t in res.tokens if t.top_context]
    assert cued
    for t in cued:
        assert [cue_share(t, c) for c in t.top_context] == [c.share for c in t.top_context]
    for t in (t for t in _older(res).tokens if t.top_context):
        shares = [cue_share(t, c) for c in t.top_context]
        assert sum(shares) == pytest.approx(1.0) and shares == sorted(shares, reverse=True)
        assert shares[0] == pytest.approx(t.top_context[0].score / sum(c.score for c in t.top_context))


def test_documents_are_found_in_the_prompt_with_their_scaffolding(runs):
    res = runs[0][0]
    regions = doc_regions(res)
    assert [r.doc for r in regions] == [1, 2]
    for region, doc in zip(regions, res.docs):
        assert res.prompt[slice(*region.text)] == doc["text"]
        assert res.prompt[region.start:].startswith(f"Document [{region.doc}]")
        if doc["title"]:
            assert res.prompt[slice(*region.title)] == doc["title"]
        else:
            assert region.title is None
    word = res.prompt.index("Document", regions[1].start)
    assert is_scaffolding(regions, 2, word, word + len("Document"))
    assert not is_scaffolding(regions, 1, regions[0].text[0], regions[0].text[0] + 3)
    assert not is_scaffolding(regions, 1, *regions[0].title)
    # A document cut to fit the window: its kept prefix is found, the rest shown apart.
    cut = copy.deepcopy(res)
    cut.docs[0]["text"] += " And then much more that did not fit."
    cut.truncated_docs = [1]
    assert doc_regions(cut)[0].text == regions[0].text
    assert run_view(cut).docs[0].rest == " And then much more that did not fit."


MARKED = MirageConfig().replace(prompt={"name": "selfcitation_marked"}, cti={"std_k": 0.0},
                               cci={"top_k": 6, "top_percent": None})
#: An item for selfcitation_marked, whose prompt writes `` [n]`` after each sentence of document n.
MARKED_ITEM = {"question": "Why do cats purr?",
               "docs": [{"title": "Cats",
                         "text": "Why do cats purr? They purr when content. They also purr when hurt!"},
                        {"title": "", "text": "Dogs bark. Highly scalable, dogs fetch sticks."},
                        {"title": "Birds", "text": "Birds sing at dawn."}],
               "output": "They purr when content [1]. Highly scalable [2]."}


def test_documents_are_found_with_their_sentence_marks(tiny_causal):
    res = _attribute(tiny_causal, MARKED, [MARKED_ITEM])[0]
    regions = doc_regions(res)
    view = run_view(res)
    for region, doc, card in zip(regions, res.docs, view.docs):
        marked = mark_sentences(doc["text"], f" [{region.doc}]")
        assert res.prompt[slice(*region.text)] == marked and region.kept == len(doc["text"])
        assert res.prompt[region.start : region.end].startswith(f"Document [{region.doc}]")
        assert res.prompt[region.end - len(marked) - 1 : region.end] == marked + "\n"
        assert "".join(s.text for s in card.segments if not s.scaffold) == doc["title"] + marked
        assert card.rest == ""
    for span in res.context_spans:  # a selected span of the copied text is content, not scaffolding
        region = regions[span.doc - 1]
        assert region.start <= span.start < span.end <= region.end
        inside = region.text[0] <= span.start and span.end <= region.text[1]
        assert not (inside and is_scaffolding(regions, span.doc, span.start, span.end))
    # A document cut to fit the window: the prompt holds its kept words, marked again; the rest is shown apart.
    short = copy.deepcopy(MARKED_ITEM)
    short["docs"][0]["text"] = "Why do cats purr? They purr when"
    cut = _attribute(tiny_causal, MARKED, [short])[0]
    cut.docs[0]["text"] = MARKED_ITEM["docs"][0]["text"]
    cut.truncated_docs = [1]
    region = doc_regions(cut)[0]
    assert cut.prompt[slice(*region.text)] == "Why do cats purr [1]? They purr when [1]"
    assert run_view(cut).docs[0].rest == " content. They also purr when hurt!"
    assert doc_regions(cut)[1].start == region.text[1] + 1


def test_document_heat_covers_the_entries_and_follows_the_content_option(runs):
    a, b = runs
    for res in (a[0], b[1]):
        view = run_view(res)
        regions = doc_regions(res)
        for doc, region in zip(view.docs, regions):
            shown = "".join(s.text for s in doc.segments).replace("↵", "")
            assert shown.rstrip() == res.prompt[region.start : region.end].rstrip()
            assert all(0 <= s.share <= 1 for s in doc.segments if s.share is not None)
        lit = [s for d in view.docs for s in d.segments if s.share is not None]
        assert lit and max(s.share for s in lit) > 0
    # Run B kept the whole saliency matrix and was attributed to content only: every document token carries heat,
    # each answer token's shares over the content tokens sum to 1, and no scaffolding is lit.
    res = b[1]
    assert res.saliency is not None and run_view(res).content_only
    by_token: dict[int, float] = {}
    for h in heat_of(res):
        if not h.kept:
            by_token[h.tokens[0]] = by_token.get(h.tokens[0], 0.0) + h.share
    assert set(by_token) == set(res.saliency.answer_tokens)
    assert all(v == pytest.approx(1.0, abs=1e-3) for v in by_token.values())
    assert not any(s.scaffold for d in run_view(res).docs for s in d.segments if s.share is not None)
    assert not run_view(a[0]).content_only


def test_the_notebook_fragment_carries_its_scoped_style_and_no_script(runs):
    res = runs[0][0]
    html = result_to_html(res)
    assert html.startswith('<div class="mirage mirage-result"><style>') and html.rstrip().endswith("</div>")
    style = html.split("<style>", 1)[1].split("</style>", 1)[0]
    selectors = [s.strip() for rule in re.findall(r"([^{}]+)\{[^{}]*\}", style) for s in rule.split(",")]
    assert selectors and all(s.startswith((".mirage", ".mirage-result")) for s in selectors), selectors
    assert "<script" not in html and "&lt;script&gt;window.__x = 1&lt;/script&gt;" in html
    assert "<b>history</b>" not in html and "Ikhwan &lt;b&gt;history&lt;/b&gt;" in html
    assert 'class="heat' in html and "mirage-span" in html
    assert display(res)._repr_html_() == html == str(display(res))


def test_the_report_says_when_a_result_was_attributed_to_content_only(runs):
    a, b = runs
    assert "document content only" in report_html([b[1]])
    assert "document content only" not in report_html([a[0]])


def test_results_written_before_shares_still_render_with_computed_shares(runs):
    old = _older(runs[0][0])
    view = run_view(old)
    assert view.approximate_shares and not run_view(runs[0][0]).approximate_shares
    html = report_html([old])
    assert "predates stored shares" in html
    assert "%" in result_to_html(old)


def test_mirage_view_compares_two_files(runs, tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", runs[0])
    b = _write(tmp_path / "b.jsonl", runs[1])
    out = tmp_path / "report.html"
    assert main(["view", str(a), str(b), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "<title>mirage report: a.jsonl vs b.jsonl</title>" in html
    assert "A: a.jsonl" in html and "B: b.jsonl" in html
    assert "1 item(s) in both runs, 1 only in A, 1 only in B" in html
    assert html.count('<section class="item"') == 3
    # Same file names in two folders: the paths tell them apart.
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    xa, yb = _write(tmp_path / "x" / "r.jsonl", runs[0]), _write(tmp_path / "y" / "r.jsonl", runs[1])
    assert main(["view", str(xa), str(yb), "-o", str(out)]) == 0
    assert f"A: {xa}" in out.read_text(encoding="utf-8")


def test_mirage_view_refuses_three_files_and_an_output_that_is_an_input(runs, tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", runs[0])
    before = a.read_bytes()
    assert main(["view", str(a), str(a), str(a), "-o", str(tmp_path / "r.html")]) == 2
    assert "mirage view takes one results file, or two to compare; got 3" in capsys.readouterr().err
    assert main(["view", str(a), "-o", str(a)]) == 2
    assert "is the input file" in capsys.readouterr().err
    assert a.read_bytes() == before


def test_a_given_answer_without_marks_cannot_differ_and_is_left_out_of_the_rates(tiny_causal):
    """A given answer has no self-citation unless it carries marks: the console, the rows' badges, the sidebar
    counts and the header rates say "n/a (given answer)" instead of counting it as differing."""
    from mirage.views.rendering import NO_SELF_CITATION, result_to_text
    from mirage.views.report import overview

    plain, marked = _attribute(tiny_causal, SETTING_A, [{**PARIS, "output": "Paris is the capital."}, PARIS])
    assert not plain.can_self_cite and marked.can_self_cite
    assert any(s.mirage_citations for s in plain.sentences)  # mirage cites, self-citation cannot
    text = result_to_text(plain)
    assert f"self {NO_SELF_CITATION}" in text and "(differ)" not in text
    view = item_view([plain], 1)
    assert view.n_self_differ == 0 and run_view(plain).n_differ == 0
    assert [f for r in view.rows for f in row_flags(r, [])] == [("na", NO_SELF_CITATION)] * len(view.rows)
    ov = overview([plain, marked])
    assert ov["given"] == len(plain.sentences)
    assert ov["agreement"] == sum(sorted(s.self_citations) == sorted(s.mirage_citations)
                                  for s in marked.sentences) / len(marked.sentences)
    assert overview([plain])["agreement"] is None
    page = report_html([plain])
    assert f">{NO_SELF_CITATION}</td>" in page and "same citations n/a" in page and "left out" in page
