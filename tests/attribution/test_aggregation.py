"""Aggregation from token scores to sentence citations and spans, on hand cases and random scores; one rule for the
sentence of an answer token, the same in aggregation, the bias runner and faithfulness."""

import dataclasses
from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirage import Mirage, MirageConfig
from mirage.attribution.aggregation import (
    aggregate,
    answer_spans,
    cite_sentences,
    cite_token,
    doc_scores,
    rank_documents,
    sentence_of_token,
)
from mirage.attribution.cci import CCIScores
from mirage.attribution.citations import parse_answer
from mirage.attribution.cti import CTIScores
from mirage.attribution.prompts import BuiltPrompt
from mirage.attribution.results import AnswerToken
from mirage.attribution.tokenization import TokenizedAnswer, TokenizedPrompt, tokenize_answer
from mirage.bias.runner import mirage_citation_probabilities
from mirage.config import AggregationConfig, CCIConfig
from mirage.scoring.faithfulness import faithfulness


def test_cite_token_weights_documents_by_kept_saliency():
    cit = cite_token([5.0, 1.0, 4.0, 0.1], [0, 0, 1, 1], CCIConfig(top_k=2, top_percent=None))
    assert cit.kept == (0, 2)
    assert [d for d, _ in cit.doc_weights] == [0, 1]
    assert abs(sum(w for _, w in cit.doc_weights) - 1) < 1e-9
    assert doc_scores([5.0, 1.0, 4.0, 0.1], [0, 0, 1, 1], 3) == [1.0, 0.8, 0.0]


def test_rank_documents_strongest_first_capped():
    a = cite_token([1, 9, 0, 0], [0, 1, 2, 3], CCIConfig(top_k=2, top_percent=None))  # docs 1 (0.9), 0 (0.1)
    b = cite_token([0, 0, 5, 5], [0, 1, 2, 3], CCIConfig(top_k=2, top_percent=None))  # docs 2, 3 (0.5 each)
    assert rank_documents([a, b], max_citations=3) == [2, 3, 4]
    assert rank_documents([a, b], max_citations=1) == [2]
    assert rank_documents([], max_citations=3) == []


def test_answer_spans_merge_consecutive_tokens_and_widen_to_words():
    text = "In nineteen thirteen, Ibn Saud"
    toks = [
        AnswerToken(0, "In", 0, 2, 0.1, False),
        AnswerToken(1, " nine", 2, 7, 2.0, True, cited_docs=[1]),
        AnswerToken(2, "teen", 7, 11, 2.0, True, cited_docs=[1]),
        AnswerToken(3, " thir", 11, 16, 2.0, True, cited_docs=[2]),
        AnswerToken(4, "teen", 16, 20, 0.1, False),
    ]
    spans = answer_spans(text, toks)
    assert [(s.text, s.docs, s.tokens) for s in spans] == [("nineteen", [1], [1, 2]), ("thirteen", [2], [3])]


@settings(max_examples=150, deadline=None)
@given(
    words=st.lists(st.text(alphabet="abcdé ЖЖ.!?[]1", min_size=1, max_size=8), min_size=1, max_size=12),
    data=st.data(),
)
def test_aggregate_random_scores_well_formed(words, data):
    raw = " ".join(words)
    parsed = parse_answer(raw, n_docs=3)
    text = parsed.text
    # Fake tokenization of the answer: one token per character run (offsets are all that aggregation reads).
    offsets = [(i, i + 1) for i in range(len(text))] or [(0, 0)]
    n = len(offsets)
    prompt_text = "Document [1]: alpha beta\nDocument [2]: gamma\nDocument [3]: delta epsilon\n"
    doc_spans = ((0, 25), (25, 45), (45, len(prompt_text)))
    ctx_offsets = [(i, i + 1) for i in range(len(prompt_text)) if not prompt_text[i].isspace()]
    ctx_docs = [next(d for d, (a, b) in enumerate(doc_spans) if a <= s < b) for s, _ in ctx_offsets]
    selected = tuple(sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n))))
    scores = [data.draw(st.floats(0, 10)) for _ in range(n)]
    cci_rows = tuple(tuple(data.draw(st.lists(st.floats(0, 5), min_size=len(ctx_offsets),
                                              max_size=len(ctx_offsets)))) for _ in selected)
    prompt = TokenizedPrompt(ids=tuple(range(len(ctx_offsets))), contextless_ids=(), offsets=tuple(ctx_offsets),
                             context_positions=tuple(range(len(ctx_offsets))), context_docs=tuple(ctx_docs),
                             context_offsets=tuple(ctx_offsets))
    _ = BuiltPrompt(prompt_text, "", prompt_text, (0, len(prompt_text)), doc_spans, True)

    class Tok:
        def decode(self, ids):
            return "?"

    sentences, tokens, spans, ctx_spans = aggregate(
        tokenizer=Tok(), prompt_text=prompt_text, tokenized=prompt,
        answer=TokenizedAnswer(ids=tuple(range(n)), offsets=tuple(offsets)), parsed=parsed, n_docs=3,
        cti=CTIScores(scores=tuple(scores), selected=selected, threshold=0.0, contextless_top=tuple(range(n))),
        cci=CCIScores(selected=selected, contrast_ids=tuple(None for _ in selected), scores=cci_rows),
        cci_cfg=CCIConfig(), cfg=AggregationConfig(max_citations=2),
    )
    assert len(tokens) == n and len(sentences) == len(parsed.sentences)
    for s in sentences:
        assert len(s.mirage_citations) <= 2 and set(s.mirage_citations) <= {1, 2, 3}
        assert len(set(s.mirage_citations)) == len(s.mirage_citations)
    for sp in spans:
        assert text[sp.start:sp.end] == sp.text and sp.docs
    for cs in ctx_spans:
        _a, _b = doc_spans[cs.doc - 1]
        assert prompt_text[cs.start:cs.end] == cs.text and cs.answer_tokens


# -- the sentence of an answer token ----------------------------------------------------------------------------------

#: Sentences (0, 15), (16, 26), (28, 38). Token 4 (" ") is whitespace-only between the first two: it goes with the
#: text after it. Token 7 (".  I") straddles the boundary between the last two: it goes with its first visible
#: character, the period closing sentence 1.
HAND_TEXT = "Formed in 1913. Rain fell.  It rained."
HAND_OFFSETS = [(0, 6), (6, 9), (9, 14), (14, 15), (15, 16), (16, 20), (20, 25), (25, 29), (29, 30), (30, 37),
                (37, 38)]
HAND_SENTENCES = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2]


def test_sentence_of_token_is_the_sentence_of_the_first_visible_character():
    spans = parse_answer(HAND_TEXT, n_docs=1).sentences
    assert spans == ((0, 15), (16, 26), (28, 38))
    assert [sentence_of_token(HAND_TEXT, a, spans) for a, _b in HAND_OFFSETS] == HAND_SENTENCES
    assert sentence_of_token("Trailing. ", 9, [(0, 9)]) == 0  # whitespace after the last sentence: the last one
    assert sentence_of_token("", 0, []) is None


def test_cite_sentences_unions_each_sentences_token_citations():
    cfg = CCIConfig(top_k=1, top_percent=None)
    cited = {3: cite_token([0, 1, 0], [0, 1, 2], cfg), 4: cite_token([0, 0, 1], [0, 1, 2], cfg),
             7: cite_token([1, 0, 0], [0, 1, 2], cfg)}
    starts = [a for a, _b in HAND_OFFSETS]
    spans = parse_answer(HAND_TEXT, n_docs=1).sentences
    assert cite_sentences(HAND_TEXT, spans, starts, cited, max_citations=2) == [[2], [1, 3], []]
    assert cite_sentences(HAND_TEXT, spans, starts, cited, max_citations=1) == [[2], [1], []]
    assert cite_sentences("", [], [], {}, max_citations=2) == []


def _one_hot(parsed, offsets):
    """``aggregate`` with every answer token context-sensitive and citing only its own document (token i: document
    i + 1), so the sentence citations show which sentence aggregation put each token in."""
    n = len(offsets)
    ctx = tuple((j, j + 1) for j in range(n))
    prompt = TokenizedPrompt(ids=tuple(range(n)), contextless_ids=(), offsets=ctx, context_positions=tuple(range(n)),
                             context_docs=tuple(range(n)), context_offsets=ctx)
    selected = tuple(range(n))

    class Tok:
        def decode(self, ids):
            return "?"

    sentences, tokens, _spans, _ctx = aggregate(
        tokenizer=Tok(), prompt_text="x" * n, tokenized=prompt,
        answer=TokenizedAnswer(ids=selected, offsets=tuple(offsets)), parsed=parsed, n_docs=n,
        cti=CTIScores(scores=(1.0,) * n, selected=selected, threshold=0.0, contextless_top=selected),
        cci=CCIScores(selected=selected, contrast_ids=(None,) * n,
                      scores=tuple(tuple(float(j == i) for j in range(n)) for i in range(n))),
        cci_cfg=CCIConfig(top_k=1, top_percent=None), cfg=AggregationConfig(max_citations=n),
    )
    return sentences, tokens


def _owners(sentences, tokens, text):
    """Token index → sentence, as aggregation and as the bias runner's citation probabilities see it."""
    by_aggregate = {doc - 1: s.index for s in sentences for doc in s.mirage_citations}
    by_runner = {}
    every = list(range(1, len(tokens) + 1))
    for s in sentences:  # only sentence s cites every document: the runner reports the tokens it puts in s
        cites = [dataclasses.replace(x, mirage_citations=every if x.index == s.index else []) for x in sentences]
        res = SimpleNamespace(answer=text, sentences=cites, tokens=tokens)
        for doc, _p in mirage_citation_probabilities(res, [0.5] * len(tokens)):
            by_runner[doc - 1] = s.index
    return by_aggregate, by_runner


def test_whitespace_and_straddling_tokens_land_in_the_same_sentence_for_every_caller():
    parsed = parse_answer(HAND_TEXT, n_docs=1)
    sentences, tokens = _one_hot(parsed, HAND_OFFSETS)
    by_aggregate, by_runner = _owners(sentences, tokens, parsed.text)
    expected = dict(enumerate(HAND_SENTENCES))
    assert by_aggregate == expected
    assert by_runner == expected


@pytest.mark.parametrize("answer", [
    "It was formed in 1913.\n\nRain fell in spring.  It sells rye bread.",  # '\n' and ' ' tokens at boundaries
    "Formed in 1913!\" Rain fell...  Bread",
])
def test_faithfulness_counts_each_token_in_the_sentence_aggregation_puts_it_in(tiny_causal, answer):
    m = Mirage(tiny_causal, config=MirageConfig().replace(cci={"top_k": 1, "top_percent": None}))
    docs = [{"title": "A", "text": "Rain fell in 1913."}]
    res = m.attribute("When?", docs, answer=answer, id="ws")
    for s in res.sentences:
        s.mirage_citations = []  # one pass, with every document: only the sentences' token counts matter here
    offsets = tokenize_answer(tiny_causal.tokenizer, res.answer).offsets
    assert any(not res.answer[a:b].strip() for a, b in offsets)  # the case holds a whitespace-only token
    sentences, tokens = _one_hot(parse_answer(res.answer, n_docs=1), offsets)
    by_aggregate, by_runner = _owners(sentences, tokens, res.answer)
    assert by_runner == by_aggregate and sorted(by_aggregate) == list(range(len(offsets)))
    counts = Counter(by_aggregate.values())
    assert {s.index: s.n_tokens for s in faithfulness(m, res).sentences} == {s.index: counts[s.index]
                                                                          for s in res.sentences}
