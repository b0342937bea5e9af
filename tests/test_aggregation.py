"""Aggregation from token scores to sentence citations and spans, on hand cases and random scores."""

from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.aggregation import aggregate, answer_spans, cite_token, doc_scores, rank_documents
from mirage.cci import CCIScores
from mirage.citations import parse_answer
from mirage.config import AggregationConfig, CCIConfig
from mirage.cti import CTIScores
from mirage.prompts import BuiltPrompt
from mirage.results import AnswerToken
from mirage.tokenization import TokenizedAnswer, TokenizedPrompt


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
