"""Permutation-test runs side by side, with intervals: for each ``mirage tune follow`` report (its
``NAME.answers.jsonl`` beside it), the self-citation's follow rate, its share citing ``[1]`` where document 1 does not
support, and its F1, each with a 95 % bootstrap interval over items, and the paired change from the first report on
the items both answered. Where the first report's items have reference answers of more than one kind (yes/no and
others, its ``item_kinds``), each kind's rows follow, on that kind's items alone.

    python benchmarks/compare_follow.py benchmarks/results/tune_follow_smollm2/full2ep_spread5_val.json \
        benchmarks/results/tune_follow_smollm2/trainval_spread5_full_val.json \
        --out benchmarks/results/tune_follow_smollm2/follow_changes.json

Sixteen items make wide intervals: a change whose interval holds 0 is within what the choice of items moves. The
follow page (``mirage report``) shows the file as a table.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from pathlib import Path

from harness import main

from mirage.data.inputs import InputError
from mirage.options import cli_arg
from mirage.runs.store import read_records
from mirage.tune.follow import compare_follow, follow_report_of


def _answers(report: Path) -> list[dict]:
    path = report.with_name(report.stem + ".answers.jsonl")
    if not path.is_file():
        raise SystemExit(f"{report}: its answers file {path.name} is missing; give reports of `mirage tune follow`")
    return list(read_records(path))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    reports: tuple[Path, ...] = cli_arg(flag="reports", type=Path, help="`mirage tune follow` reports (JSON); the "
                                        "first is the one the others are compared with")
    out: Path = cli_arg(flag="--out", type=Path, help="the JSON file to write")
    bootstrap: int = cli_arg(2000, flag="--bootstrap", metavar="N", help="bootstrap resamples (seed 0)")


def run(args: Options) -> int:
    try:
        first = follow_report_of(args.reports[0])
    except InputError as err:
        raise SystemExit(str(err)) from None
    answers = {r: _answers(r) for r in args.reports}
    reference = answers[args.reports[0]]
    rows = [compare_follow(reference, answers[r], name=r.name, reference_name=args.reports[0].name,
                           draws=args.bootstrap).to_dict() for r in args.reports]
    kinds: dict[str, list[str]] = {}
    for item, kind in first.item_kinds.items():
        kinds.setdefault(kind, []).append(item)
    if len(kinds) > 1:
        rows += [compare_follow(reference, answers[r], name=r.name, reference_name=args.reports[0].name,
                                draws=args.bootstrap, items=items, answer_kind=kind).to_dict()
                 for kind, items in sorted(kinds.items()) for r in args.reports]
    out = {"command": "python benchmarks/compare_follow.py " + shlex.join(sys.argv[1:]),
           "follow_changes": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    for row in rows:
        v, c = row["values"], row["changes"]
        print(f"{row['name']} ({row['answer_kind']}): {row['n_items']} items, follows {v['follow_rate']:.3f} "
              f"(change {c['follow_rate']:+.3f})")
    return 0


if __name__ == "__main__":
    main(Options, run)
