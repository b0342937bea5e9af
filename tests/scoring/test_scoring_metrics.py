"""Metric arithmetic of the benchmarks against hand-computed cases (no model)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.config import MirageConfig
from mirage.data import resolve
from mirage.likelihood.classifier import best_threshold
from mirage.scoring import metrics as M
from mirage.scoring.rows import BadRow, RowError, read_rows, require
from mirage.scoring.xor_attriqa import ItemScores
from mirage.scoring.xor_data import XorItem, load_xor_attriqa, split_marked_passages
from mirage.scoring.xor_eval import SETTINGS, evaluate
from mirage.scoring.xor_report import XorAttriQAReport

DATA = Path(__file__).parents[1] / "data"


# -- binary scores ------------------------------------------------------------------------------------------------


def test_binary_scores_by_hand():
    c = M.BinaryCounts.of([True, True, False, False, True], [True, False, False, True, True])
    assert (c.tp, c.fp, c.tn, c.fn) == (2, 1, 1, 1)
    assert M.agreement(c) == pytest.approx(60.0)
    assert M.precision(c) == pytest.approx(200 / 3)
    assert M.recall(c) == pytest.approx(200 / 3)
    assert M.f1(c) == pytest.approx(200 / 3)
    assert M.balanced_accuracy(c) == pytest.approx((2 / 3 + 1 / 2) / 2 * 100)


@settings(max_examples=80, deadline=None)
@given(st.tuples(*[st.integers(0, 30)] * 4))
def test_binary_scores_are_the_confusion_formulas(cells):
    tp, fp, tn, fn = cells
    c = M.BinaryCounts.of([True] * tp + [True] * fp + [False] * tn + [False] * fn,
                          [True] * tp + [False] * fp + [False] * tn + [True] * fn)
    assert (c.tp, c.fp, c.tn, c.fn) == cells

    def pct(num, den):
        return None if den == 0 else 100 * num / den

    rates = [r for r in (pct(tp, tp + fn), pct(tn, tn + fp)) if r is not None]
    expected = {"agreement": pct(tp + tn, c.total), "precision": pct(tp, tp + fp), "recall": pct(tp, tp + fn),
                "f1": pct(2 * tp, 2 * tp + fp + fn), "balanced_accuracy": sum(rates) / len(rates) if rates else None}
    assert set(expected) == set(M.BINARY_METRICS), "each binary metric's confusion formula is written out here"
    for name, fn_ in M.BINARY_METRICS.items():
        got = fn_(c)
        assert (got is None) == (expected[name] is None), name
        assert got is None or got == pytest.approx(expected[name]), name


def test_cite_none_agrees_with_the_majority_but_has_no_recall():
    c = M.BinaryCounts.of([False] * 4, [True, False, False, False])
    assert M.agreement(c) == 75.0
    assert M.precision(c) is None  # nothing predicted
    assert M.recall(c) == 0.0
    assert M.f1(c) == 0.0
    assert M.balanced_accuracy(c) == 50.0


def test_undefined_scores_are_none_and_skipped_by_averages():
    c = M.BinaryCounts.of([False, False], [False, False])
    assert M.recall(c) is None and M.f1(c) is None
    assert M.balanced_accuracy(c) == 100.0  # only the negative class: its recall
    assert M.agreement(M.BinaryCounts()) is None
    assert M.mean_defined([50.0, None, 70.0]) == 60.0
    assert M.mean_defined([None]) is None


def test_binary_scores_reproduce_the_published_nli_rows(data_dir):
    """The NLI baselines' rows of the committed XOR-AttriQA results (computed from the TRUE model's predictions with
    hand-written counts before the scores came from scikit-learn): every binary score and ROC-AUC, fi and ru."""
    stored = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "xor_attriqa_smollm2_en"
                         / "results.json").read_text())
    for lang in ("fi", "ru"):
        items = load_xor_attriqa(resolve(f"xor-attriqa-match:{lang}"), text="en").items
        labels = [y for i in items for y in i.labels]
        for setting in ("nli_mt", "nli_orig"):
            preds = [bool(p) for i in items for p in i.nli[setting]]
            counts = M.BinaryCounts.of(preds, labels)
            assert counts.total == len(labels) and counts.tp + counts.fn == sum(labels)
            for name, fn in M.BINARY_METRICS.items():
                if name not in stored:  # a metric added after this run was published
                    continue
                assert fn(counts) == pytest.approx(stored[name][setting][lang], abs=1e-9), (lang, setting, name)
            assert M.roc_auc([float(p) for p in preds], labels) == pytest.approx(stored["roc_auc"][setting][lang])


def test_roc_auc_by_hand():
    # positives 0.9, 0.3; negatives 0.8, 0.1: 3 of 4 pairs ranked right
    assert M.roc_auc([0.9, 0.8, 0.3, 0.1], [True, False, True, False]) == pytest.approx(0.75)
    assert M.roc_auc([1.0, 1.0, 1.0], [True, False, False]) == pytest.approx(0.5)
    assert M.roc_auc([0.2, 0.4], [False, False]) is None


# -- ALCE citation quality ------------------------------------------------------------------------------------------


class WordJudge:
    """Entailment iff every word of the hypothesis appears in the premise."""

    name = "words"

    def __init__(self):
        self.calls = 0

    def entails(self, premise, hypothesis):
        self.calls += 1
        words = set(premise.lower().replace("\n", " ").split())
        return all(w in words for w in hypothesis.lower().rstrip(".").split())


DOCS = [{"title": "", "text": "cats purr"}, {"title": "", "text": "dogs bark"}, {"title": "", "text": "cows moo"}]


def test_alce_sentence_scores_by_hand():
    judge = WordJudge()
    # supported jointly; doc 1 alone entails, doc 2 is superfluous (the rest still entails without it)
    s = M.score_sentence("cats purr.", [1, 2], DOCS, judge)
    assert (s.supported, s.n_citations, s.n_precise) == (True, 2, 1)
    # needs both documents: neither is superfluous
    s = M.score_sentence("cats bark", [1, 2], DOCS, judge)
    assert (s.supported, s.n_citations, s.n_precise) == (True, 2, 2)
    assert M.score_sentence("cats purr", [], DOCS, judge) == M.SentenceCitationScore(False, 0, 0)
    assert M.score_sentence("dogs bark", [1], DOCS, judge) == M.SentenceCitationScore(False, 1, 0)
    assert M.score_sentence("dogs bark", [9], DOCS, judge) == M.SentenceCitationScore(False, 0, 0)
    # at most 3 citations are judged
    assert M.score_sentence("cats purr", [1, 2, 3, 1], DOCS, judge).n_citations == 3


def test_alce_corpus_scores_by_hand():
    judge = WordJudge()
    a = [M.score_sentence("cats purr", [1, 2], DOCS, judge),  # supported, 1 of 2 citations precise
         M.score_sentence("cows moo", [], DOCS, judge),  # no citation
         M.score_sentence("dogs bark", [1], DOCS, judge)]  # unsupported, 1 citation
    b = [M.score_sentence("dogs bark", [2], DOCS, judge)]
    assert M.answer_recall_precision(a) == pytest.approx((1 / 3, 1 / 3))
    assert M.answer_recall_precision(b) == pytest.approx((1.0, 1.0))
    q = M.citation_quality([a, b])
    assert q.recall == pytest.approx(200 / 3) and q.precision == pytest.approx(200 / 3)
    assert q.f1 == pytest.approx(200 / 3)
    assert (q.n_answers, q.n_sentences) == (2, 4)
    assert M.harmonic_mean(41.4, 24.3) == pytest.approx(30.6, abs=0.05)  # the paper's Zephyr self-citation F1


def test_cached_judge_asks_once_and_reports_new_decisions():
    inner, seen = WordJudge(), []
    judge = M.CachedJudge(inner, {("p", "h"): True}, on_new=lambda p, h, d: seen.append((p, h, d)))
    assert judge.entails("p", "h") is True and inner.calls == 0
    assert judge.entails("cats purr", "cats") and judge.entails("cats purr", "cats")
    assert inner.calls == 1 and seen == [("cats purr", "cats", True)]


def test_citation_set_agreement_by_hand():
    ag = M.citation_set_agreement([[1], [1, 2], [], [3], []], [[1], [2], [], [], [2]], [3, 3, 3, 3, 3])
    assert (ag.n_sentences, ag.neither, ag.only_a, ag.only_b, ag.both) == (5, 1, 1, 1, 2)
    # over the two sentences both cite: {1} = {1}; {1, 2} vs {2}: Jaccard .5, pairs 2 of 3 agree
    assert ag.both_same_set == pytest.approx(50)
    assert ag.both_jaccard == pytest.approx((1 + 0.5) / 2 * 100)
    assert ag.both_pair_agreement == pytest.approx(500 / 6)


def test_an_uncited_side_is_not_agreement():
    """Self-citation that cites nothing beside MIRAGE that cites: no agreement figure at all (it used to read 67 %
    of pairs agreeing and 50 % of sentences with the same set, from the empty sets)."""
    ag = M.citation_set_agreement([[], [], []], [[1], [], []], [3, 3, 3])
    assert (ag.neither, ag.only_a, ag.only_b, ag.both) == (2, 0, 1, 0)
    assert ag.both_same_set is None and ag.both_jaccard is None and ag.both_pair_agreement is None


# -- XOR-AttriQA settings from stored scores --------------------------------------------------------------------------


def _item(question, labels, lang="xx"):
    return XorItem(file="t.jsonl", line=1, lang=lang, question=question, passages=("p one", "p two"), answer="a",
                   labels=tuple(labels), idxs=(0, 1), nli={"nli_mt": (True, True)})


def _scores(item, cti, rows):
    return ItemScores(key=item.key, tokens=["t"] * len(cti), cti=cti, cci=rows, context_docs=[[0, 4], [1, 4]],
                      n_docs=2)


def _toy():
    a = _item("A", [True, False])
    b = _item("B", [False, False])
    doc1 = [0.1, 0.2, 0.3, 0.4, 9, 1, 2, 3]  # both selections keep only passage 2
    scores = {
        # token 1 is the only one over mean + std; top-3 keeps tokens of both passages, top-5% only passage 1
        a.key: _scores(a, [0.1, 2.0, 0.2], [doc1, [0.1, 0.2, 0.3, 9, 1, 2, 3, 4], doc1]),
        b.key: _scores(b, [0.5], [[5, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 1]]),
    }
    return [a, b], scores


def test_every_binary_metric_reaches_the_report_and_its_table():
    """Each registered binary metric (:data:`mirage.registry.BINARY_METRICS`) is filled by :func:`evaluate` for every
    setting and printed under its title (``tables.xor_metrics()``): the first five as fields of XorAttriQAReport
    (results.json), any other under ``registered_metrics``, which round-trips through the file. A report written
    before a metric existed (its field absent, so empty) prints no table for it."""
    from mirage.scoring.tables import xor_metrics, xor_table

    M.register_binary_metric("specificity", lambda c: 100 * c.tn / (c.tn + c.fp) if c.tn + c.fp else None,
                             title="Specificity on unsupported passages (%)")
    try:
        items, scores = _toy()
        rep = evaluate(items, scores, config=MirageConfig(), calibration_items=items)
        titles = xor_metrics()
        assert list(titles)[-2:] == ["specificity", "roc_auc"]  # a registered metric: after the built-ins
        for name in M.BINARY_METRICS:
            assert set(rep.metric_table(name)) == set(rep.agreement), name
            assert titles[name] in xor_table(rep)
        assert "specificity" in rep.registered_metrics and not hasattr(rep, "specificity")
        again = XorAttriQAReport.from_json(rep.to_json())
        assert again.metric_table("specificity") == rep.metric_table("specificity")
        shown_before = xor_table(XorAttriQAReport.from_dict(dict(rep.to_dict(), registered_metrics={})))
        assert titles["specificity"] not in shown_before
    finally:
        del M.BINARY_METRICS["specificity"]
    older = dict(rep.to_dict(), f1={})  # as a report from before f1 existed, read back with the field empty
    shown = xor_table(XorAttriQAReport.from_dict(older))
    assert xor_metrics()["f1"] not in shown and xor_metrics()["agreement"] in shown
    assert "specificity" not in xor_metrics()


def test_xor_settings_by_hand():
    items, scores = _toy()
    rep = evaluate(items, scores, config=MirageConfig(), calibration_items=items)
    # EX top-3: A → [T, T], B → [T, T]: 1 of 4 pairs agree; top-5%: A → [T, F], B → [T, F]: 3 of 4
    assert rep.agreement["ex_top3"] == {"xx": 25.0, "avg": 25.0}
    assert rep.agreement["ex_top5pct"]["xx"] == 75.0
    assert rep.f1["ex_top5pct"]["xx"] == pytest.approx(200 / 3)
    assert rep.balanced_accuracy["ex_top5pct"]["xx"] == pytest.approx((100 + 200 / 3) / 2)
    # Calibration (top-5%) on the same items: threshold between 0.5 and 2.0 cites nothing for B → 100 %
    assert rep.calibration["thresholds"]["top5pct"] == pytest.approx(1.25)
    assert rep.agreement["cal_top5pct"]["xx"] == 100.0
    assert rep.calibration["agreement_on_calibration"]["top5pct"] == 100.0
    # Baselines
    assert rep.agreement["cite_none"]["xx"] == 75.0 and rep.agreement["cite_all"]["xx"] == 25.0
    assert rep.agreement["nli_mt"]["xx"] == 25.0
    assert "nli_orig" not in rep.agreement  # no such predictions
    # ROC-AUC of the largest saliency share over context-sensitive tokens: positive 1.0 against 4/9, 1.0, 0.2
    assert rep.roc_auc["ex_top5pct"]["xx"] == pytest.approx(2.5 / 3)
    assert rep.counts["xx"] == {"items": 2, "pairs": 4, "supporting": 1}
    assert rep.sweep["percents"][0] == 3 and len(rep.sweep["agreement"]["ex"]["avg"]) == len(rep.sweep["percents"])
    # top-100 % keeps every context token: every passage of an item with a context-sensitive token is cited
    assert rep.sweep["agreement"]["ex"]["avg"][-1] == 25.0
    assert set(rep.agreement) == set(SETTINGS) - {"nli_orig"} | {"learned", "learned_agreement"}


def test_xor_report_round_trips_through_json():
    items, scores = _toy()
    rep = evaluate(items, scores, calibration_items=items, bad_rows=[BadRow("f.jsonl", 3, "broken")])
    again = XorAttriQAReport.from_dict(json.loads(json.dumps(rep.to_dict())))
    assert again == rep
    assert again.bad_rows == {"count": 1, "rows": [{"file": "f.jsonl", "line": 3, "error": "broken"}]}
    assert ItemScores.from_dict(json.loads(json.dumps(scores[items[0].key].to_dict()))) == scores[items[0].key]


# -- loaders ----------------------------------------------------------------------------------------------------------


def test_split_marked_passages():
    assert split_marked_passages("<0> first one <1> second", 2) == ["first one", "second"]
    with pytest.raises(RowError, match="markers"):
        split_marked_passages("<0> a <2> b", 2)
    with pytest.raises(RowError, match="markers"):
        split_marked_passages("<0> a <1> b", 3)


def test_require_checks_emptiness_only_of_text_and_containers():
    assert require({"q": " a "}, "q", str) == " a "
    with pytest.raises(RowError, match="'q' is empty"):
        require({"q": "  "}, "q", str)
    with pytest.raises(RowError, match="'docs' is empty"):
        require({"docs": []}, "docs", list)
    # a number has no emptiness: before, the check called len() on it (a TypeError)
    assert require({"n": 0}, "n", int) == 0
    assert require({"n": 2.5}, "n", (int, float)) == 2.5


def test_read_rows_reports_line_numbers(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n{broken\n{"a": 2}\n')
    rows = list(read_rows(path))
    assert [type(r).__name__ for r in rows] == ["RawRow", "BadRow", "RawRow"]
    assert rows[1].line == 3 and rows[2].line == 4
    lst = tmp_path / "x.json"
    lst.write_text('[\n  {"a": 1},\n  {"a": 2}\n]\n')
    assert [r.line for r in read_rows(lst)] == [2, 3]


def test_xor_loader_views_and_bad_rows(tmp_path):
    rows = [json.loads(line) for line in (DATA / "xor_attriqa_match" / "val.jsonl").read_text().splitlines()]
    good = rows[0]
    bad_marker = {**good, "passage_in_language": good["passage_in_language"].replace("<1>", "<5>")}
    stray = {**good, "query_en": good["query_en"].rstrip() + " [b]"}
    path = tmp_path / "val.jsonl"
    lines = [json.dumps(good), json.dumps(bad_marker), "{not json", json.dumps({**good, "prediction": " "}),
             json.dumps(stray)]
    path.write_text("\n".join(lines) + "\n")
    native = load_xor_attriqa(path, text="native", nli_dir=DATA / "xor_attriqa_match")
    assert [b.line for b in native.bad_rows] == [2, 3, 4]
    assert "markers" in native.bad_rows[0].error and "empty" in native.bad_rows[2].error
    assert native.items[0].passages[0].startswith(good["passage_in_language"][4:20])
    assert native.items[0].nli["nli_mt"] == tuple(bool(json.loads(
        (DATA / "xor_attriqa_match" / "val.nli-translate-en.json").read_text())[i]) for i in good["idxs"])
    en = load_xor_attriqa(path, text="en")
    assert [b.line for b in en.bad_rows] == [3]  # the native fields do not matter in the English view
    assert en.items[0].question == en.items[-1].question and not en.items[-1].question.endswith("[b]")
    assert en.items[0].passages == tuple(p.strip() for p in good["split_passages_en"])
    assert en.items[0].nli == {}  # no prediction files beside the temporary file
    assert len(load_xor_attriqa(path, text="en", limit=2).items) == 2


def test_xor_loader_reads_the_per_passage_release():
    data = load_xor_attriqa(DATA / "xor_attriqa_full" / "val.jsonl", text="en")
    assert not data.bad_rows and len(data.items) == 3
    assert all(len(i.passages) == 1 and len(i.labels) == 1 for i in data.items)
    assert [i.idxs for i in data.items] == [(0,), (1,), (2,)]


@pytest.mark.parametrize("split", ["fi", "ru", "train", "val"])
def test_xor_loader_reads_every_shared_row(split, data_dir):
    for text in ("en", "native"):
        data = load_xor_attriqa(resolve(f"xor-attriqa-match:{split}"), text=text)
        assert not data.bad_rows
        assert all(set(i.nli) == {"nli_mt", "nli_orig"} for i in data.items)
        assert not any(i.question.endswith("[b]") for i in data.items)


def test_alce_loader_reads_local_files_and_explains_hub_failures(tmp_path, monkeypatch):
    from mirage.data.inputs import InputError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    from mirage.scoring.eli5 import load_alce

    data = load_alce(DATA / "eli5_alce" / "eli5_eval_sample.json")
    assert len(data.items) == 3 and not data.bad_rows
    assert all(len(i.docs) == 5 and i.claims for i in data.items)
    assert data.items[0].docs_dicts(2) == [{"title": t, "text": x} for t, x in data.items[0].docs[:2]]
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"question": "q", "docs": [{"title": "t", "text": "x"}]}) + "\n" + '{"docs": []}\n')
    data = load_alce(path)
    assert len(data.items) == 1 and [b.line for b in data.bad_rows] == [2]
    with pytest.raises(InputError, match="hf:"):
        load_alce("hf:princeton-nlp/ALCE-data/eli5_eval_bm25_top100.json")


@pytest.mark.parametrize("metric", ["f1", "agreement"])
def test_best_threshold_matches_trying_every_cut_and_moves_equal_scores_together(metric):
    """The score-level threshold (the learned classifier's and the peers' calibrated rules) against brute force over
    every candidate cut, on scores with ties: equal scores are cited together, ties go to the lower threshold."""
    rng = random.Random(3)
    for _ in range(40):
        n = rng.randint(1, 12)
        scores = [rng.choice([0.1, 0.2, 0.2, 0.5, 0.7, 0.7, 0.9]) for _ in range(n)]
        labels = [rng.random() < 0.4 for _ in range(n)]
        t, value = best_threshold(scores, labels, metric)

        def score_at(cut, scores=scores, labels=labels):
            c = M.BinaryCounts.of([s >= cut for s in scores], labels)
            got = M.f1(c) if metric == "f1" else M.agreement(c)
            return 0.0 if got is None else got / 100

        cuts = sorted({*scores, max(scores) + 1.0})
        best = max(score_at(c) for c in cuts)
        assert value == pytest.approx(best) and score_at(t) == pytest.approx(best)
        assert not any(score_at(c) == pytest.approx(best) for c in cuts if c < t)  # the lowest such threshold
    with pytest.raises(ValueError, match="one label per score"):
        best_threshold([0.1], [True, False])


def test_the_printed_xor_table_names_the_papers_row_of_each_of_its_rows():
    """`mirage score xor-attriqa` prints, under its table, what each row is and which row of the paper's Table 2 it
    reproduces, or that the paper has none (read on a published run's results)."""
    import json
    from pathlib import Path

    from mirage.scoring.tables import SETTING_NAMES, xor_legend, xor_table
    from mirage.scoring.xor_report import XorAttriQAReport

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    for run in ("xor_attriqa_smollm2_en", "xor_attriqa_firu_target_prob"):
        report = XorAttriQAReport.from_dict(json.loads((root / run / "results.json").read_text(encoding="utf-8")))
        table, legend = xor_table(report), xor_legend(report).splitlines()
        assert legend[0] == "Rows"
        names = [SETTING_NAMES[s] for s in SETTING_NAMES if f"\n{SETTING_NAMES[s]} " in table]
        assert sorted(line.split("  ")[0].strip() for line in legend[1:]) == sorted(names)
        assert all(("the paper's" in line) != ("not in the paper" in line) for line in legend[1:])
        if "ex_top3" in report.f1:
            assert any(line.startswith("MIRAGE-EX top-3") and "the paper's MIRAGE EX Top-3 row" in line
                       for line in legend)
