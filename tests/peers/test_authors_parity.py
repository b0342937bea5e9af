"""``--preset authors`` against the authors' XOR-AttriQA scoring (``MIRAGE_match.py``) re-implemented on inseq's own
outputs (:mod:`mirage.peers.authors`): the rule by hand, then the real pipeline on the embedded model and real rows,
pair by pair; and the paired bootstrap that the run comparison reports its changes with."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mirage.peers.authors import authors_citations, ex_threshold, kept_sums, passage_of_tokens, ranked_by_cti
from mirage.scoring import metrics as M

DATA = Path(__file__).parents[1] / "data" / "xor_attriqa_match"


def test_the_scripts_rules_by_hand():
    passages = [[1.0, 5.0], [5.0, 2.0], [0.5]]
    # top-3 of [0.5, 1, 2, 5, 5] is 2: ties and the threshold itself kept
    assert kept_sums(passages, 3).tolist() == [5.0, 7.0, 0.0]
    # top-5 %: the range rule 0.95·5 + 0.05·0.5 = 4.775
    assert kept_sums(passages, -5).tolist() == [5.0, 5.0, 0.0]
    # population std: a two-token answer's larger token sits on mean + std and counts (>=)
    assert ex_threshold([1.0, 3.0]) == pytest.approx(3.0)
    rows = [[0.0, 9.0, 1.0, 0.2], [3.0, 0.0, 0.0, 1.0]]  # CCI rows, strongest CTI first
    passage_of = [-1, 0, 1, 1]  # the first context token is scaffolding
    assert authors_citations([0.5, 3.0], rows, 3.0, passage_of, 2, 3) == [True, True]  # n = 1: first row only
    assert authors_citations([0.5, 3.0], rows, 3.0, passage_of, 2, -5) == [True, False]
    assert authors_citations([0.5, 3.0], rows, 3.5, passage_of, 2, 3) == [False, False]  # n = 0
    assert ranked_by_cti([0, 2, 3], [5.0, 9.0, 7.0, 7.0]) == [2, 3, 0]


def test_paired_bootstrap_of_pooled_f1_and_balanced_accuracy():
    records = [{"key": k, "label": lab, "settings": {"s": {"cited": c}}}
               for k, lab, c in [("a", True, True), ("a", False, True), ("b", True, False), ("b", False, False),
                                 ("c", True, True), ("c", False, False)]]
    counts = M.item_counts(records, "s")
    assert counts == {"a": (1, 1, 0, 0), "b": (0, 0, 1, 1), "c": (1, 0, 0, 1)}
    same = M.paired_bootstrap(counts, counts, resamples=200)
    assert same["pooled_f1_change"] == 0 and same["pooled_f1_change_ci95"] == [0, 0]
    better = {**counts, "b": (1, 0, 0, 1)}  # item b now right
    change = M.paired_bootstrap(counts, better, resamples=500)
    # pooled F1 2·2/(2·2+1+1) = 66.67 -> 2·3/(2·3+1+0) = 85.71; balanced accuracy 66.67 -> 83.33
    assert change["pooled_f1_change"] == pytest.approx(19.05, abs=0.01)
    assert change["pooled_balanced_accuracy_change"] == pytest.approx(16.67, abs=0.01)
    low, high = change["pooled_f1_change_ci95"]
    assert 0 <= low <= change["pooled_f1_change"] <= high
    assert M.paired_bootstrap(counts, {"z": (1, 0, 0, 0)}) is None


@pytest.mark.slow
def test_the_authors_preset_cites_what_their_script_does_on_inseqs_outputs(smollm2, tmp_path):
    """mirage's ``score xor-attriqa --preset authors`` (its own CTI, CCI and aggregation) and the script's rule on
    inseq's ``attribute_context`` run as the authors ran it, on the same rows: the same citation for every pair."""
    from mirage import Mirage
    from mirage.cli import main
    from mirage.peers.inseq import fit_to_prompt_context, run_reference
    from mirage.scoring.benchmarks import stored_xor_pipeline
    from mirage.scoring.xor_attriqa import prepare_item
    from mirage.scoring.xor_data import load_xor_attriqa

    out = tmp_path / "run"
    assert main(["score", "xor-attriqa", str(DATA / "val.jsonl"), "--limit", "2", "--preset", "authors",
                 "--settings", "ex", "-o", str(out), "--quiet"]) == 0
    pairs = {(r["key"], r["passage"]): r["settings"] for r in map(json.loads, (out / "pairs.jsonl").open())}
    cfg = stored_xor_pipeline(out / "scores.jsonl", "smollm2-135m-instruct")
    m = Mirage(smollm2, config=cfg)
    compared = 0
    for item in load_xor_attriqa(DATA / "val.jsonl", text="en", limit=2).items:
        answer, prep = prepare_item(m, item, config=cfg)
        ref = run_reference(smollm2.model, smollm2.tokenizer, prompt=prep.prompt.text,
                            contextless_prompt=prep.prompt.contextless_text, context=prep.prompt.context,
                            answer=answer, std_k=0.0, logprob=False)
        fit_to_prompt_context(ref, smollm2.tokenizer, prep.tokens)
        assert len(ref.context_tokens) == len(prep.tokens.context_docs)
        passage_of = passage_of_tokens(prep)
        rows = [ref.cci_scores[i] for i in ranked_by_cti(ref.selected, ref.cti_scores)]
        assert np.mean(ref.cti_scores) <= min(ref.cti_scores[i] for i in ref.selected) + 1e-6
        for setting, top in (("ex_top3", 3), ("ex_top5pct", -5)):
            theirs = authors_citations(ref.cti_scores, rows, ex_threshold(ref.cti_scores), passage_of,
                                       len(item.passages), top)
            ours = [pairs[(item.key, p)][setting]["cited"] for p in range(len(item.passages))]
            assert ours == theirs, (item.key, setting)
            compared += len(ours)
    assert compared >= 4
