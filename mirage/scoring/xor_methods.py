"""Document attribution methods on XOR-AttriQA (``mirage score xor-attriqa --methods NAME… | all``): every method
of :data:`mirage.registry.DOCUMENT_METHODS` on the same answers and prompts as MIRAGE, its document scores stored
per item (:func:`score_methods`, resumable, into the run's ``methods.jsonl``) and turned into the report's rows
(:func:`document_method_rows`).

Each (answer, passage) pair's score is the method's score for that passage averaged over the answer's tokens. Three
rows per method, beside MIRAGE's and the baselines in every table of ``results.json`` (and in ``pairs.jsonl``):

- ``NAME@ex``: per answer, the passages whose score is at least mean + 1·std of the answer's passages' and positive
  (:func:`mirage.attribution.methods.cite_documents`, as MIRAGE-EX thresholds CTI per answer);
- ``NAME@cal``: one threshold, chosen on the ``--calibrate-on`` answers to maximise F1 (as the passage-likelihood
  classifier's);
- ``NAME@cal_agreement``: one threshold chosen to maximise agreement (as MIRAGE-CAL's).

ROC-AUC is the same for the three (the same scores). ``results.json``'s ``methods`` has, per method, its settings,
the calibrated thresholds and each one's value on the calibration answers, its cost per answer (passes, positions,
seconds, peak GPU memory) on the test answers and, where the run scored the references, its ``faithfulness``
(:func:`method_faithfulness`): how its passage ranking agrees with what removing passages does to the same model's
answer (exact Shapley values and leave-one-out), and what dropping or keeping its top passage does beside a random
passage.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mirage.data.inputs import InputError
from mirage.runs.lazy import resolve_mirage
from mirage.runs.progress import Progress
from mirage.runs.sharding import owns
from mirage.scoring.metrics import spearman
from mirage.scoring.xor_attriqa import prepare_item
from mirage.scoring.xor_data import XorItem

__all__ = ["CALIBRATED_RULES", "FAITHFULNESS_REFERENCES", "METHODS_FILE", "METHOD_RULES", "MethodRecord",
           "document_method_rows", "method_faithfulness", "resolve_methods", "score_methods", "xor_document_inputs"]

#: The run folder's store of the methods' document scores.
METHODS_FILE = "methods.jsonl"
#: The calibrated rows of each method, by suffix after ``@``: the measure their threshold maximises.
CALIBRATED_RULES = {"cal": "f1", "cal_agreement": "agreement"}
#: The rows each method gets (see the module docstring), by suffix after ``@``.
METHOD_RULES = ("ex", *CALIBRATED_RULES)
#: What ``--methods all`` stands for.
ALL = "all"
#: The faithfulness check's references (:func:`method_faithfulness`): what removing passages does to the same model's
#: answer, exactly (Shapley values over every subset of the passages) and one passage at a time.
FAITHFULNESS_REFERENCES = ("shapley", "leave_one_out")


def resolve_methods(names: Sequence[str]) -> tuple[Any, ...]:
    """The registered methods named (``all``: every registered one, in name order), or an InputError naming
    ``--methods`` and the registered names."""
    import mirage.attribution.methods  # noqa: F401 - registers the built-in methods
    from mirage.registry import DOCUMENT_METHODS

    if ALL in names:
        return tuple(DOCUMENT_METHODS[name] for name in sorted(DOCUMENT_METHODS))
    unknown = [n for n in names if n not in DOCUMENT_METHODS]
    if unknown:
        raise InputError(f"{', '.join(map(repr, unknown))} is not a registered document method; choose from "
                         f"{', '.join(sorted(DOCUMENT_METHODS))}, or all.", field="--methods")
    return tuple(DOCUMENT_METHODS[n] for n in dict.fromkeys(names))


def xor_document_inputs(mirage: Any, item: XorItem, *, config: Any) -> Any:
    """The :class:`~mirage.attribution.methods.DocumentInputs` of one XOR-AttriQA answer: its passages as documents
    and its citation-free answer, prepared with ``config``'s prompt as MIRAGE's scores are
    (:func:`mirage.scoring.xor_attriqa.prepare_item`)."""
    from mirage.attribution.methods import document_inputs

    text, prep = prepare_item(mirage, item, config=config)
    return document_inputs(mirage, prep, text, config=config)


def _options_digest(method: Any) -> str:
    return hashlib.sha256(json.dumps(method.options(), sort_keys=True, default=str).encode()).hexdigest()[:12]


def _key(method: Any, item_key: str) -> str:
    """A record's key: the method, its settings (changed settings are scored anew) and the item."""
    return f"{method.name}:{_options_digest(method)}:{item_key}"


@dataclass(frozen=True)
class MethodRecord:
    """One method's scores of one answer: ``doc[d]``, passage d's score averaged over the answer's tokens, and the
    call's cost (:class:`mirage.attribution.methods.PassCost` as a dict)."""

    method: str
    item: str
    doc: tuple[float, ...]
    doc_scores: tuple[tuple[float, ...], ...]
    cost: Mapping[str, Any]


def score_methods(model: Any, items: Sequence[XorItem], methods: Sequence[Any], *, config: Any, store: Any,
                  progress: Progress | None = None) -> tuple[dict[str, dict[str, MethodRecord]], list[str]]:
    """Each method's scores of each item (``method name → item key → record``), computing into ``store`` only the
    (method, item) pairs it lacks and owns (a rank of several computes its share), and the keys of the items the
    pipeline rejects. ``model``: a Mirage, or a function returning one (called only if something is missing);
    ``config``: the run's pipeline (its prompt prepares the items, as MIRAGE's scores are prepared)."""
    items = list({item.key: item for item in items}.values())  # an answer in both test and calibration files once
    todo = [(m, item) for item in items for m in methods
            if _key(m, item.key) not in store.done and owns(store, _key(m, item.key))]
    failed: list[str] = []
    if todo:
        mirage = resolve_mirage(model)
        prepared: dict[str, Any] = {}
        for method, item in progress(todo, len(todo), "methods") if progress else todo:
            if item.key in failed:
                continue
            try:
                if item.key not in prepared:
                    prepared[item.key] = xor_document_inputs(mirage, item, config=config)
                result = method.attribute(prepared[item.key])
            except InputError:
                failed.append(item.key)
                continue
            store.write({"key": _key(method, item.key), "method": method.name, "item": item.key,
                         "options": method.options(),
                         "doc_scores": [[float(f"{v:.6g}") for v in row] for row in result.doc_scores],
                         "cost": result.cost.to_dict(), "notes": result.notes})
            if len(prepared) > 4:  # the prepared inputs of the last items only
                prepared.pop(next(iter(prepared)))
    wanted = {_key(m, item.key): m.name for item in items for m in methods}
    out: dict[str, dict[str, MethodRecord]] = {m.name: {} for m in methods}
    for rec in store.records():
        if rec.get("key") in wanted:
            rows = tuple(tuple(float(v) for v in row) for row in rec["doc_scores"])
            n = max(len(rows), 1)
            doc = tuple(sum(row[d] for row in rows) / n for d in range(len(rows[0]) if rows else 0))
            out[rec["method"]][rec["item"]] = MethodRecord(method=rec["method"], item=rec["item"], doc=doc,
                                                           doc_scores=rows, cost=rec["cost"])
    return out, failed


def _ex_cited(record: MethodRecord) -> list[bool]:
    from mirage.attribution.methods import cite_documents

    cited = set(cite_documents(record.doc_scores, rule="std", k=1.0).cited)
    return [d + 1 in cited for d in range(len(record.doc))]


def _cost_summary(records: Iterable[MethodRecord]) -> dict[str, Any]:
    costs = [r.cost for r in records]
    if not costs:
        return {"answers": 0}
    peaks = [p for p in (c.get("peak_memory_bytes") for c in costs) if p is not None]
    out: dict[str, Any] = {"answers": len(costs)}
    for name in ("forward_passes", "jvp_passes", "backward_passes", "tokens", "seconds"):
        out[name] = statistics.fmean(float(c.get(name, 0)) for c in costs)
    out["median_seconds"] = statistics.median(float(c.get("seconds", 0)) for c in costs)
    out["peak_memory_bytes"] = max(peaks) if peaks else None
    return out


def document_method_rows(items: Sequence[XorItem], calibration_items: Sequence[XorItem] | None,
                scores: Mapping[str, Mapping[str, MethodRecord]], methods: Sequence[Any]
                ) -> tuple[dict[str, list[tuple[str, list[bool], list[bool], list[float], str]]], dict[str, Any]]:
    """The report's rows of each method (``NAME@RULE`` → one row per test item it scored: language, citations,
    labels, passage scores, item key), and ``results.json``'s ``methods`` summary (see the module docstring). The
    calibrated rows need ``calibration_items``; without them only ``NAME@ex``."""
    from mirage.likelihood.classifier import best_threshold

    rows: dict[str, list] = {}
    summary: dict[str, Any] = {}
    for method in methods:
        found = scores.get(method.name, {})
        test = [(item, found[item.key]) for item in items if item.key in found]
        entry: dict[str, Any] = {"options": method.options(), "cost": _cost_summary(r for _i, r in test)}
        rows[f"{method.name}@ex"] = [(item.lang, _ex_cited(r), list(item.labels), list(r.doc), item.key)
                                     for item, r in test]
        cal = [(item, found[item.key]) for item in calibration_items or () if item.key in found]
        pooled = [(s, bool(y)) for item, r in cal for s, y in zip(r.doc, item.labels)]
        if pooled:
            thresholds = {}
            for rule, metric in CALIBRATED_RULES.items():
                bar, value = best_threshold([s for s, _y in pooled], [y for _s, y in pooled], metric)
                thresholds[rule] = {"threshold": bar, metric: 100 * value}
                rows[f"{method.name}@{rule}"] = [(item.lang, [s >= bar for s in r.doc], list(item.labels),
                                                  list(r.doc), item.key) for item, r in test]
            entry["calibration"] = {"answers": len(cal), "pairs": len(pooled), **thresholds}
        faith = method_faithfulness(test, scores)
        if faith is not None:
            entry["faithfulness"] = faith
        summary[method.name] = entry
    return rows, summary


def _top(values: Sequence[float]) -> list[int]:
    """The passages at the top (several where tied)."""
    best = max(values)
    return [d for d, v in enumerate(values) if v == best]


def _mean_or_none(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def method_faithfulness(test: Sequence[tuple[XorItem, MethodRecord]],
                        scores: Mapping[str, Mapping[str, MethodRecord]]) -> dict[str, Any] | None:
    """How faithful one method's passage scores (``test``: its records of the test answers) are to what removing
    passages does to the same model's answer, over the answers with at least two passages that the references
    scored; None where the run scored neither reference (:data:`FAITHFULNESS_REFERENCES`).

    - ``spearman[ref]``: Spearman's rank correlation of the method's passage scores with the reference's (average
      ranks for ties, :func:`mirage.scoring.metrics.spearman`), averaged over the answers where neither side is
      constant (``spearman_answers[ref]`` of them);
    - ``top1[ref]``: % of answers whose top passage is the reference's (a tie at the top counts as a random pick
      among the tied: the share of them that is the reference's top);
    - with ``leave_one_out``: ``drop_top1``, the drop of the answer's mean token log-probability (nats) when the
      method's top passage is removed from the prompt, and ``drop_random``, the same for a passage drawn at random
      (the mean over the answer's passages), both averaged over answers;
    - with ``leave_one_out`` and ``selfcite`` too: ``keep_top1``, the answer's mean token log-probability with the
      method's top passage alone minus with every passage (``log p(y | d alone) - log p(y | all)`` = SelfCite's
      reward of d minus its leave-one-out drop), and ``keep_random``, the same for a random passage.

    A faithful method's top passage drops the answer more than a random one and keeps more of it alone."""
    refs = {name: scores.get(name, {}) for name in (*FAITHFULNESS_REFERENCES, "selfcite")}
    if not any(refs[name] for name in FAITHFULNESS_REFERENCES):
        return None
    pairs = [(item, rec) for item, rec in test if len(rec.doc) >= 2]
    out: dict[str, Any] = {"answers": 0, "spearman": {}, "spearman_answers": {}, "top1": {}}
    for ref in FAITHFULNESS_REFERENCES:
        both = [(rec.doc, refs[ref][item.key].doc) for item, rec in pairs
                if item.key in refs[ref] and len(refs[ref][item.key].doc) == len(rec.doc)]
        if not both:
            continue
        corr = [c for c in (spearman(a, b) for a, b in both) if c is not None]
        out["spearman"][ref] = _mean_or_none(corr)
        out["spearman_answers"][ref] = len(corr)
        tops = [(_top(a), set(_top(b))) for a, b in both]
        out["top1"][ref] = 100 * statistics.fmean(sum(d in theirs for d in mine) / len(mine) for mine, theirs in tops)
        out["answers"] = max(out["answers"], len(both))
    loo, kept = refs["leave_one_out"], refs["selfcite"]
    drops, drop_random, keeps, keep_random = [], [], [], []
    for item, rec in pairs:
        if item.key not in loo or len(loo[item.key].doc) != len(rec.doc):
            continue
        top, drop = _top(rec.doc), loo[item.key].doc
        drops.append(statistics.fmean(drop[d] for d in top))
        drop_random.append(statistics.fmean(drop))
        if item.key in kept and len(kept[item.key].doc) == len(rec.doc):
            keep = [k - x for k, x in zip(kept[item.key].doc, drop)]
            keeps.append(statistics.fmean(keep[d] for d in top))
            keep_random.append(statistics.fmean(keep))
    if drops:
        out.update(drop_top1=statistics.fmean(drops), drop_random=statistics.fmean(drop_random),
                   drop_answers=len(drops))
    if keeps:
        out.update(keep_top1=statistics.fmean(keeps), keep_random=statistics.fmean(keep_random),
                   keep_answers=len(keeps))
    return out
