"""How many short answers each CTI spread attributes: the sample std (mirage's default, inseq's ``tensor.std()``) and
the population std (the authors' ``np.std``), per answer length, on stored XOR-AttriQA scores and bias-study answers.

    python benchmarks/short_answers.py --xor benchmarks/results/xor_attriqa_smollm2_en \
        benchmarks/results/xor_attriqa_val_default --bias benchmarks/results/bias_smollm2_hai \
        --out benchmarks/results/fidelity/short_answers.json

XOR-AttriQA run folders hold every answer's per-token CTI scores (``scores.jsonl`` or its ``.gz``): both spreads are
applied to them with mirage's own selector (MIRAGE-EX, k = 1), so the counts are of answers with at least one
context-sensitive token. Bias-study folders keep each answer's token count and mirage's citations, not its CTI
scores: a two-token answer can never pass mean + sample std (each score lies exactly one population std from the
mean, less than one sample std), and under the population std its larger token sits on the threshold, kept up to
rounding; the counts of one- and two-token answers are read from ``generations.jsonl.gz``, with a check that no
two-token answer has a mirage citation (the run used the sample std).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from harness import main

from mirage.attribution.cti import select_tokens
from mirage.config import CTIConfig
from mirage.options import cli_arg
from mirage.runs.store import read_records

BUCKETS = ("1", "2", "3", "4-5", "6+")


def _bucket(n: int) -> str:
    return "1" if n == 1 else "2" if n == 2 else "3" if n == 3 else "4-5" if n <= 5 else "6+"


def xor_counts(folder: Path) -> list[dict[str, Any]]:
    """Per answer length: answers, and answers with a context-sensitive token under each spread."""
    store = next((p for p in (folder / "scores.jsonl", folder / "scores.jsonl.gz") if p.is_file()), None)
    if store is None:
        raise SystemExit(f"{folder}: no scores.jsonl(.gz); give a mirage score xor-attriqa run folder.")
    rules = {kind: CTIConfig(std_kind=kind) for kind in ("sample", "population")}
    counts: dict[str, Counter] = {b: Counter() for b in BUCKETS}
    for rec in read_records(store):
        if "cti" not in rec or not rec["cti"]:
            continue
        c = counts[_bucket(len(rec["cti"]))]
        c["answers"] += 1
        for kind, cfg in rules.items():
            c[f"attributed_{kind}_std"] += bool(select_tokens(rec["cti"], cfg)[0])
    return [{"answer_tokens": b, **counts[b]} for b in BUCKETS if counts[b]["answers"]]


def bias_counts(folder: Path) -> dict[str, Any]:
    """One- and two-token answers of a bias-study run, and how many of the two-token ones mirage cited."""
    rows = read_records(folder / "generations.jsonl.gz")
    sizes = Counter(r.get("n_answer_tokens") for r in rows if r.get("error") is None)
    two = [r for r in rows if r.get("n_answer_tokens") == 2 and r.get("error") is None]
    return {"answers": sum(sizes.values()), "one_token": sizes.get(1, 0), "two_token": len(two),
            "two_token_with_a_mirage_citation": sum(1 for r in two if any(r.get("mirage_citations") or [])),
            "longer": sum(v for k, v in sizes.items() if isinstance(k, int) and k > 2)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    xor: tuple[str, ...] = cli_arg((), flag="--xor", nargs="*", help="mirage score xor-attriqa run folders")
    bias: tuple[str, ...] = cli_arg((), flag="--bias", nargs="*", help="mirage bias run folders")
    out: str = cli_arg(flag="--out", help="the JSON file to write")


def run(args: Options) -> int:
    out: dict[str, Any] = {
        "command": "python benchmarks/short_answers.py " + shlex.join(sys.argv[1:])}
    for folder in map(Path, args.xor):
        out[f"xor:{folder.name}"] = xor_counts(folder)
    for folder in map(Path, args.bias):
        out[f"bias:{folder.name}"] = bias_counts(folder)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    main(Options, run)
