"""What each document attribution method costs per answer, on short and on long answers: the passes it runs, its
seconds (wall and CPU) and, on a GPU, its peak memory, for every method ``mirage score xor-attriqa --methods``
takes, on the same prepared answers.

    python benchmarks/methods_cost.py --limit 2 --threads 2 -o benchmarks/results/methods_cost.json

Short answers: the first ``--limit`` rows of ``--short`` (XOR-AttriQA, a few tokens each, prepared as ``mirage score
xor-attriqa`` prepares them). Long answers: the first ``--limit`` items of ``--long`` (ALCE's ELI5 questions with
their five web passages) with, as the answer, the item's human reference answer cut after the sentence that brings it
to at least ``--min-tokens`` tokens (sentences past ``--max-tokens`` are left out; an item whose first sentences
cannot land in that range is skipped and counted), prepared with mirage's default prompt. Each method runs once per
answer, one after another in this process, after one untimed run of every method on the first short answer (first
calls pay for kernels and caches). Nothing else should run on the machine meanwhile: the seconds are wall-clock and
process CPU time.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

from harness import limit_arg, main, measured_commit, model_arg, recorded_command, threads_arg

from mirage import Mirage, MirageConfig
from mirage.attribution.methods import document_inputs
from mirage.attribution.sentences import split_sentences
from mirage.data import resolve, resolve_files
from mirage.options import cli_arg
from mirage.runs.store import write_atomic
from mirage.scoring.xor_attriqa import xor_attriqa_pipeline
from mirage.scoring.xor_data import load_xor_attriqa
from mirage.scoring.xor_methods import resolve_methods, xor_document_inputs

#: The cost fields each method reports (:class:`mirage.attribution.methods.PassCost`), averaged per answer.
COST_FIELDS = ("forward_passes", "backward_passes", "jvp_passes", "tokens", "seconds")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    model: str = model_arg()
    methods: tuple[str, ...] = cli_arg(("all",), flag="--methods", nargs="+", metavar="NAME",
                                       help="registered document methods, or all (default)")
    short: str = cli_arg("xor-attriqa-match:val", flag="--short", help="the short answers: XOR-AttriQA rows")
    long: str = cli_arg("eli5-alce", flag="--long", help="the long answers: ELI5 items in ALCE's format")
    min_tokens: int = cli_arg(64, flag="--min-tokens", help="a long answer's fewest tokens")
    max_tokens: int = cli_arg(128, flag="--max-tokens", help="a long answer's most tokens")
    limit: int = limit_arg(2, help="answers of each length")
    threads: int | None = threads_arg()
    out: str = cli_arg(flag="--output", aliases=("-o",), help="the JSON file to write")


def long_answer(mirage: Mirage, text: str, lo: int, hi: int) -> str | None:
    """``text`` cut after the first sentence that brings it to ``lo`` tokens, if it has at most ``hi`` then."""
    for _start, end in split_sentences(text):
        cut = text[:end].strip()
        n = len(mirage.lm.tokenizer(cut, add_special_tokens=False)["input_ids"])
        if n >= lo:
            return cut if n <= hi else None
    return None


def _answers(mirage: Mirage, opts: Options) -> tuple[list[tuple[str, str, Any]], int]:
    """``(length, item name, DocumentInputs)`` of the short and the long answers, and the long items skipped."""
    xor_cfg = xor_attriqa_pipeline()
    out: list[tuple[str, str, Any]] = []
    for item in load_xor_attriqa(resolve_files([opts.short])[0], text="en", limit=opts.limit).items:
        out.append(("short", item.key, xor_document_inputs(mirage, item, config=xor_cfg)))
    items = json.loads(Path(resolve(opts.long)).read_text(encoding="utf-8"))
    skipped, taken, cfg = 0, 0, MirageConfig()
    for k, item in enumerate(items):
        if taken == opts.limit:
            break
        answer = long_answer(mirage, item["answer"], opts.min_tokens, opts.max_tokens)
        if answer is None:
            skipped += 1
            continue
        raw = {"question": item["question"], "docs": [{"title": d["title"], "text": d["text"]} for d in item["docs"]],
               "output": answer}
        prep = mirage.prepare(raw, config=cfg)
        out.append(("long", f"{opts.long}#{k}", document_inputs(mirage, prep, answer, config=cfg)))
        taken += 1
    return out, skipped


def run(opts: Options) -> int:
    import torch

    if opts.threads:
        torch.set_num_threads(opts.threads)
    mirage = Mirage.from_pretrained(opts.model)
    methods = resolve_methods(opts.methods)
    answers, skipped = _answers(mirage, opts)
    for method in methods:  # first calls, untimed
        method.attribute(answers[0][2])
    rows = []
    for length, name, inputs in answers:
        for method in methods:
            cpu = time.process_time()
            result = method.attribute(inputs)
            cost = result.cost.to_dict()
            rows.append({"answers": length, "item": name, "method": method.name,
                         "answer_tokens": len(inputs.answer_ids), "context_tokens": inputs.n_context,
                         "cpu_seconds": round(time.process_time() - cpu, 3),
                         **{k: cost.get(k) for k in (*COST_FIELDS, "peak_memory_bytes")}})
            print(f"{length} {name} {method.name}: {cost['seconds']:.2f} s", flush=True)
    summary: dict[str, dict[str, Any]] = {}
    for method in methods:
        for length in ("short", "long"):
            mine = [r for r in rows if r["method"] == method.name and r["answers"] == length]
            if mine:
                summary.setdefault(method.name, {})[length] = {
                    "answers": len(mine), "answer_tokens": statistics.fmean(r["answer_tokens"] for r in mine),
                    "cpu_seconds": statistics.fmean(r["cpu_seconds"] for r in mine),
                    **{k: statistics.fmean(float(r[k] or 0) for r in mine) for k in COST_FIELDS}}
    write_atomic(opts.out, json.dumps({
        "command": recorded_command(), "commit": measured_commit(), "model": opts.model,
        "threads": torch.get_num_threads(), "device": str(mirage.lm.device), "long_skipped": skipped,
        "min_tokens": opts.min_tokens, "max_tokens": opts.max_tokens, "summary": summary, "rows": rows},
        indent=1) + "\n")
    print(f"wrote {opts.out}")
    return 0


if __name__ == "__main__":
    main(Options, run)
