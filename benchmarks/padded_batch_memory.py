"""What a left-padded batch of prompts keeps for its backward passes, against the estimates a plan is made from.

    python benchmarks/padded_batch_memory.py [--models smollm2-135m-instruct gemma3-270m] [--prompts 256 640 1024]
        [--out benchmarks/results/padded_batch_memory.json]

Short prompts scored together run as one left-padded differentiable pass (``batched_attribution_graph``). For each
model, attention kernel (sdpa, eager) and prompt length, this script runs that pass over two rows (the prompt, and
the same prompt 100 tokens shorter, left-padded to it) and counts the distinct tensors autograd saves for the
backward pass (weights and buffers excluded), beside one unpadded row's. The estimates: ``graph_bytes`` of two rows
from the padded probe (``activation_bytes(padded=True)``: what plans of batched passes use), and twice one unpadded
row's estimate (what they used before it). A ratio above 1 over-estimates, below 1 under-estimates (the budget's
headroom has to absorb it). Memory in MB (2^20 bytes). Nothing is asserted.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from harness import main, threads_arg

from mirage.options import cli_arg

MB = 2**20
SHORTER = 100  # how many tokens shorter the second row is


def saved_bytes(lm: Any, pairs: list[tuple[list[int], list[int]]]) -> int:
    """Bytes of the distinct tensors the batched differentiable pass over ``pairs`` saves for its backward pass."""
    from mirage.attribution import graphs, planner

    with planner.counting_saved_tensors(lm) as total:
        graph = graphs.batched_attribution_graph(lm, pairs)
    del graph
    return sum(total.values())


def measure(model: str, kernel: str, prompts: list[int]) -> list[dict[str, Any]]:
    """Every prompt length of one model and kernel."""
    import torch

    from mirage.attribution import planner
    from mirage.attribution.models import load_model

    lm = load_model(model, dtype="float32")
    lm.model.set_attn_implementation(kernel)
    rows = []
    for n in prompts:
        ids = [(7 + 13 * i) % lm.sizes.vocab for i in range(n)]
        answer = ids[:4]
        one = saved_bytes(lm, [(ids, answer)])
        two = saved_bytes(lm, [(ids, answer), (ids[:n - SHORTER], answer)])
        width = n + len(answer)
        padded_estimate = planner.graph_bytes(lm, width, checkpoint=False, rows=2)
        unpadded_estimate = 2 * planner.graph_bytes(lm, width, checkpoint=False)
        rows.append({"model": model, "kernel": kernel, "prompt": n, "one_row_mb": round(one / MB, 1),
                     "padded_two_rows_mb": round(two / MB, 1), "padded_over_twice_one": round(two / (2 * one), 3),
                     "padded_estimate_over_measured": round(padded_estimate / two, 3),
                     "unpadded_estimate_over_measured": round(unpadded_estimate / two, 3),
                     "torch": torch.__version__})
        print(json.dumps(rows[-1]), flush=True)
    return rows


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    models: tuple[str, ...] = cli_arg(("smollm2-135m-instruct", "gemma3-270m"), flag="--models",
                                      help="the models measured")
    prompts: tuple[int, ...] = cli_arg((256, 640, 1024), flag="--prompts", help="prompt lengths in tokens")
    threads: int = threads_arg(2)
    out: str = cli_arg("benchmarks/results/padded_batch_memory.json", flag="--out", help="the JSON file to write")


def run(args: Options) -> None:
    import torch

    torch.set_num_threads(args.threads)
    command = "python benchmarks/padded_batch_memory.py " + " ".join(sys.argv[1:])
    started, rows = time.time(), []
    for model in args.models:
        for kernel in ("sdpa", "eager"):
            rows.extend(measure(model, kernel, args.prompts))
    out = {"command": command.strip(), "device": "cpu", "shorter_row_by": SHORTER,
           "seconds": round(time.time() - started, 1), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main(Options, run)
