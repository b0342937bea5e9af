"""Does the learned classifier gain from more calibration answers? Chosen on the calibration splits only.

    python benchmarks/calibration_data.py SCORES... --match train.jsonl val.jsonl
        --extra full/train.jsonl full/val.jsonl [--text native] [--repeats 5] [-o OUT.json]

The match release annotates 139 calibration answers (56 ``train`` + 83 ``val``). The per-passage release of the same
splits, with its rows grouped by answer (``--group-passages``), has 342 items: the same 139 answers, 144 answers the
match subset left out (the RAG system did not reproduce them from the concatenated passages), with the same kind of
human labels, and 59 items that repeat a match answer's question and answer with other passages (the two splits of
that release share questions). The 144 are the extra answers; the 59 are left out, so that no held-out answer is
also trained on. This script asks whether fitting ``--settings learned`` on the match answers plus the extra ones
predicts the labels of held-out match answers better than fitting on the match answers alone, without reading a
test row:

- **cross-validated**: the match answers are split into 5 folds (item-grouped, ``--repeats`` random assignments);
  each fold is predicted by the classifier fitted (:func:`mirage.scoring.xor_classifier.fit_learned_model`, the shipped
  fitting code, its C and thresholds chosen inside the training part) on the other four folds alone, and on the
  other four plus every extra answer;
- **train → val**: fitted on the ``train`` match answers alone, or on every ``train`` answer of the per-passage
  release, and scored on the ``val`` match answers.

Scores, on the pooled held-out passages: ROC-AUC, and agreement / F1 / balanced accuracy at each fit's two operating
points (the F1 threshold of ``learned`` and the agreement threshold of ``learned_agreement``). ``SCORES`` are
``mirage score xor-attriqa`` stores (``.jsonl`` or ``.jsonl.gz``) holding, between them, the passage signals of both
sets: a ``--settings learned`` run's store on the match files, and the rows that ``--calibrate-on full/train.jsonl
full/val.jsonl --group-passages`` adds to it (shipped beside each view's store as ``calibration_extra_rows.jsonl.gz``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from harness import Text, UsageError, main, text_arg

from mirage.config import CTIConfig
from mirage.likelihood.classifier import LearnedModel
from mirage.likelihood.features import matrix
from mirage.options import cli_arg
from mirage.runs.store import read_records, write_atomic
from mirage.scoring import metrics as M
from mirage.scoring.xor_attriqa import scores_from_records
from mirage.scoring.xor_classifier import fit_learned_model, passage_features
from mirage.scoring.xor_data import XorItem, concat_data, load_xor_attriqa

EX = CTIConfig(selector="std")


def held_out(model: LearnedModel, items: Sequence[XorItem], scores: dict) -> tuple[list[float], list[bool]]:
    """The model's probabilities and the human labels of every passage of ``items``."""
    probs: list[float] = []
    labels: list[bool] = []
    for item in items:
        probs += model.predict_proba(matrix(passage_features(scores[item.key], cti=EX), model.features))
        labels += list(item.labels)
    return probs, labels


def metrics(probs: Sequence[float], labels: Sequence[bool], cuts: Sequence[float]) -> dict[str, float | None]:
    """ROC-AUC, and agreement / F1 / balanced accuracy (in %) of ``probs[i] >= cuts[i]``, as the XOR-AttriQA
    tables compute them (:mod:`mirage.scoring.metrics`)."""
    counts = M.BinaryCounts.of([p >= c for p, c in zip(probs, cuts)], labels)
    return {"agreement": M.agreement(counts), "f1": M.f1(counts), "balanced_accuracy": M.balanced_accuracy(counts),
            "roc_auc": M.roc_auc(probs, labels)}


class Pool:
    """Held-out predictions pooled over folds, with each fold's own two thresholds."""

    def __init__(self) -> None:
        self.probs: list[float] = []
        self.labels: list[bool] = []
        self.f1_cut: list[float] = []
        self.agree_cut: list[float] = []

    def add(self, model: LearnedModel, items: Sequence[XorItem], scores: dict) -> None:
        probs, labels = held_out(model, items, scores)
        self.probs += probs
        self.labels += labels
        self.f1_cut += [model.threshold] * len(probs)
        self.agree_cut += [model.cv["agreement_threshold"]] * len(probs)

    def report(self) -> dict[str, dict[str, float]]:
        return {"learned": metrics(self.probs, self.labels, self.f1_cut),
                "learned_agreement": metrics(self.probs, self.labels, self.agree_cut)}


def cross_validated(match: Sequence[XorItem], extra: Sequence[XorItem], scores: dict, *, repeats: int = 5,
                    folds: int = 5) -> dict:
    """Each repeat: the match answers in ``folds`` random item folds, each predicted by the fit on the other folds
    (alone, and with every extra answer); the mean and spread of the pooled scores over repeats."""
    runs: dict[str, list[dict]] = {"match only": [], "match + extra": []}
    for seed in range(repeats):
        order = np.random.default_rng(seed).permutation(len(match))
        pools = {name: Pool() for name in runs}
        for k in range(folds):
            test = [match[i] for i in order[k::folds]]
            train = [match[i] for i in sorted(set(order) - set(order[k::folds]))]
            pools["match only"].add(fit_learned_model(train, scores, cti=EX), test, scores)
            pools["match + extra"].add(fit_learned_model([*train, *extra], scores, cti=EX), test, scores)
        for name, pool in pools.items():
            runs[name].append(pool.report())
    out: dict = {}
    for name, reports in runs.items():
        out[name] = {op: {m: {"mean": float(np.mean([r[op][m] for r in reports])),
                              "std": float(np.std([r[op][m] for r in reports]))}
                          for m in reports[0][op]} for op in reports[0]}
    return out


def train_to_val(match: Sequence[XorItem], extra: Sequence[XorItem], scores: dict) -> dict:
    """Fitted on the ``train`` match answers alone, or on every ``train`` answer; scored on the ``val`` match
    answers."""
    def split(item: XorItem) -> str:
        return Path(item.file).name.split(".")[0]

    train = [i for i in match if split(i) == "train"]
    val = [i for i in match if split(i) == "val"]
    out = {}
    for name, fit_on in (("match only", train),
                         ("match + extra", [*train, *(i for i in extra if split(i) == "train")])):
        pool = Pool()
        model = fit_learned_model(fit_on, scores, cti=EX)
        pool.add(model, val, scores)
        out[name] = {"n_items": model.n_items, **pool.report()}
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    scores: tuple[Path, ...] = cli_arg(flag="scores", type=Path,
                                       help="scores.jsonl(.gz) stores holding both sets' passage signals")
    match: tuple[Path, ...] = cli_arg(flag="--match", type=Path, help="match-release train/val files")
    extra: tuple[Path, ...] = cli_arg(flag="--extra", type=Path,
                                      help="per-passage-release train/val files (grouped by answer; never fi/ru)")
    text: Text = text_arg()
    repeats: int = cli_arg(5, flag="--repeats", metavar="N", help="random fold assignments of the cross-validation")
    output: Path | None = cli_arg(None, flag="--output", aliases=("-o",), type=Path, help="the JSON file to write")


def run(args: Options) -> int:
    for path in [*args.match, *args.extra]:
        if not Path(path).name.startswith(("train", "val")):
            raise UsageError(f"{path}: only the calibration splits (train*, val*) may be read here.")
    scores = scores_from_records([r for path in args.scores for r in read_records(path)])
    match = concat_data(load_xor_attriqa(p, text=args.text) for p in args.match).items
    grouped = concat_data(load_xor_attriqa(p, text=args.text, group=True) for p in args.extra).items
    seen = {(i.question, i.answer) for i in match}
    extra = [i for i in grouped if (i.question, i.answer) not in seen]
    missing = [i for i in [*match, *extra] if i.key not in scores]
    if missing:
        sys.exit(f"{len(missing)} items have no scores in {', '.join(map(str, args.scores))} "
                 f"(first: {missing[0].file} line "
                 f"{missing[0].line}); run mirage score xor-attriqa --settings learned on them first.")
    result = {"n_match_items": len(match), "n_extra_items": len(extra),
              "n_match_passages": sum(len(i.labels) for i in match),
              "n_extra_passages": sum(len(i.labels) for i in extra),
              "cross_validated": cross_validated(match, extra, scores, repeats=args.repeats),
              "train_to_val": train_to_val(match, extra, scores)}
    print(f"{len(match)} match answers, {len(extra)} extra answers; held-out match passages:")
    print(f"{'':30s} {'operating point':18s} {'agree':>6s} {'F1':>6s} {'bal.acc':>7s} {'ROC-AUC':>8s}")
    for name, r in result["cross_validated"].items():
        for op, m in r.items():
            print(f"{'CV ' + name:30s} {op:18s} {m['agreement']['mean']:6.1f} {m['f1']['mean']:6.1f} "
                  f"{m['balanced_accuracy']['mean']:7.1f} {m['roc_auc']['mean']:8.3f}  (± {m['f1']['std']:.1f} F1)")
    for name, r in result["train_to_val"].items():
        for op in ("learned", "learned_agreement"):
            m = r[op]
            print(f"{'train→val ' + name:30s} {op:18s} {m['agreement']:6.1f} {m['f1']:6.1f} "
                  f"{m['balanced_accuracy']:7.1f} {m['roc_auc']:8.3f}")
    if args.output:
        write_atomic(args.output, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    main(Options, run)
