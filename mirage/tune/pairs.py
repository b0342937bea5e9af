"""Preference pairs for citation tuning from SelfCite's self-supervised reward (Chuang et al., ICML 2025).

For each presentation of a question (its documents in one order), the model answers greedily and cites as it does;
the answer's own cited set (the union over its sentences) is the *rejected* side. Every set of the **same size** is
scored by SelfCite's reward over the whole answer (the mean token log-probability of the answer with only those
documents kept minus with them removed; :func:`mirage.attribution.methods.selfcite.citation_reward_rows`, two passes
per set), and the best-rewarded one is the *chosen* side: the same answer text, each sentence that cited something
citing the chosen set instead. Chosen and rejected differ only in their marks and always cite as many documents, so
neither "cite more" nor "cite less" is a shortcut the preference can teach; an answer that cites nothing, or more
than ``max_size`` documents, or whose own set is already the best-rewarded one, gives no pair, and the run counts
each outcome. No label is read: ``supporting`` is kept only to report how often each side holds the supporting
passage.

    report = build_pairs(mirage, presentations, store="out/pairs.outcomes.jsonl")   # resumable
    write_pairs(report.pairs, "out/pairs.jsonl")                                    # mirage tune dpo's data

The outcomes are stored as they are done (:class:`mirage.runs.store.ResumableJSONL`, keyed by the presentation's id,
question and documents), so a run that dies loses nothing it finished.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.citations import parse_answer
from mirage.attribution.serialization import JSONRecord
from mirage.data.readers import BadRow, read_rows
from mirage.runs.store import ResumableJSONL, content_key, write_atomic
from mirage.tune.data import TrainingExample, insert_citations

if TYPE_CHECKING:
    from mirage.pipeline import Mirage
    from mirage.runs.progress import Progress

__all__ = [
    "OUTCOMES",
    "PairsReport",
    "PreferencePair",
    "answer_pair",
    "build_pairs",
    "read_pairs",
    "write_pairs",
]

#: What one presentation's answer gave: a pair, or why not.
OUTCOMES = ("pair", "agrees", "uncited", "too_many", "empty")


@dataclass
class PreferencePair(JSONRecord):
    """One preference pair: the question and documents of a presentation, the ``chosen`` and ``rejected`` answers
    (the same text, marks differing), the sets they cite and SelfCite's reward of each over the answer (nats per
    token); ``supporting``: the labelled supporting documents where known (not used to build the pair)."""

    id: str
    question: str
    docs: list[dict[str, str]]
    chosen: str
    rejected: str
    chosen_set: list[int]
    rejected_set: list[int]
    chosen_reward: float
    rejected_reward: float
    supporting: list[int] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def rag_item(self) -> dict[str, Any]:
        """The item as :meth:`mirage.pipeline.Mirage.prepare` takes it (no answer)."""
        return {"id": self.id, "question": self.question, "docs": self.docs}


def answer_pair(mirage: Mirage, example: TrainingExample, answer: str, *, max_size: int = 2
                ) -> tuple[PreferencePair | None, str]:
    """The pair ``answer`` (the model's own, with its marks) gives for ``example`` (see the module docstring) and its
    outcome, one of :data:`OUTCOMES`."""
    from mirage.attribution.methods import document_inputs
    from mirage.attribution.methods.selfcite import candidate_sets, citation_reward_rows, ranked, token_means
    from mirage.attribution.tokenization import tokenize_answer

    parsed = parse_answer(answer, len(example.docs))
    own = tuple(sorted({d for ids in parsed.citations for d in ids}))
    if not parsed.text.strip():
        return None, "empty"
    if not own:
        return None, "uncited"
    if len(own) > max_size:
        return None, "too_many"
    tokens = tokenize_answer(mirage.lm.tokenizer, parsed.text)
    if not tokens.ids:
        return None, "empty"
    inputs = document_inputs(mirage, example.rag_item(with_output=False), tokens.ids, config=mirage.config)
    sets = [s for s in candidate_sets(inputs.n_docs, len(own)) if len(s) == len(own)]
    rewards = token_means(citation_reward_rows(inputs, sets))
    best = ranked(sets, rewards)
    if best.best == own:
        return None, "agrees"
    reward_of = dict(zip(best.sets, best.rewards))
    chosen = insert_citations(parsed.text, parsed.sentences,
                              [list(best.best) if ids else [] for ids in parsed.citations])
    rejected = insert_citations(parsed.text, parsed.sentences, [list(ids) for ids in parsed.citations])
    return PreferencePair(id=example.id, question=example.question, docs=list(example.docs), chosen=chosen,
                          rejected=rejected, chosen_set=list(best.best), rejected_set=list(own),
                          chosen_reward=round(reward_of[best.best], 6), rejected_reward=round(reward_of[own], 6),
                          supporting=example.supporting, meta=dict(example.meta)), "pair"


@dataclass
class PairsReport(JSONRecord):
    """What :func:`build_pairs` did: the answers (``n_answers``), the outcome counts (:data:`OUTCOMES`), the pairs,
    and, over the pairs whose presentation has one supporting passage, how often the chosen and the rejected side
    cite it (``chosen_supported`` / ``rejected_supported``: shares of those pairs, None without any)."""

    model: str
    n_answers: int
    outcomes: dict[str, int]
    pairs: list[PreferencePair]
    chosen_supported: float | None
    rejected_supported: float | None
    max_size: int
    command: str | None = None

    def summary(self) -> dict[str, Any]:
        """The report without its pairs (they go to the pairs file)."""
        out = self.to_dict()
        out.pop("pairs")
        out["n_pairs"] = len(self.pairs)
        return out

    def to_text(self) -> str:
        counts = ", ".join(f"{self.outcomes.get(o, 0)} {o}" for o in OUTCOMES)
        lines = [f"{self.model}: {self.n_answers} answers -> {len(self.pairs)} pairs ({counts})"]
        if self.chosen_supported is not None and self.rejected_supported is not None:
            lines.append(f"the supporting passage is cited by the chosen side in {100 * self.chosen_supported:.1f} % "
                         f"of pairs, by the rejected side in {100 * self.rejected_supported:.1f} %")
        return "\n".join(lines)


def _supported_share(pairs: Sequence[PreferencePair], side: str) -> float | None:
    labelled = [p for p in pairs if p.supporting is not None and len(p.supporting) == 1]
    if not labelled:
        return None
    return sum(p.supporting[0] in getattr(p, f"{side}_set") for p in labelled if p.supporting) / len(labelled)


def build_pairs(mirage: Mirage, examples: Sequence[TrainingExample], *, max_new_tokens: int = 48, max_size: int = 2,
                store: str | Path | None = None, progress: Progress | None = None) -> PairsReport:
    """Answer each example greedily with ``mirage``'s model and prompt (:func:`~mirage.tune.evaluate.
    evaluate_citations`, whose answers are stored beside ``store``) and turn each answer into a pair or an outcome
    (:func:`answer_pair`); with ``store``, each outcome is kept as it is done and a rerun reuses it (a file made with
    another model, prompt, ``max_new_tokens`` or ``max_size`` is refused)."""
    from mirage.tune.evaluate import evaluate_citations

    answers_store = None
    if store is not None:
        path = Path(store)
        answers_store = path.with_name(path.name.removesuffix(".outcomes.jsonl").removesuffix(".jsonl")
                                       + ".answers.jsonl")
    evaluation = evaluate_citations(mirage, examples, max_new_tokens=max_new_tokens, progress=progress,
                                    store=answers_store)
    settings = {"model": mirage.lm.name, "prompt": mirage.config.to_dict()["prompt"], "max_new_tokens": max_new_tokens,
                "max_size": max_size, "reward": "selfcite"}
    out = ResumableJSONL(store, settings=settings) if store is not None else None
    done = {r["key"]: r for r in out.records()} if out is not None else {}
    outcomes: Counter[str] = Counter()
    pairs: list[PreferencePair] = []
    todo: Iterable[tuple[TrainingExample, dict[str, Any]]] = list(zip(examples, evaluation.answers))
    if progress is not None:
        todo = progress(todo, len(examples), "pairs")
    try:
        for ex, row in todo:
            key = content_key({"id": ex.id, "question": ex.question, "docs": ex.docs})
            record = done.get(key)
            if record is None:
                pair, outcome = answer_pair(mirage, ex, row["answer"], max_size=max_size)
                record = {"key": key, "id": ex.id, "outcome": outcome,
                          "pair": pair.to_dict() if pair is not None else None}
                if out is not None:
                    out.write(record)
            outcomes[record["outcome"]] += 1
            if record["pair"] is not None:
                pairs.append(PreferencePair.from_dict(record["pair"]))
    finally:
        if out is not None:
            out.close()
    return PairsReport(model=mirage.lm.name, n_answers=len(examples), outcomes={o: outcomes[o] for o in OUTCOMES},
                       pairs=pairs, chosen_supported=_supported_share(pairs, "chosen"),
                       rejected_supported=_supported_share(pairs, "rejected"), max_size=max_size)


def write_pairs(pairs: Iterable[PreferencePair], path: str | Path) -> Path:
    """The pairs as JSONL (one :class:`PreferencePair` per line), written atomically."""
    text = "".join(json.dumps(p.to_dict(), ensure_ascii=False) + "\n" for p in pairs)
    return write_atomic(Path(path), text)


def read_pairs(paths: Sequence[str | Path]) -> tuple[list[PreferencePair], list[str]]:
    """The pairs of ``paths`` (files :func:`write_pairs` wrote) and the malformed rows, one line each."""
    pairs: list[PreferencePair] = []
    bad: list[str] = []
    for path in paths:
        for raw in read_rows(path):
            if isinstance(raw, BadRow):
                bad.append(str(raw))
                continue
            try:
                if not isinstance(raw.data, dict):
                    raise TypeError(f"a {type(raw.data).__name__}, not an object")
                pair = PreferencePair.from_dict(raw.data)
                if not (pair.chosen.strip() and pair.rejected.strip() and pair.docs):
                    raise ValueError("an empty answer or no documents")
                pairs.append(pair)
            except (TypeError, ValueError) as err:
                bad.append(f"{path}:{raw.line}: not a preference pair ({err}); write pairs with mirage tune pairs")
    return pairs, bad
