"""Two more signals for the learned passage classifier, tried on the calibration splits only: a second model's
features, and the model's own yes/no judgment of whether a passage supports the answer.

    python benchmarks/extra_signals.py SCORES --calibrate-on train.jsonl val.jsonl [--text en]
        [--other OTHER_SCORES --other-text native] [--judge JUDGE.jsonl --model NAME] [-o OUT.json]

``SCORES`` (and ``OTHER_SCORES``) are ``mirage score xor-attriqa`` stores holding the calibration items' passage
signals (the shipped ``scores.jsonl.gz`` of each view). Each candidate set is fitted exactly as ``--settings learned``
fits its classifier (:func:`mirage.likelihood.classifier.fit_learned`) and scored, beside the default set on the same
passages, by its out-of-fold ROC-AUC (item-grouped 5-fold, as ``benchmarks/learned_features.py``) and by the ROC-AUC of
the classifier fitted on ``train`` and applied to ``val``:

- ``--other``: the default features of a second model (e.g. gemma3-270m reading the original text beside
  smollm2-135m-instruct reading the English translation), item by item;
- ``--judge FILE --model NAME``: the model is asked "Is the answer supported by the passage? Answer Yes or No." after
  the passage, question and answer (chat template where the model has one); the feature is log P(Yes) − log P(No) at
  its first answer token, and its gap to the item's best passage. Computed into ``FILE`` (resumable), one item per
  line.

No test row is read.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from harness import Text, UsageError, main, model_arg, text_arg

from benchmarks.learned_features import fit_feature_set
from mirage.config import CTIConfig
from mirage.likelihood.classifier import fit_learned
from mirage.likelihood.features import FEATURES, matrix
from mirage.options import cli_arg
from mirage.runs.store import ResumableJSONL, read_records, write_atomic
from mirage.scoring.xor_attriqa import scores_from_records
from mirage.scoring.xor_classifier import passage_features
from mirage.scoring.xor_data import XorItem, concat_data, load_xor_attriqa

JUDGE_QUESTION = "Is the answer supported by the passage? Answer Yes or No."


def _features(items: Sequence[XorItem], store: Path) -> dict[tuple[str, int], list[dict[str, float]]]:
    """The default per-passage features of each item of ``store``, by (file name, line): the same rows in both views."""
    scores = scores_from_records(read_records(store))
    ex = CTIConfig(selector="std")
    return {(Path(it.file).name, it.line): passage_features(scores[it.key], cti=ex) for it in items
            if it.key in scores}


def judge(items: Sequence[XorItem], path: Path, model: str) -> dict[str, list[float]]:
    """log P(Yes) − log P(No) per passage of each item (``path``: resumable store of what is done)."""
    import torch
    from tqdm.auto import tqdm

    from mirage.attribution.models import load_model

    with ResumableJSONL(path, settings={"model": model, "question": JUDGE_QUESTION}) as store:
        todo = [it for it in items if it.key not in store.done]
        if todo:
            lm = load_model(model)
            tok = lm.tokenizer
            first = [[tok.encode(w, add_special_tokens=False)[0] for w in (word, " " + word)] for word in ("Yes", "No")]
            for it in tqdm(todo, desc="yes/no judge"):
                values = []
                for passage in it.passages:
                    msg = f"Passage: {passage}\n\nQuestion: {it.question}\nAnswer: {it.answer}\n\n{JUDGE_QUESTION}"
                    text = (tok.apply_chat_template([{"role": "user", "content": msg}], tokenize=False,
                                                    add_generation_prompt=True) if lm.use_chat_template
                            else msg + "\nResponse:")
                    enc = tok(text, return_tensors="pt", add_special_tokens=not lm.use_chat_template)
                    with torch.no_grad():
                        logp = torch.log_softmax(lm.model(**enc).logits[0, -1].float(), -1)
                    yes, no = (torch.logsumexp(logp[ids], 0) for ids in first)
                    values.append(float(yes - no))
                store.write({"key": it.key, "judge": values})
        return {r["key"]: r["judge"] for r in store.records()}


def _train_to_val(usable: list[tuple[XorItem, list[dict[str, float]]]], names: Sequence[str]) -> float | None:
    from sklearn.metrics import roc_auc_score

    def part(split: str):
        rows = [(it, f) for it, f in usable if Path(it.file).name.startswith(split)]
        X = np.asarray([r for _it, feats in rows for r in matrix(feats, names)], dtype=np.float64)
        y = np.asarray([lab for it, _f in rows for lab in it.labels], dtype=bool)
        return rows, X, y

    train, Xt, yt = part("train")
    _val, Xv, yv = part("val")
    if not len(yt) or len(set(yv)) < 2:
        return None
    model = fit_learned(Xt, yt, groups=[it.key for it, feats in train for _ in feats], names=names)
    return float(roc_auc_score(yv, model.predict_proba(Xv)))


def compare(candidates: dict[str, tuple[list[tuple[XorItem, list[dict[str, float]]]], Sequence[str]]]) -> dict:
    """Each candidate (passages, feature names) beside the default features on the same passages."""
    out = {}
    for name, (usable, names) in candidates.items():
        fitted, base = fit_feature_set(usable, names), fit_feature_set(usable, FEATURES)
        out[name] = {"features": list(names), "n_items": len(usable), "n_passages": sum(len(f) for _i, f in usable),
                     **{k: v for k, v in fitted.items() if k != "coefficients"},
                     "train_to_val_roc_auc": _train_to_val(usable, names),
                     "default_on_same": {"oof_roc_auc": base["oof_roc_auc"], "f1": base["f1"],
                                         "train_to_val_roc_auc": _train_to_val(usable, FEATURES)}}
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    scores: Path = cli_arg(flag="scores", type=Path, help="the mirage score xor-attriqa store of the calibration items")
    calibrate_on: tuple[Path, ...] = cli_arg(flag="--calibrate-on", type=Path, help="train/val files (never fi/ru)")
    text: Text = text_arg()
    other: Path | None = cli_arg(None, flag="--other", type=Path,
                                 help="a second model's store of the same calibration items")
    other_text: Text = text_arg("native", flag="--other-text", help="the text the second model read")
    judge: Path | None = cli_arg(None, flag="--judge", type=Path,
                                 help="store of the yes/no judge values (computed where missing)")
    model: str | None = model_arg(None, help="the model of SCORES (with --judge)")
    output: Path | None = cli_arg(None, flag="--output", aliases=("-o",), type=Path, help="the JSON file to write")


def run(args: Options) -> int:
    if args.judge and not args.model:
        raise UsageError("--judge needs --model, the model of SCORES.")
    items = concat_data(load_xor_attriqa(p, text=args.text) for p in args.calibrate_on).items
    own = _features(items, args.scores)
    rows = [(it, own[(Path(it.file).name, it.line)]) for it in items if (Path(it.file).name, it.line) in own]
    rows = [(it, f) for it, f in rows if len(f) > 1]  # one passage: nothing to rank
    candidates = {}
    if args.other:
        other_items = concat_data(load_xor_attriqa(p, text=args.other_text) for p in args.calibrate_on).items
        other = _features(other_items, args.other)
        both = [(it, [{**a, **{f"other:{k}": v for k, v in b.items()}} for a, b in zip(feats, other[where])])
                for it, feats in rows if (where := (Path(it.file).name, it.line)) in other]
        candidates["default + the other model's default"] = (both, (*FEATURES, *(f"other:{n}" for n in FEATURES)))
    if args.judge:
        values = judge([it for it, _f in rows], args.judge, args.model)
        judged = [(it, [{**f, "judge": v, "judge_gap": v - max(values[it.key])} for f, v in zip(feats, values[it.key])])
                  for it, feats in rows if it.key in values]
        candidates["default + yes/no judge"] = (judged, (*FEATURES, "judge", "judge_gap"))
        from sklearn.metrics import roc_auc_score

        y = [lab for it, _f in judged for lab in it.labels]
        print(f"the judge alone: ROC-AUC {roc_auc_score(y, [f['judge'] for _i, fs in judged for f in fs]):.3f}, "
              f"its gap to the item's best {roc_auc_score(y, [f['judge_gap'] for _i, fs in judged for f in fs]):.3f}")
    if not candidates:
        raise UsageError("give --other and/or --judge.")
    result = compare(candidates)
    print(f"{'candidate':38s} {'items':>5s} {'OOF AUC':>8s} {'(dflt)':>7s} {'train→val':>9s} {'(dflt)':>7s}")
    for name, r in result.items():
        d = r["default_on_same"]
        print(f"{name:38s} {r['n_items']:5d} {r['oof_roc_auc']:8.3f} {d['oof_roc_auc']:7.3f} "
              f"{r['train_to_val_roc_auc']:9.3f} {d['train_to_val_roc_auc']:7.3f}")
    if args.output:
        write_atomic(args.output, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    main(Options, run)
