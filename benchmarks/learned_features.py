"""Which feature families the learned passage classifier should use, chosen on the calibration splits only.

    python benchmarks/learned_features.py SCORES --calibrate-on train.jsonl val.jsonl [--text native] [-o OUT.json]
        [--fill FILL.jsonl --model gemma3-270m]

``SCORES`` is a ``mirage score xor-attriqa`` store (``scores.jsonl``, or the shipped ``scores.jsonl.gz``) holding
the calibration items' passage signals. For each candidate set of feature families (:mod:`mirage.likelihood.features`)
the classifier is fitted exactly as ``--settings learned`` fits it (:func:`mirage.likelihood.classifier.fit_learned`:
standardised features, class-balanced logistic regression, C chosen by item-grouped 5-fold cross-validation) and scored
by its out-of-fold predictions: ROC-AUC at the chosen C, and F1, agreement and balanced accuracy at the out-of-fold
F1-maximising threshold. Each set is compared with the default set fitted on the same passages: those of the items
(with two passages or more) that carry every feature of the set. The CCI family needs the MIRAGE-EX tokens' CCI
rows, which a ``--settings learned`` run does not compute; a run with MIRAGE-EX/CAL on the calibration files has
them. No test row is read: this is the selection the issue allows (train/val only).

``--fill FILL.jsonl --model NAME`` first computes, for the calibration items that lack them, the leave-one-passage-out
signals and the MIRAGE-EX tokens' CCI rows, into ``FILL.jsonl`` (resumable; ``SCORES`` is never written), with the
pipeline ``SCORES`` was computed with (the ``run.json`` beside it: its prompt), and compares the sets with those
items' scores taken from it.

Also compares the classifier itself on the default features: the logistic regression against random forests
(200 trees, class-balanced, leaves of at least 5 or 20 passages), by ROC-AUC over 5 item-grouped 5-fold splits
(mean ± std) and fitted on ``train`` alone, scored on ``val`` (the shift from a small training split to another one
that the test files also see). Needs the calibration files named ``train*`` and ``val*``.

Prints one line per set and classifier and each single feature's ROC-AUC (which family carries the signal); ``-o``
writes the same as JSON.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from harness import Text, UsageError, main, model_arg, text_arg

from mirage.config import CTIConfig, MirageConfig
from mirage.likelihood.classifier import fit_learned
from mirage.likelihood.features import CCI_FEATURES, FEATURES, LOO_FEATURES, matrix
from mirage.options import cli_arg
from mirage.runs.store import read_records, write_atomic
from mirage.scoring import metrics as M
from mirage.scoring.benchmarks import stored_xor_pipeline
from mirage.scoring.xor_attriqa import scores_from_records
from mirage.scoring.xor_classifier import passage_features
from mirage.scoring.xor_data import XorItem, concat_data, load_xor_attriqa

ONLY = FEATURES  # the shipped default: the single-document family and the item's context
#: Candidate sets, by name: the default, and the default with each other family and with both.
LOO = tuple(n for n in LOO_FEATURES if n.startswith("loo_"))
CANDIDATES: dict[str, tuple[str, ...]] = {
    "default (only_* + context)": ONLY,
    "default + loo_*": (*ONLY, *LOO),
    "default + attention": (*ONLY, "attention"),
    "default + CCI (ex_*, content_*)": (*ONLY, *CCI_FEATURES),
    "default + loo + CCI": (*ONLY, *LOO, *CCI_FEATURES),
    "loo + CCI + context (no only_*)": (*LOO, *CCI_FEATURES, "cti_max", "inv_docs", "length_frac"),
}


def oof_metrics(model_cv: dict, X: np.ndarray, y: np.ndarray, groups: Sequence[str], names: Sequence[str]
                ) -> dict[str, float]:
    """Out-of-fold F1 / agreement / balanced accuracy of the fitted set at its out-of-fold F1 threshold (refit per
    fold at the chosen C, as :func:`fit_learned` does)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    from mirage.likelihood.classifier import best_threshold

    c = max(model_cv["roc_auc_by_C"].items(), key=lambda kv: (kv[1], -float(kv[0])))[0]
    z = (X - X.mean(axis=0)) / np.where(X.std(axis=0) == 0, 1.0, X.std(axis=0))
    gid = np.unique(np.asarray(groups), return_inverse=True)[1]
    oof = np.zeros(len(y))
    for tr, te in GroupKFold(n_splits=model_cv["folds"]).split(z, y, gid):
        clf = LogisticRegression(C=float(c), class_weight="balanced", max_iter=5000, random_state=0)
        oof[te] = clf.fit(z[tr], y[tr]).predict_proba(z[te])[:, 1]
    t, _ = best_threshold(oof, y, "f1")
    counts = M.BinaryCounts.of(list(oof >= t), list(y))
    return {"C": float(c), "f1": M.f1(counts), "agreement": M.agreement(counts),
            "balanced_accuracy": M.balanced_accuracy(counts)}


def fit_feature_set(usable, names: Sequence[str]) -> dict:
    """The classifier fitted as ``--settings learned`` fits it on the features ``names`` of ``usable`` ((item, passage
    features) pairs), scored by its out-of-fold predictions: ROC-AUC at the chosen C, the metrics at the out-of-fold
    F1 threshold, and the coefficients."""
    y = np.asarray([lab for item, _f in usable for lab in item.labels], dtype=bool)
    groups = [item.key for item, feats in usable for _ in feats]
    X = np.asarray([r for _item, feats in usable for r in matrix(feats, names)], dtype=np.float64)
    model = fit_learned(X, y, groups=groups, names=names)
    return {"oof_roc_auc": max(model.cv["roc_auc_by_C"].values()), **oof_metrics(model.cv, X, y, groups, names),
            "coefficients": model.coefficients()}


def compare(items: Sequence[XorItem], records: list[dict], *, candidates: dict[str, tuple[str, ...]] = CANDIDATES
            ) -> dict:
    """Out-of-fold scores of each candidate set, and of the default set on the same passages (the calibration
    items that carry every feature of the candidate), with the difference."""
    from sklearn.metrics import roc_auc_score

    scores = scores_from_records(records)
    ex = CTIConfig(selector="std")
    rows = [(item, passage_features(scores[item.key], cti=ex)) for item in items if item.key in scores]
    rows = [(item, feats) for item, feats in rows if len(feats) > 1]  # one passage: nothing to rank, all features 1
    out: dict = {"n_items_scored": len(rows), "sets": {}, "single_feature_roc_auc": {}}
    for name, names in candidates.items():
        usable = [(item, feats) for item, feats in rows if all(set(names) <= set(f) for f in feats)]
        if len({lab for item, _f in usable for lab in item.labels}) < 2 or len(usable) < 10:
            out["sets"][name] = {"features": list(names), "n_items": len(usable), "missing": True}
            continue
        fitted = fit_feature_set(usable, names)
        base = fit_feature_set(usable, ONLY)
        out["sets"][name] = {"features": list(names), "n_items": len(usable),
                             "n_passages": sum(len(f) for _i, f in usable), **fitted,
                             "default_on_same": {k: v for k, v in base.items() if k != "coefficients"},
                             "delta_roc_auc": fitted["oof_roc_auc"] - base["oof_roc_auc"]}
    wanted = sorted({n for names in candidates.values() for n in names})
    for n in wanted:
        pairs = [(lab, f[n]) for item, feats in rows for lab, f in zip(item.labels, feats) if n in f]
        if len({lab for lab, _x in pairs}) == 2:
            out["single_feature_roc_auc"][n] = {"roc_auc": float(roc_auc_score(*zip(*pairs))),
                                                "n_passages": len(pairs)}
    return out


def classifiers(items: Sequence[XorItem], records: list[dict], *, seeds: int = 5) -> dict:
    """ROC-AUC of the logistic regression and of random forests on the default features: over ``seeds`` item-grouped
    5-fold splits of the calibration items, and fitted on the ``train`` items, scored on the ``val`` items."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import GroupKFold

    scores = scores_from_records(records)
    ex = CTIConfig(selector="std")
    rows = [(item, passage_features(scores[item.key], cti=ex)) for item in items if item.key in scores]
    X = np.asarray([r for _i, feats in rows for r in matrix(feats, ONLY)], dtype=np.float64)
    y = np.asarray([lab for item, _f in rows for lab in item.labels], dtype=bool)
    split = np.asarray([Path(item.file).name.split(".")[0] for item, feats in rows for _ in feats])
    gid = np.unique(np.asarray([item.key for item, feats in rows for _ in feats]), return_inverse=True)[1]
    z = (X - X.mean(axis=0)) / np.where(X.std(axis=0) == 0, 1.0, X.std(axis=0))
    makers = {"logistic C=0.01": lambda: LogisticRegression(C=0.01, class_weight="balanced", max_iter=5000)}
    for leaf in (5, 20):
        makers[f"forest leaf>={leaf}"] = lambda leaf=leaf: RandomForestClassifier(
            n_estimators=200, min_samples_leaf=leaf, class_weight="balanced", random_state=0, n_jobs=1)
    out = {}
    train, val = split == "train", split == "val"
    for name, make in makers.items():
        aucs = []
        for seed in range(seeds):
            perm = np.random.default_rng(seed).permutation(gid.max() + 1)[gid]  # another assignment of items to folds
            oof = np.zeros(len(y))
            for tr, te in GroupKFold(n_splits=5).split(z, y, perm):
                oof[te] = make().fit(z[tr], y[tr]).predict_proba(z[te])[:, 1]
            aucs.append(float(roc_auc_score(y, oof)))
        held = (float(roc_auc_score(y[val], make().fit(z[train], y[train]).predict_proba(z[val])[:, 1]))
                if train.any() and val.any() else None)
        out[name] = {"cv_roc_auc_mean": float(np.mean(aucs)), "cv_roc_auc_std": float(np.std(aucs)),
                     "train_to_val_roc_auc": held}
    return out


def fill(items: Sequence[XorItem], records: list[dict], path: Path, model: str, text: str, config: MirageConfig
         ) -> list[dict]:
    """The records of ``path`` after scoring there, with the leave-one-out signals and MIRAGE-EX's CCI rows, every
    multi-passage calibration item that ``records`` hold without them (resumable: a re-run skips what is done), under
    ``config``: the pipeline ``records`` were computed with (:func:`mirage.scoring.benchmarks.stored_xor_pipeline`)."""
    from tqdm.auto import tqdm

    from mirage import Mirage
    from mirage.runs.store import ResumableJSONL
    from mirage.scoring.xor_attriqa import row_record, score_item

    scores = scores_from_records(records)
    ex = CTIConfig(selector="std")
    need = [item for item in items if item.key in scores and scores[item.key].n_docs > 1
            and not all({"loo_drop", "ex_mass"} <= set(f) for f in passage_features(scores[item.key], cti=ex))]
    settings = {"model": model, "text": text, "fill": "loo+ex-cci", "prompt": dataclasses.asdict(config.prompt)}
    with ResumableJSONL(path, settings=settings) as store:
        todo = [item for item in need if item.key not in store.done]
        if todo:
            mirage = Mirage.from_pretrained(model, config=config)
            for item in tqdm(todo, desc="leave-one-out + EX rows"):
                sc = score_item(mirage, item, config=config, targets="selected", signals=True, leave_one_out=True)
                for t in sorted(sc.cci):
                    store.write(row_record(sc.key, t, sc.cci[t]))
                store.write(sc.to_record())  # last: the item counts as done once its rows are stored
        return store.records()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    scores: Path = cli_arg(flag="scores", type=Path,
                           help="scores.jsonl or scores.jsonl.gz of a mirage score xor-attriqa run")
    calibrate_on: tuple[Path, ...] = cli_arg(flag="--calibrate-on", type=Path, help="train/val files (never fi/ru)")
    text: Text = text_arg()
    output: Path | None = cli_arg(None, flag="--output", aliases=("-o",), type=Path, help="the JSON file to write")
    fill: Path | None = cli_arg(None, flag="--fill", type=Path,
                                help="store for the leave-one-out signals and EX rows the items lack")
    model: str | None = model_arg(None, help="the model of SCORES (with --fill)")


def run(args: Options) -> int:
    if args.fill and not args.model:
        raise UsageError("--fill needs --model, the model SCORES was computed with.")
    items = concat_data(load_xor_attriqa(p, text=args.text) for p in args.calibrate_on).items
    records = read_records(args.scores)
    if args.fill:
        config = stored_xor_pipeline(args.scores, args.model)  # the store's own prompt: the rows must match its
        records = records + fill(items, records, args.fill, args.model, args.text, config)
    result = compare(items, records)
    print(f"{result['n_items_scored']} calibration items with 2+ passages scored; out-of-fold (item-grouped 5-fold), "
          "each set beside the default set fitted on the same items:")
    print(f"{'feature set':34s} {'items':>5s} {'ROC-AUC':>8s} {'(dflt)':>7s} {'F1':>6s} {'agree':>6s} "
          f"{'bal.acc':>7s}  C")
    for name, r in result["sets"].items():
        if r.get("missing"):
            print(f"{name:34s} {r['n_items']:5d}  (too few items carry these features)")
            continue
        print(f"{name:34s} {r['n_items']:5d} {r['oof_roc_auc']:8.3f} {r['default_on_same']['oof_roc_auc']:7.3f} "
              f"{r['f1']:6.1f} {r['agreement']:6.1f} {r['balanced_accuracy']:7.1f}  {r['C']:g}")
    result["classifiers"] = classifiers(items, records)
    print("classifier on the default features: ROC-AUC over 5 grouped 5-fold splits; fitted on train, scored on val")
    for name, r in result["classifiers"].items():
        held = "–" if r["train_to_val_roc_auc"] is None else f"{r['train_to_val_roc_auc']:.3f}"
        print(f"  {name:20s} {r['cv_roc_auc_mean']:.3f} ± {r['cv_roc_auc_std']:.3f}   train→val {held}")
    print("single features, ROC-AUC on the calibration passages that carry them:")
    for n, r in sorted(result["single_feature_roc_auc"].items(), key=lambda kv: -kv[1]["roc_auc"]):
        print(f"  {n:32s} {r['roc_auc']:.3f}  ({r['n_passages']} passages)")
    if args.output:
        write_atomic(args.output, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    main(Options, run)
