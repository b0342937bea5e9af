"""Faithfulness of citation sets: does the model's likelihood of a sentence depend on the documents cited for it?

For each answer sentence and each citation set (the model's own self-citations, mirage's citations, and a seeded
random set of the same size as each), the prompt is rebuilt twice, with the same template and config the result was
attributed with:

- **removed**: every document except the cited ones (``drop = log p(s | all docs) - log p(s | without cited)``;
  a faithful set makes the sentence less likely when it is removed, so a larger drop is better);
- **kept**: only the cited documents (``keep = log p(s | only cited) - log p(s | all docs)``; a faithful set keeps
  the sentence about as likely as the full prompt, so a keep closer to 0, or above it, is better).

``log p(s | ...)`` is the summed log-probability of the sentence's tokens, force-decoded after the prompt and the
preceding answer text (the answer without citation marks, as attributed). Prompts depend only on which documents
they hold, so one teacher-forced pass over the whole answer per distinct document subset scores every sentence that
needs that subset (at most ``2 ** n_docs`` passes, usually far fewer). Remaining documents are renumbered 1..k by the
template, as in any prompt; the scored answer holds no citation marks, so the numbers never appear in it. A prompt
with no documents left is the template's contextless prompt.

Empty citation sets: a sentence whose set is empty for a method (no self-citation, or no context-sensitive token
for mirage) has nothing to remove or keep. Its score for that method, and for the random set matched to it, is
``None``: it is excluded from that method's means and counted in ``n_empty`` of the summary.

    fr = res.faithfulness(m)                     # or faithfulness(m, res)
    summarize([fr, ...]).methods["mirage"].drop
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .config import MirageConfig
from .forward import answer_logits
from .sentences import sentence_index
from .serialization import JSONRecord, library_versions
from .tokenization import tokenize_answer

if TYPE_CHECKING:
    from .pipeline import Mirage
    from .results import AttributionResult

#: Citation sets scored per sentence, in display order. ``random_*`` is a random set as large as the named one.
METHODS: tuple[str, ...] = ("selfcitation", "random_selfcitation", "mirage", "random_mirage")
FAITHFULNESS_FORMAT = 1


@dataclass(frozen=True)
class FaithfulnessConfig(JSONRecord):
    """``seed`` seeds the random citation sets (each drawn from the item id, sentence and method, so reruns and
    subsets of a run draw the same sets)."""

    seed: int = 0


@dataclass
class CitationSetScore:
    """One citation set of one sentence: its documents (1-based) and the sentence's log-probabilities (nats).

    ``removed_logprob``/``kept_logprob`` are None when ``docs`` is empty.
    """

    docs: list[int]
    removed_logprob: float | None = None
    kept_logprob: float | None = None
    drop: float | None = None
    keep: float | None = None


@dataclass
class SentenceFaithfulness:
    """One answer sentence: its tokens' count, its log-probability with all documents, and a score per method."""

    index: int
    text: str
    n_tokens: int
    full_logprob: float
    sets: dict[str, CitationSetScore]


@dataclass
class FaithfulnessResult(JSONRecord):
    """The faithfulness check of one attributed answer."""

    id: str | None
    model: str
    n_docs: int
    sentences: list[SentenceFaithfulness]
    #: Forward passes run (one per distinct document subset).
    n_passes: int
    #: ``{"faithfulness": FaithfulnessConfig, "attribution": the attribution's MirageConfig}`` as dicts.
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    format: int = FAITHFULNESS_FORMAT

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FaithfulnessResult:
        data = cls.known_fields(data)
        data["sentences"] = [
            SentenceFaithfulness(**{**s, "sets": {m: CitationSetScore(**c) for m, c in s["sets"].items()}})
            for s in data["sentences"]
        ]
        return cls(**data)

    def summary(self) -> FaithfulnessSummary:
        return summarize([self])


@dataclass
class MethodSummary:
    """Means over the sentences a method cited (``n_sentences``); ``n_empty`` sentences had an empty set.

    ``drop``/``keep`` are in nats per sentence, ``*_per_token`` divide each sentence's value by its token count
    first. Means are None when no sentence was scored.
    """

    n_sentences: int
    n_empty: int
    mean_set_size: float | None
    drop: float | None
    keep: float | None
    drop_per_token: float | None
    keep_per_token: float | None


@dataclass
class FaithfulnessSummary(JSONRecord):
    """Per method, means over all sentences of many results."""

    n_results: int
    n_sentences: int
    methods: dict[str, MethodSummary]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FaithfulnessSummary:
        return cls(n_results=data["n_results"], n_sentences=data["n_sentences"],
                   methods={m: MethodSummary(**s) for m, s in data["methods"].items()})

    def to_text(self) -> str:
        """A small fixed-width table, one row per method."""
        head = f"{'method':<20} {'n':>4} {'empty':>5} {'size':>5} {'drop':>8} {'keep':>8} {'drop/tok':>9} {'keep/tok':>9}"
        rows = [head]
        for name, s in self.methods.items():
            rows.append(f"{name:<20} {s.n_sentences:>4} {s.n_empty:>5} {_fmt(s.mean_set_size, 5, 2)} "
                        f"{_fmt(s.drop, 8)} {_fmt(s.keep, 8)} {_fmt(s.drop_per_token, 9)} {_fmt(s.keep_per_token, 9)}")
        return "\n".join(rows)


def _fmt(value: float | None, width: int, digits: int = 3) -> str:
    return f"{'—':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(results: Iterable[FaithfulnessResult]) -> FaithfulnessSummary:
    """Mean drop and keep per method over every sentence of ``results``; empty sets are counted, not averaged."""
    results = list(results)
    per: dict[str, dict[str, list[float]]] = {}
    empty: dict[str, int] = {}
    n_sentences = 0
    for res in results:
        for sent in res.sentences:
            n_sentences += 1
            for method, score in sent.sets.items():
                bucket = per.setdefault(method, {"drop": [], "keep": [], "dt": [], "kt": [], "size": []})
                empty.setdefault(method, 0)
                if score.drop is None or score.keep is None:
                    empty[method] += 1
                    continue
                n = max(1, sent.n_tokens)
                bucket["drop"].append(score.drop)
                bucket["keep"].append(score.keep)
                bucket["dt"].append(score.drop / n)
                bucket["kt"].append(score.keep / n)
                bucket["size"].append(float(len(score.docs)))
    order = [m for m in METHODS if m in per] + [m for m in per if m not in METHODS]
    methods = {
        m: MethodSummary(n_sentences=len(per[m]["drop"]), n_empty=empty[m], mean_set_size=_mean(per[m]["size"]),
                         drop=_mean(per[m]["drop"]), keep=_mean(per[m]["keep"]),
                         drop_per_token=_mean(per[m]["dt"]), keep_per_token=_mean(per[m]["kt"]))
        for m in order
    }
    return FaithfulnessSummary(n_results=len(results), n_sentences=n_sentences, methods=methods)


def random_set(size: int, n_docs: int, *, seed: int, key: str) -> list[int]:
    """A random set of ``size`` 1-based document ids, drawn from a generator seeded by ``seed`` and ``key``."""
    rng = random.Random(f"{seed}:{key}")
    return sorted(rng.sample(range(1, n_docs + 1), min(size, n_docs)))


def citation_sets(res: AttributionResult, *, seed: int = 0) -> list[dict[str, list[int]]]:
    """Per sentence, the citation set of each method in :data:`METHODS` (random sets drawn with ``seed``)."""
    n_docs = len(res.docs)
    out = []
    for s in res.sentences:
        sets = {"selfcitation": sorted(set(s.self_citations)), "mirage": sorted(set(s.mirage_citations))}
        for method in ("selfcitation", "mirage"):
            key = f"{res.id}:{s.index}:{method}"
            sets[f"random_{method}"] = random_set(len(sets[method]), n_docs, seed=seed, key=key) if sets[method] else []
        out.append({m: sets[m] for m in METHODS})
    return out


def sentence_of_tokens(text: str, offsets: Sequence[tuple[int, int]],
                       sentences: Sequence[tuple[int, int]]) -> list[int]:
    """Sentence index of each answer token: the sentence holding its first non-space character (as aggregation)."""
    out = []
    for start, _end in offsets:
        while start < len(text) and text[start].isspace():
            start += 1
        out.append(sentence_index(list(sentences), start) if sentences else -1)
    return out


def token_logprobs(logits: torch.Tensor, answer_ids: Sequence[int]) -> list[float]:
    """Log-probability of each answer token from logits ``[n_answer, vocab]``."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    ids = torch.tensor(list(answer_ids), device=logits.device)
    return logp.gather(1, ids[:, None])[:, 0].tolist()


def faithfulness(mirage: Mirage, res: AttributionResult, *,
                 config: FaithfulnessConfig | None = None) -> FaithfulnessResult:
    """Remove / keep only each sentence's cited documents and measure the sentence's log-probability change.

    ``mirage`` must hold the model ``res`` was computed with; prompts are rebuilt from ``res.config``.
    """
    cfg = config or FaithfulnessConfig()
    mcfg = MirageConfig.from_dict(res.config)
    lm = mirage.lm
    answer = tokenize_answer(lm.tokenizer, res.answer)
    if res.tokens and len(answer.ids) != len(res.tokens):
        raise ValueError(f"the answer tokenizes into {len(answer.ids)} tokens, not the {len(res.tokens)} of the "
                         f"result: load the model the result was computed with ({res.model}).")
    n_docs = len(res.docs)
    reserve = len(answer.ids) + 1
    contextless: list[int] | None = None
    cache: dict[frozenset[int], list[float]] = {}

    def prompt_ids(kept: frozenset[int]) -> list[int]:
        nonlocal contextless
        if kept:
            docs = [res.docs[d - 1] for d in sorted(kept)]
            prep = mirage.prepare({"question": res.question, "docs": docs}, config=mcfg, index=res.id,
                                  reserve_tokens=reserve)
            if len(kept) == n_docs and prep.prompt.text != res.prompt:
                warnings.warn(f"item {res.id}: the rebuilt prompt differs from the result's (truncated documents or "
                              "another tokenizer); scores are relative to the rebuilt prompt.", stacklevel=3)
            if contextless is None:
                contextless = list(prep.tokens.contextless_ids)
            return list(prep.tokens.ids)
        if contextless is None:
            full = mirage.prepare({"question": res.question, "docs": res.docs}, config=mcfg, index=res.id,
                                  reserve_tokens=reserve)
            contextless = list(full.tokens.contextless_ids)
        return contextless

    def logprobs(kept: frozenset[int]) -> list[float]:
        if kept not in cache:
            cache[kept] = token_logprobs(answer_logits(lm, prompt_ids(kept), answer.ids), answer.ids)
        return cache[kept]

    every = frozenset(range(1, n_docs + 1))
    full = logprobs(every)
    owner = sentence_of_tokens(res.answer, answer.offsets, [(s.start, s.end) for s in res.sentences])

    def sentence_sum(values: list[float], index: int) -> float:
        return math.fsum(v for v, o in zip(values, owner) if o == index)

    sentences = []
    for s, sets in zip(res.sentences, citation_sets(res, seed=cfg.seed)):
        full_lp = sentence_sum(full, s.index)
        scores = {}
        for method, docs in sets.items():
            score = CitationSetScore(docs=list(docs))
            if docs:
                cited = frozenset(docs)
                score.removed_logprob = sentence_sum(logprobs(every - cited), s.index)
                score.kept_logprob = sentence_sum(logprobs(cited), s.index)
                score.drop = full_lp - score.removed_logprob
                score.keep = score.kept_logprob - full_lp
            scores[method] = score
        sentences.append(SentenceFaithfulness(index=s.index, text=s.text, n_tokens=sum(o == s.index for o in owner),
                                              full_logprob=full_lp, sets=scores))
    return FaithfulnessResult(id=res.id, model=res.model, n_docs=n_docs, sentences=sentences, n_passes=len(cache),
                              config={"faithfulness": cfg.to_dict(), "attribution": res.config}, versions=library_versions())

