"""The CPU allocator without a memory budget: glibc left alone (``MIRAGE_CPU_ALLOCATOR=keep``) against freed blocks
returned to the system (``return``; mirage's default, ``auto``, returns them for passes that need more than
``CPU_ALLOCATOR_SHARE`` of the free memory).

    python benchmarks/cpu_allocator.py [--prompts 1024 4096 7680] [--answer 40] [--repeats 1] [--threads 2]
        [--docs xor-attriqa-full:val] [--out benchmarks/results/cpu_allocator.json]

Each point is one ``benchmarks/bench_scale.py`` point (the embedded model, a prompt of about N tokens of real
passages, a forced answer, generation then attribution) in a fresh process, so that each resident peak is its own;
the two modes alternate over ``--repeats`` rounds, so that a slow phase of a shared machine falls on both alike.
Reported per prompt: attribution seconds (wall-clock and CPU, the median over rounds), the resident peak of the
attribution, and each as ``return`` over ``keep``; both modes attribute the same tokens (checked on the three strongest
context tokens of each selected token). Nothing is asserted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import sys
from pathlib import Path

from harness import main, threads_arg

from benchmarks import bench_scale  # the point runner
from mirage.data import resolve
from mirage.options import cli_arg

MODES = ("keep", "return")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    prompts: tuple[int, ...] = cli_arg((1024, 4096, 7680), flag="--prompts", help="prompt lengths in tokens")
    answer: int = cli_arg(40, flag="--answer", metavar="N", help="the answer's length in tokens")
    repeats: int = cli_arg(1, flag="--repeats", metavar="N", help="rounds over the points")
    threads: int = threads_arg(2)
    timeout: float = cli_arg(3600, flag="--timeout", help="wall-clock seconds per point")
    docs: tuple[str, ...] = cli_arg(("xor-attriqa-full:val",), flag="--docs",
                                    help="passages: XOR-AttriQA JSONL or ALCE JSON files, or dataset names")
    out: str = cli_arg("benchmarks/results/cpu_allocator.json", flag="--out", help="the JSON file to write")


def run(args: Options) -> None:
    docs = [str(resolve(d)) for d in args.docs]  # dataset names (xor-attriqa-full:val) or paths
    runs: dict[tuple[int, str], list[dict]] = {}
    for _round in range(args.repeats):
        for prompt in args.prompts:
            for mode in MODES:
                point = {"model": bench_scale.EMBEDDED, "prompt": prompt, "answer": args.answer, "budget": None,
                         "device": "cpu", "dtype": "float32", "threads": args.threads, "docs": docs,
                         "cpu_limit": None}
                os.environ["MIRAGE_CPU_ALLOCATOR"] = mode  # the child process inherits it
                rec = bench_scale.point_in_child(point, args.timeout)
                runs.setdefault((prompt, mode), []).append(rec)
                print(f"{prompt} tokens, {mode}: {rec.get('status')}, {rec.get('attribution_s', 0):.1f} s, peak "
                      f"{rec.get('peak_bytes', 0) / 2**30:.2f} GiB, {rec.get('passes', {}).get('allocator', '-')}",
                      flush=True)
    rows = []
    for prompt in args.prompts:
        row: dict = {"prompt": prompt}
        firsts = {}
        for mode in MODES:
            ok = [r for r in runs[(prompt, mode)] if r.get("status") == "ok"]
            if not ok:
                row[f"{mode}_status"] = runs[(prompt, mode)][-1].get("status")
                continue
            firsts[mode] = ok[0]
            row["prompt_tokens"] = ok[0]["prompt_tokens"]
            row[f"{mode}_s"] = statistics.median(r["attribution_s"] for r in ok)
            row[f"{mode}_cpu_s"] = statistics.median(r["attribution_cpu_s"] for r in ok)
            row[f"{mode}_peak_gib"] = max(r["peak_bytes"] for r in ok) / 2**30
        if len(firsts) == len(MODES):
            for what in ("s", "cpu_s", "peak_gib"):
                row[f"{what}_return_over_keep"] = row[f"return_{what}"] / row[f"keep_{what}"]
            row["same_attribution"] = firsts["return"]["cci_top3"] == firsts["keep"]["cci_top3"]
            row["return_allocator"] = firsts["return"]["passes"].get("allocator")
        rows.append(row)
    out = {"command": "python benchmarks/cpu_allocator.py " + " ".join(sys.argv[1:]),
           "model": bench_scale.EMBEDDED, "device": "cpu", "threads": args.threads, "repeats": args.repeats,
           "machine": platform.machine(), "answer_tokens": args.answer, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main(Options, run)
