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

    from mirage.scoring.faithfulness import faithfulness, summarize_faithfulness
    fr = faithfulness(m, res)                    # m: the Mirage res was attributed with
    summarize_faithfulness([fr, ...]).methods["mirage"].drop
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mirage.attribution.aggregation import sentence_of_token
from mirage.attribution.forward import answer_logits, token_probabilities
from mirage.attribution.serialization import JSONRecord, library_versions
from mirage.attribution.tokenization import tokenize_answer
from mirage.config import MirageConfig
from mirage.scoring.metrics import mean_or_none
from mirage.views.markdown import fmt_number

if TYPE_CHECKING:
    from mirage.attribution.results import AttributionResult
    from mirage.pipeline import Mirage, PreparedItem

__all__ = ["METHODS", "FaithfulnessConfig", "FaithfulnessResult", "FaithfulnessSummary", "citation_sets",
           "faithfulness", "random_set", "summarize_faithfulness"]

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
        return summarize_faithfulness([self])


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
        head = (f"{'method':<20} {'n':>4} {'empty':>5} {'size':>5} {'drop':>8} {'keep':>8} "
                f"{'drop/tok':>9} {'keep/tok':>9}")
        rows = [head]
        for name, s in self.methods.items():
            cells = [fmt_number(value, digits, width=width, missing="—") for value, digits, width in (
                (s.mean_set_size, 2, 5), (s.drop, 3, 8), (s.keep, 3, 8), (s.drop_per_token, 3, 9),
                (s.keep_per_token, 3, 9))]
            rows.append(f"{name:<20} {s.n_sentences:>4} {s.n_empty:>5} " + " ".join(cells))
        return "\n".join(rows)


def summarize_faithfulness(results: Iterable[FaithfulnessResult]) -> FaithfulnessSummary:
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
        m: MethodSummary(n_sentences=len(per[m]["drop"]), n_empty=empty[m],
                         mean_set_size=mean_or_none(per[m]["size"]),
                         drop=mean_or_none(per[m]["drop"]), keep=mean_or_none(per[m]["keep"]),
                         drop_per_token=mean_or_none(per[m]["dt"]), keep_per_token=mean_or_none(per[m]["kt"]))
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


class _SubsetPasses:
    """The answer's token log-probabilities after a prompt holding only a subset of ``res``'s documents (1-based),
    one teacher-forced pass per distinct subset (cached); the empty subset is the contextless prompt."""

    def __init__(self, mirage: Mirage, res: AttributionResult, answer_ids: Sequence[int]) -> None:
        self.mirage = mirage
        self.res = res
        self.config = MirageConfig.from_dict(res.config)
        self.answer_ids = answer_ids
        self.cache: dict[frozenset[int], list[float]] = {}
        self._contextless: list[int] | None = None

    def _prepare(self, docs: list[dict[str, Any]]) -> PreparedItem:
        res = self.res
        return self.mirage.prepare({"question": res.question, "docs": docs}, config=self.config, index=res.id,
                                   reserve_tokens=len(self.answer_ids) + 1)

    def prompt_ids(self, kept: frozenset[int]) -> list[int]:
        """The prompt's token ids with only the ``kept`` documents."""
        res = self.res
        if kept:
            prep = self._prepare([res.docs[d - 1] for d in sorted(kept)])
            if len(kept) == len(res.docs) and prep.prompt.text != res.prompt:
                warnings.warn(f"item {res.id}: the rebuilt prompt differs from the result's (truncated documents or "
                              "another tokenizer); scores are relative to the rebuilt prompt.", stacklevel=4)
            if self._contextless is None:
                self._contextless = list(prep.tokens.contextless_ids)
            return list(prep.tokens.ids)
        if self._contextless is None:
            self._contextless = list(self._prepare(res.docs).tokens.contextless_ids)
        return self._contextless

    def logprobs(self, kept: frozenset[int]) -> list[float]:
        """Log-probability of each answer token after the prompt with only the ``kept`` documents."""
        if kept not in self.cache:
            logits = answer_logits(self.mirage.lm, self.prompt_ids(kept), self.answer_ids)
            self.cache[kept] = token_probabilities(logits, self.answer_ids, log=True)
        return self.cache[kept]


def _score_sentence(index: int, text: str, sets: dict[str, list[int]], owner: Sequence[int | None],
                    passes: _SubsetPasses, every: frozenset[int]) -> SentenceFaithfulness:
    """One sentence's log-probability with all documents and, per citation set, with it removed and kept alone
    (``owner[i]``: the sentence of answer token i)."""

    def sentence_sum(values: list[float]) -> float:
        return math.fsum(v for v, o in zip(values, owner) if o == index)

    full_lp = sentence_sum(passes.logprobs(every))
    scores = {}
    for method, docs in sets.items():
        score = CitationSetScore(docs=list(docs))
        if docs:
            cited = frozenset(docs)
            score.removed_logprob = sentence_sum(passes.logprobs(every - cited))
            score.kept_logprob = sentence_sum(passes.logprobs(cited))
            score.drop = full_lp - score.removed_logprob
            score.keep = score.kept_logprob - full_lp
        scores[method] = score
    return SentenceFaithfulness(index=index, text=text, n_tokens=sum(o == index for o in owner), full_logprob=full_lp,
                                sets=scores)


def faithfulness(mirage: Mirage, res: AttributionResult, *,
                 config: FaithfulnessConfig | None = None) -> FaithfulnessResult:
    """Remove / keep only each sentence's cited documents and measure the sentence's log-probability change.

    ``mirage`` must hold the model ``res`` was computed with; prompts are rebuilt from ``res.config``.
    """
    cfg = config or FaithfulnessConfig()
    answer = tokenize_answer(mirage.lm.tokenizer, res.answer)
    if res.tokens and len(answer.ids) != len(res.tokens):
        raise ValueError(f"the answer tokenizes into {len(answer.ids)} tokens, not the {len(res.tokens)} of the "
                         f"result: load the model the result was computed with ({res.model}).")
    passes = _SubsetPasses(mirage, res, answer.ids)
    every = frozenset(range(1, len(res.docs) + 1))
    passes.logprobs(every)  # the full prompt first: its pass also gives the contextless prompt
    spans = [(s.start, s.end) for s in res.sentences]
    owner = [sentence_of_token(res.answer, start, spans) for start, _end in answer.offsets]
    sentences = [_score_sentence(s.index, s.text, sets, owner, passes, every)
                 for s, sets in zip(res.sentences, citation_sets(res, seed=cfg.seed))]
    return FaithfulnessResult(id=res.id, model=res.model, n_docs=len(res.docs), sentences=sentences,
                              n_passes=len(passes.cache),
                              config={"faithfulness": cfg.to_dict(), "attribution": res.config},
                              versions=library_versions())
