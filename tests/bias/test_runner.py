"""The bias runner's figures of one attributed answer (mirage/bias/runner.py): the mean generation probability of
the tokens mirage cites each document for, where some tokens carry no probability (``AnswerToken.prob`` None, as in
a result whose CTI scores recorded none)."""

from __future__ import annotations

from types import SimpleNamespace

from mirage.attribution.results import AnswerToken, SentenceAttribution
from mirage.bias.runner import mirage_citation_probabilities


def test_citation_probabilities_leave_out_the_tokens_without_a_probability():
    answer = "It rains. It pours."
    sentences = [SentenceAttribution(index=0, text="It rains.", start=0, end=9, mirage_citations=[1],
                                     self_citations=[]),
                 SentenceAttribution(index=1, text="It pours.", start=10, end=19, mirage_citations=[2],
                                     self_citations=[])]
    tokens = [AnswerToken(index=0, text="It", start=0, end=2, cti=1.0, context_sensitive=True, prob=0.4,
                          cited_docs=[1]),
              AnswerToken(index=1, text=" rains", start=2, end=8, cti=1.0, context_sensitive=True, prob=None,
                          cited_docs=[1]),
              AnswerToken(index=2, text=" It", start=9, end=12, cti=1.0, context_sensitive=True, prob=None,
                          cited_docs=[2])]
    res = SimpleNamespace(answer=answer, sentences=sentences, tokens=tokens)
    # document 1: the one token with a probability; document 2: none has one, so no figure (was a TypeError)
    assert mirage_citation_probabilities(res, [t.prob for t in tokens]) == [(1, 0.4)]
    assert mirage_citation_probabilities(res, [0.2, 0.6, 0.5]) == [(1, 0.4), (2, 0.5)]
