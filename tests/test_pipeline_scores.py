"""Scores beside citations: per-sentence document scores, scores of any answer span, the kept saliency matrix, the
content-only view of the context, cue shares, and results as pandas tables (one result, a results file). Hand cases
through ``aggregate`` and a tiny seeded model with the real tokenizer; no real model runs here."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mirage
from mirage import AttributionResult, Mirage, MirageConfig
from mirage.attribution.aggregation import aggregate, cite_token, content_mask
from mirage.attribution.cci import CCIScores
from mirage.attribution.citations import parse_answer
from mirage.attribution.cti import CTIScores
from mirage.attribution.results import SaliencyMatrix
from mirage.attribution.tokenization import TokenizedAnswer, TokenizedPrompt
from mirage.config import AggregationConfig, CCIConfig, ConfigError
from mirage.views.frames import read_results

# -- per-sentence document scores, through aggregate -------------------------------------------------------------------

#: Two sentences; tokens 0-2 in the first, 3-5 in the second. Three documents of two context tokens each.
TEXT = "Rain fell. It rained."
OFFSETS = [(0, 4), (4, 9), (9, 10), (10, 13), (13, 20), (20, 21)]
CONTEXT_DOCS = (0, 0, 1, 1, 2, 2)


class _Tok:
    def decode(self, ids):
        return "?"


def _aggregate(rows: dict[int, list[float]], cfg: AggregationConfig | None = None, content=None):
    parsed = parse_answer(TEXT, n_docs=3)
    n_ctx = len(CONTEXT_DOCS)
    ctx = tuple((2 * j, 2 * j + 1) for j in range(n_ctx))
    prompt = TokenizedPrompt(ids=tuple(range(n_ctx)), contextless_ids=(), offsets=ctx,
                             context_positions=tuple(range(n_ctx)), context_docs=CONTEXT_DOCS, context_offsets=ctx)
    selected = tuple(sorted(rows))
    n = len(OFFSETS)
    return aggregate(
        tokenizer=_Tok(), prompt_text="a b c d e f ", tokenized=prompt,
        answer=TokenizedAnswer(ids=tuple(range(n)), offsets=tuple(OFFSETS)), parsed=parsed, n_docs=3,
        cti=CTIScores(scores=(1.0,) * n, selected=selected, threshold=0.0, contextless_top=tuple(range(n))),
        cci=CCIScores(selected=selected, contrast_ids=(None,) * len(selected),
                      scores=tuple(tuple(rows[i]) for i in selected)),
        cci_cfg=CCIConfig(top_k=2, top_percent=None), cfg=cfg or AggregationConfig(), content=content)


def _result(sentences, tokens) -> AttributionResult:
    return AttributionResult(question="q", docs=[{"title": "", "text": "x"}] * 3, answer=TEXT, raw_answer=TEXT,
                             context="", prompt="a b c d e f ", contextless_prompt="", model="m", config={},
                             sentences=sentences, tokens=tokens, spans=[], context_spans=[], cti_threshold=0.0,
                             generated=False)


def test_sentence_doc_scores_are_summed_shares_of_kept_saliency():
    rows = {0: [6, 0, 2, 0, 0, 0],   # keeps doc 1 (0.75) and doc 2 (0.25)
            1: [0, 0, 4, 4, 0, 0],   # keeps doc 2 twice (1.0)
            4: [0, 0, 0, 0, 1, 3]}   # second sentence: doc 3 only
    sentences, tokens, _, _ = _aggregate(rows)
    first, second = sentences
    assert first.doc_scores == pytest.approx([0.75 / 2, 1.25 / 2, 0.0])
    assert first.mirage_citations == [2, 1]  # the same quantity orders the citations
    assert second.doc_scores == pytest.approx([0.0, 0.0, 1.0]) and second.mirage_citations == [3]
    assert tokens[0].doc_shares == pytest.approx([0.75, 0.25, 0.0])
    assert tokens[2].doc_shares is None  # not context-sensitive
    res = _result(sentences, tokens)
    for s in sentences:  # a sentence's span scores are its doc_scores
        assert res.span_scores(s.start, s.end) == pytest.approx(s.doc_scores)
    assert res.span_scores(0, 4) == pytest.approx(tokens[0].doc_shares)  # one token: its own shares
    assert res.span_scores(1, 6) == pytest.approx([0.75 / 2, 1.25 / 2, 0.0])  # overlaps tokens 0 and 1
    assert res.span_scores(9, 10) == [0.0, 0.0, 0.0]  # only a token that is not context-sensitive
    for bad in [(3, 3), (-1, 2), (0, len(TEXT) + 1)]:
        with pytest.raises(ValueError, match="span_scores"):
            res.span_scores(*bad)


def test_a_sentence_without_context_sensitive_tokens_scores_zero():
    sentences, _, _, _ = _aggregate({0: [1, 0, 0, 0, 0, 0]})
    assert sentences[0].doc_scores == pytest.approx([1.0, 0.0, 0.0])
    assert sentences[1].doc_scores == [0.0, 0.0, 0.0] and sentences[1].mirage_citations == []


def test_cue_shares_are_shares_of_the_tokens_saliency():
    _, tokens, _, _ = _aggregate({0: [6, 0, 2, 0, 1, 1]})
    cues = tokens[0].top_context
    assert [c.share for c in cues] == pytest.approx([0.6, 0.2, 0.1, 0.1, 0.0])
    assert [c.score for c in cues] == sorted((c.score for c in cues), reverse=True)


# -- the content-only view ---------------------------------------------------------------------------------------------


def test_content_view_attributes_to_content_tokens_only():
    # Context tokens 0 and 2 are scaffolding and carry the largest saliency.
    rows = {0: [9, 1, 9, 0, 0, 2]}
    content = (False, True, False, True, True, True)
    _, all_tokens, _, _ = _aggregate(rows)
    assert all_tokens[0].cited_docs == [1, 2]
    sentences, tokens, _, ctx_spans = _aggregate(rows, AggregationConfig(context="content"), content)
    tok = tokens[0]
    assert tok.cited_docs == [3, 1] and sentences[0].mirage_citations == [3, 1]
    assert tok.doc_shares == pytest.approx([1 / 3, 0.0, 2 / 3])
    assert {(c.start, c.end) for c in tok.top_context} <= {(2, 3), (6, 7), (8, 9), (10, 11)}
    assert [c.share for c in tok.top_context] == pytest.approx([2 / 3, 1 / 3, 0.0, 0.0])  # of 1 + 0 + 0 + 2
    assert {s.text for s in ctx_spans} == {"b", "f"} and all(s.start not in (0, 4) for s in ctx_spans)
    with pytest.raises(ValueError, match="content mask"):
        _aggregate(rows, AggregationConfig(context="content"))


@settings(max_examples=200, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6)), max_size=6),
       tokens=st.lists(st.tuples(st.integers(0, 44), st.integers(1, 4)), max_size=20))
def test_content_mask_is_any_overlap_with_user_text(spans, tokens):
    spans = [(a, a + n) for a, n in spans]
    offsets = tuple(sorted((a, a + n) for a, n in tokens))
    prompt = TokenizedPrompt(ids=(), contextless_ids=(), offsets=(), context_positions=tuple(range(len(offsets))),
                             context_docs=(0,) * len(offsets), context_offsets=offsets)
    assert content_mask(prompt, spans) == tuple(any(s < b and a < e for s, e in spans if e > s) for a, b in offsets)


def test_content_mask_of_a_real_prompt(tiny_causal):
    m = Mirage(tiny_causal)
    prep = m.prepare({"question": "When?", "docs": [{"title": "Rain", "text": "Rain fell in 1913."},
                                                    {"title": "", "text": "Dry spell."}]})
    mask = content_mask(prep.tokens, prep.prompt.user_spans)
    text = prep.prompt.text
    words = {True: "", False: ""}
    for (a, b), is_content in zip(prep.tokens.context_offsets, mask):
        words[is_content] += text[a:b]
    assert "Rain" in words[True] and "1913" in words[True] and "Dry" in words[True]
    assert "Document" in words[False] and "Title" in words[False] and "Rain" not in words[False]
    assert not any(ch.isdigit() for ch in words[False].replace("[1]", "").replace("[2]", ""))


# -- the pipeline: kept saliency, content view, JSON round trip --------------------------------------------------------

ITEM = {"question": "When did rain fall?",
        "docs": [{"title": "Weather", "text": "Rain fell in 1913 over the hills."},
                 {"title": "Bread", "text": "The bakery sells rye bread."}]}
ANSWER = "Rain fell in 1913. The bakery sells bread."


@pytest.fixture(scope="module")
def kept(tiny_causal):
    m = Mirage(tiny_causal, config=MirageConfig().replace(aggregation={"keep_saliency": True}))
    return m, m.attribute(ITEM["question"], ITEM["docs"], answer=ANSWER, id="k")


def test_saliency_matrix_is_kept_compactly_and_round_trips(kept):
    m, res = kept
    sal = res.saliency
    cs = [t.index for t in res.tokens if t.context_sensitive]
    assert sal is not None and sal.answer_tokens == cs
    prep = m.prepare(ITEM, reserve_tokens=len(m.lm.tokenizer(ANSWER, add_special_tokens=False)["input_ids"]) + 1)
    assert sal.context_positions == list(prep.tokens.context_positions)
    assert sal.context_docs == [d + 1 for d in prep.tokens.context_docs]
    assert sal.content == list(content_mask(prep.tokens, prep.prompt.user_spans))
    raw = np.asarray(m.score_tokens(prep, ANSWER).cci.scores)
    assert sal.to_numpy().shape == raw.shape == sal.shape
    assert np.allclose(sal.to_numpy(), raw, rtol=2e-3, atol=1e-3 * np.abs(raw).max())
    back = AttributionResult.from_json(res.to_json())
    assert back == res and np.array_equal(back.saliency.to_numpy(), sal.to_numpy())
    assert len(res.to_json()) < 3 * len(res.to_json().replace(sal.data, ""))  # base64 float16: small beside the rest


def test_saliency_is_off_by_default_and_sentence_scores_are_on(tiny_causal):
    res = Mirage(tiny_causal).attribute(ITEM["question"], ITEM["docs"], answer=ANSWER)
    assert res.saliency is None
    for s in res.sentences:
        assert len(s.doc_scores) == 2
        assert math.isclose(sum(s.doc_scores), 1.0) or sum(s.doc_scores) == 0.0
        if s.mirage_citations:
            assert max(range(2), key=lambda d: (s.doc_scores[d], -d)) + 1 == s.mirage_citations[0]
        assert res.span_scores(s.start, s.end) == pytest.approx(s.doc_scores)
    for t in res.tokens:
        for cue in t.top_context:
            assert 0.0 <= cue.share <= 1.0
        assert sum(c.share for c in t.top_context) <= 1.0 + 1e-9


def test_content_view_in_the_pipeline_cites_only_title_and_text_tokens(tiny_causal):
    cfg = MirageConfig().replace(aggregation={"context": "content"})
    res = Mirage(tiny_causal, config=cfg).attribute(ITEM["question"], ITEM["docs"], answer=ANSWER)
    cues = [c for t in res.tokens for c in t.top_context]
    assert cues
    for cue in cues:
        doc = res.docs[cue.doc - 1]
        assert cue.token.strip() in doc["title"] + " " + doc["text"], cue.token
    assert res.config["aggregation"]["context"] == "content"


def test_config_switches_are_validated():
    with pytest.raises(ConfigError, match="aggregation.context"):
        AggregationConfig(context="documents")
    with pytest.raises(ConfigError, match="aggregation.keep_saliency"):
        AggregationConfig(keep_saliency="yes")
    assert AggregationConfig().context == "all" and AggregationConfig().keep_saliency is False


def test_saliency_matrix_keeps_relative_values_at_any_scale():
    rows = [[1e-6, 3e-6, 0.0], [2e-6, -1e-6, float("nan")]]
    sal = SaliencyMatrix.encode(rows, answer_tokens=[0, 2], context_positions=[5, 6, 7], context_docs=[0, 0, 1],
                                context_offsets=[(0, 1), (1, 2), (2, 3)])
    out = sal.to_numpy()
    assert np.allclose(out[0], rows[0], rtol=1e-3) and math.isnan(out[1, 2])
    assert sal.context_docs == [1, 1, 2] and sal.content is None
    big = SaliencyMatrix.encode([[1e6, 5e5]], answer_tokens=[0], context_positions=[0, 1], context_docs=[0, 0],
                                context_offsets=[(0, 1), (1, 2)])
    assert np.allclose(big.to_numpy(), [[1e6, 5e5]], rtol=1e-3)  # beyond float16's range, kept by the scale
    empty = SaliencyMatrix.encode([], answer_tokens=[], context_positions=[0], context_docs=[0],
                                  context_offsets=[(0, 1)])
    assert empty.to_numpy().shape == (0, 1)


# -- old results, tables -----------------------------------------------------------------------------------------------


def _old(res: AttributionResult) -> dict:
    """``res`` as a result written before scores existed."""
    data = res.to_dict()
    data.pop("saliency")
    for s in data["sentences"]:
        s.pop("doc_scores")
    for t in data["tokens"]:
        t.pop("doc_shares")
        for c in t["top_context"]:
            c.pop("share")
    return data


def test_old_results_stay_readable(kept):
    _, res = kept
    old = AttributionResult.from_dict(_old(res))
    assert old.saliency is None and all(s.doc_scores == [] for s in old.sentences)
    assert all(c.share is None for t in old.tokens for c in t.top_context)
    assert old.mirage_citations == res.mirage_citations
    frame = old.to_dataframe()
    assert frame[["doc_1", "doc_2"]].isna().all().all()
    if any(t.cited_docs for t in old.tokens):
        with pytest.raises(ValueError, match="older mirage"):
            old.span_scores(0, len(old.answer))


def test_to_dataframe_is_sentences_by_documents(kept):
    _, res = kept
    frame = res.to_dataframe()
    assert list(frame.columns) == ["sentence", "text", "start", "end", "mirage_citations", "self_citations",
                                   "invalid_self_citations", "doc_1", "doc_2"]
    assert len(frame) == len(res.sentences)
    assert frame.text.tolist() == [s.text for s in res.sentences]
    assert frame.mirage_citations.tolist() == res.mirage_citations
    assert frame[["doc_1", "doc_2"]].to_numpy().tolist() == [s.doc_scores for s in res.sentences]


def test_read_results_is_one_row_per_item_and_sentence(kept, tmp_path):
    _, res = kept
    three = dataclasses.replace(res, id=None, docs=res.docs + [{"title": "", "text": "extra"}],
                                sentences=[dataclasses.replace(s, doc_scores=[*s.doc_scores, 0.0])
                                           for s in res.sentences])
    path = tmp_path / "out.jsonl"
    records = [{"key": "a", "index": 0, **res.to_dict()}, {"key": "b", "index": 1, **_old(res)},
               {"key": "c", "index": 2, **three.to_dict()}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    df = mirage.read_results(path)
    assert mirage.read_results is read_results
    n = len(res.sentences)
    assert list(df.columns[:5]) == ["item", "sentence", "text", "start", "end"]
    assert list(df.columns[-3:]) == ["doc_1", "doc_2", "doc_3"]
    assert df.item.tolist() == ["k"] * n * 2 + [2] * n  # the id, or the position in the file without one
    assert df.sentence.tolist() == list(range(n)) * 3
    assert df.doc_3.iloc[:2 * n].isna().all() and df.doc_1.iloc[n:2 * n].isna().all()  # fewer documents; old
    assert df[["doc_1", "doc_2"]].iloc[:n].to_numpy().tolist() == [s.doc_scores for s in res.sentences]
    assert df.self_citations.tolist() == res.self_citations * 3
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert read_results(empty).empty and "mirage_citations" in read_results(empty).columns
    assert isinstance(df, pd.DataFrame)


def test_cite_token_shares_match_the_token_doc_shares():
    cit = cite_token([5.0, 1.0, 4.0, 0.1], [0, 0, 1, 1], CCIConfig(top_k=2, top_percent=None))
    _, tokens, _, _ = _aggregate({0: [5.0, 1.0, 4.0, 0.1, 0.0, 0.0]})
    assert tokens[0].doc_shares == pytest.approx([w for _, w in sorted(cit.doc_weights)] + [0.0])
