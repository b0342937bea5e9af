"""XOR-AttriQA runs side by side: for each run folder (its ``results.json``), MIRAGE-EX and MIRAGE-CAL at top-3 and
top-5 % with agreement, F1, balanced accuracy and ROC-AUC, and each measure's change from the first folder.

    python benchmarks/compare_xor_runs.py benchmarks/results/xor_attriqa_val_default \
        benchmarks/results/xor_attriqa_val_authors ... --out benchmarks/results/xor_attriqa_val_fields.json

A folder's label is its name after the longest prefix all names share (``default``, ``authors``, …); what a run
changed is read from its own settings (preset, CTI spread and floor, CCI target, context, calibration by), so the
table says what each row is without trusting its name.

With the folders' ``pairs.jsonl``, each change also gets a 95 % interval from a paired bootstrap over the items both
runs scored (``--bootstrap`` resamples, seed 0): F1 and balanced accuracy pooled over all pairs (not averaged over
languages as the table's figures), so an interval that holds 0 says the change is within what the items' sampling
moves.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from harness import main

from mirage.options import cli_arg
from mirage.runs.store import read_records
from mirage.scoring.metrics import item_counts, paired_bootstrap

SETTINGS = ("ex_top3", "ex_top5pct", "cal_top3", "cal_top5pct")
MEASURES = ("agreement", "f1", "balanced_accuracy", "roc_auc")


def _choices(settings: dict[str, Any]) -> dict[str, Any]:
    """The choices of #41's fields as the run recorded them."""
    cfg = settings.get("config", {})
    return {"std_kind": cfg.get("cti", {}).get("std_kind", "sample"),
            "threshold_floor": cfg.get("cti", {}).get("threshold_floor", "none"),
            "cci_target": cfg.get("cci", {}).get("target", "logprob"),
            "context": cfg.get("aggregation", {}).get("context", "all"),
            "calibrate_by": settings.get("calibrate_by", "global"),
            "prompt": cfg.get("prompt", {}).get("name")}


def rows_of(folder: Path, label: str, split: str) -> list[dict[str, Any]]:
    """One row per setting of a run folder: its measures on ``split`` (``avg`` over the languages by default)."""
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    choices = _choices(results.get("settings", {}))
    rows = []
    for setting in SETTINGS:
        row: dict[str, Any] = {"run": label, "setting": setting}
        for measure in MEASURES:
            value = results.get(measure, {}).get(setting, {})
            value = value.get(split) if isinstance(value, dict) else None
            row[measure] = None if value is None else round(value * (100 if measure == "roc_auc" else 1), 2)
        rows.append({**row, **choices})
    return rows


def _pair_counts(folder: Path) -> dict[str, dict[str, tuple[int, int, int, int]]]:
    """Per setting, per item key: its (TP, FP, FN, TN), from the folder's ``pairs.jsonl`` (empty without one)."""
    records = read_records(folder / "pairs.jsonl")
    return {setting: item_counts(records, setting) for setting in SETTINGS} if records else {}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    folders: tuple[str, ...] = cli_arg(flag="folders",
                                       help="run folders; the first is the one the others are compared with")
    split: str = cli_arg("avg", flag="--split", help="which split's figures (default avg: over the languages)")
    out: str = cli_arg(flag="--out", help="the JSON file to write")
    bootstrap: int = cli_arg(2000, flag="--bootstrap", metavar="N", help="paired bootstrap resamples (0: none)")


def run(args: Options) -> int:
    folders = [Path(f) for f in args.folders]
    prefix = os.path.commonprefix([f.name for f in folders])
    rows = []
    for folder in folders:
        rows += rows_of(folder, folder.name[len(prefix):] or folder.name, args.split)
    base = {r["setting"]: r for r in rows[:len(SETTINGS)]}
    for row in rows:
        for measure in MEASURES:
            ref = base[row["setting"]][measure]
            row[f"{measure}_change"] = None if row[measure] is None or ref is None else round(row[measure] - ref, 2)
    if args.bootstrap:
        base_counts = _pair_counts(folders[0])
        for i, folder in enumerate(folders[1:], start=1):
            counts = _pair_counts(folder)
            for row in rows[i * len(SETTINGS):(i + 1) * len(SETTINGS)]:
                change = paired_bootstrap(base_counts.get(row["setting"], {}), counts.get(row["setting"], {}),
                                          resamples=args.bootstrap)
                row.update(change or {})
    out = {"command": "python benchmarks/compare_xor_runs.py " + shlex.join(sys.argv[1:]),
           "split": args.split, "folders": [str(f) for f in folders], "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    for row in rows:
        print(f"{row['run']:>22} {row['setting']:>11}: " + "  ".join(f"{m} {row[m]}" for m in MEASURES))
    return 0


if __name__ == "__main__":
    main(Options, run)
