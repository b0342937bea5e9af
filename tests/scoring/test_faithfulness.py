"""Faithfulness check: invariants on a tiny seeded model, and behaviour on the embedded model."""

from __future__ import annotations

import copy
import math

import pytest

from mirage import Mirage, MirageConfig
from mirage.attribution.aggregation import sentence_of_token
from mirage.attribution.forward import answer_logits, token_probabilities
from mirage.attribution.tokenization import tokenize_answer
from mirage.scoring.faithfulness import (
    METHODS,
    FaithfulnessConfig,
    FaithfulnessResult,
    FaithfulnessSummary,
    citation_sets,
    faithfulness,
    random_set,
    summarize_faithfulness,
)

QUESTION = "When was the Ikhwan party formed?"
DOCS = [
    {"title": "Ikhwan", "text": "The Ikhwan was a Wahhabi militia formed in 1913 by Ibn Saud."},
    {"title": "Weather", "text": "Rain fell in the north of the country during the spring."},
    {"title": "Bakery", "text": "The bakery on Mill Street sells rye bread every morning."},
]
ANSWER = "It was formed in 1913 [1]. Rain fell in spring [1][2]. It sells rye bread."


@pytest.fixture(scope="module")
def tiny(tiny_causal):
    cfg = MirageConfig().replace(cti={"std_k": 0.0}, cci={"top_k": 3, "top_percent": None})
    m = Mirage(tiny_causal, config=cfg)
    res = m.attribute(QUESTION, DOCS, answer=ANSWER, id="tiny")
    # Fix the citation sets so every case is covered: a set, all documents, an empty set.
    res.sentences[0].mirage_citations = [1]
    res.sentences[1].mirage_citations = [1, 2, 3]
    res.sentences[2].mirage_citations = []
    return m, res


def _sentence_tokens(m, res, index):
    ans = tokenize_answer(m.lm.tokenizer, res.answer)
    spans = [(s.start, s.end) for s in res.sentences]
    return [i for i, (a, _b) in enumerate(ans.offsets) if sentence_of_token(res.answer, a, spans) == index], ans


def test_one_pass_over_the_answer_equals_decoding_each_sentence_after_its_prefix(tiny):
    m, res = tiny
    fr = faithfulness(m, res)
    prompt = m.prepare({"question": QUESTION, "docs": DOCS}, config=m.config).tokens.ids
    ans = tokenize_answer(m.lm.tokenizer, res.answer)
    total = 0.0
    for s in fr.sentences:
        idx, _ = _sentence_tokens(m, res, s.index)
        assert s.n_tokens == len(idx)
        prefix, target = list(ans.ids[: idx[0]]), list(ans.ids[idx[0] : idx[-1] + 1])
        alone = token_probabilities(answer_logits(m.lm, list(prompt) + prefix, target), target, log=True)
        assert math.isclose(s.full_logprob, sum(alone), abs_tol=1e-3)
        total += s.full_logprob
    every = token_probabilities(answer_logits(m.lm, prompt, ans.ids), ans.ids, log=True)
    assert math.isclose(total, sum(every), abs_tol=1e-3)  # every token belongs to one sentence


def test_drop_and_keep_follow_their_definitions(tiny):
    m, res = tiny
    fr = faithfulness(m, res)
    s0, s1, s2 = fr.sentences
    mirage0 = s0.sets["mirage"]
    assert mirage0.docs == [1]
    assert math.isclose(mirage0.drop, s0.full_logprob - mirage0.removed_logprob)
    assert math.isclose(mirage0.keep, mirage0.kept_logprob - s0.full_logprob)
    # Keeping every document is the full prompt; removing them all is the template's contextless prompt.
    every = s1.sets["mirage"]
    assert every.docs == [1, 2, 3] and every.keep == 0.0
    noctx = m.prepare({"question": QUESTION, "docs": DOCS}, config=m.config).tokens.contextless_ids
    idx, ans = _sentence_tokens(m, res, 1)
    lp = token_probabilities(answer_logits(m.lm, noctx, ans.ids), ans.ids, log=True)
    assert math.isclose(every.removed_logprob, sum(lp[i] for i in idx), abs_tol=1e-3)
    # Empty citation sets are not scored, and neither are their random counterparts.
    assert s2.sets["selfcitation"].docs == [] and s2.sets["selfcitation"].drop is None
    assert s2.sets["mirage"].drop is None and s2.sets["random_mirage"].keep is None


def test_one_pass_per_distinct_document_subset(tiny):
    m, res = tiny
    fr = faithfulness(m, res)
    subsets = {frozenset({1, 2, 3})}
    for sets in citation_sets(res):
        for docs in sets.values():
            if docs:
                subsets |= {frozenset(docs), frozenset({1, 2, 3}) - frozenset(docs)}
    assert fr.n_passes == len(subsets) <= 2 ** len(DOCS)


def test_random_sets_match_sizes_and_are_seeded(tiny):
    _, res = tiny
    a, b = citation_sets(res, seed=0), citation_sets(res, seed=0)
    assert a == b
    for sets in a:
        assert list(sets) == list(METHODS)
        for method in ("selfcitation", "mirage"):
            assert len(sets[f"random_{method}"]) == len(sets[method])
            assert set(sets[f"random_{method}"]) <= {1, 2, 3}
    draws = {tuple(random_set(2, 5, seed=s, key="k")) for s in range(20)}
    assert len(draws) > 1 and all(len(d) == 2 and len(set(d)) == 2 for d in draws)


def test_result_and_summary_round_trip_and_empty_sets_are_counted(tiny):
    m, res = tiny
    fr = faithfulness(m, res, config=FaithfulnessConfig(seed=3))
    assert fr == faithfulness(m, res, config=FaithfulnessConfig(seed=3))  # seeded: the same sets again
    assert FaithfulnessResult.from_json(fr.to_json()) == fr
    other = copy.deepcopy(fr)
    other.id = "copy"
    summary = summarize_faithfulness([fr, other])
    assert FaithfulnessSummary.from_dict(summary.to_dict()) == summary
    assert summary.n_results == 2 and summary.n_sentences == 6
    mirage = summary.methods["mirage"]
    assert (mirage.n_sentences, mirage.n_empty) == (4, 2)
    drops = [s.sets["mirage"].drop for s in fr.sentences if s.sets["mirage"].drop is not None]
    assert math.isclose(mirage.drop, sum(drops) / len(drops))
    assert summary.methods["selfcitation"].n_empty == 2  # the third sentence cites nothing, twice
    assert "random_mirage" in summary.to_text()


@pytest.mark.slow
def test_removing_the_document_a_sentence_copies_from_drops_its_likelihood(embedded_mirage):
    """On the embedded model: a correct self-citation matters to the model, a wrong one does not."""
    docs = [
        {"title": "Museum", "text": "The combination of the museum vault is 4471, chosen by the curator Elena Marsh."},
        {"title": "Bakery", "text": "The bakery on Mill Street opens at seven and sells dark rye bread."},
        {"title": "Weather", "text": "Rain fell in the north of the country during the spring."},
    ]
    answer = "The vault combination is 4471, chosen by Elena Marsh [1]. The bakery sells dark rye bread [3]."
    res = embedded_mirage.attribute("What is the vault combination, and what does the bakery sell?", docs,
                                    answer=answer, id="vault")
    fr = faithfulness(embedded_mirage, res)
    right, wrong = (s.sets["selfcitation"] for s in fr.sentences)
    assert right.docs == [1] and wrong.docs == [3]
    assert right.drop > 2.0, "removing the document holding the copied facts must make them much less likely"
    assert right.drop > wrong.drop + 1.0
    assert right.keep > wrong.keep, "the right document alone must keep the sentence likelier than the wrong one"
    # mirage finds the bakery document that the model's own citation missed, and that set matters.
    bakery = fr.sentences[1].sets["mirage"]
    assert 2 in bakery.docs and bakery.drop > wrong.drop + 1.0
    assert fr.n_passes <= 2 ** len(docs)
