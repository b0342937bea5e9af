"""How close mirage's memory estimates come to what a differentiable pass really holds, on a CPU.

    python benchmarks/memory_estimates.py [--models smollm2-135m-instruct gemma3-270m] [--prompts 1024 2048]
        [--threads 2] [--out benchmarks/results/memory_estimates.json]

A memory budget is kept by planning each pass from estimates (``mirage.attribution.forward``: ``graph_bytes`` for
the pass, ``backward_row_bytes`` for each target of a vmapped backward pass). This script measures, for each model,
prompt length and checkpointing (off / on), in a fresh process with the allocator returning freed memory (as under a
budget): the resident memory the pass keeps (``kept_mb``), the peak of the forward pass and of a backward pass with
one target (``need_mb``: what the planner must leave room for), and what each further target adds (``per_target_mb``:
a backward pass of two targets against one). Beside them: today's estimates (measured per model by
``activation_bytes``: the tensors autograd saves on three short passes) and the previous ones (from the model's sizes
alone, ``guessed_activations``; a backward target was counted as twice a block's activations in float32). A ratio
above 1 over-estimates (the budget is kept, with room wasted); below 1 under-estimates (the headroom has to absorb
it). Memory in MB (2^20 bytes). Nothing is asserted.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

from harness import main, threads_arg

from mirage.options import cli_arg

MB = 2**20


def _peak_reset() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the resident peak (Linux)


def _peak() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(point: dict[str, Any]) -> dict[str, Any]:
    """One (model, prompt length, checkpointing) point; runs in a child process."""
    import torch

    from mirage.attribution import forward as F
    from mirage.attribution import planner
    from mirage.attribution.models import load_model

    torch.set_num_threads(point["threads"])
    lm = load_model(point["model"], dtype="float32")
    seq, checkpoint = point["prompt"], point["checkpoint"]
    ids = torch.tensor([[(7 + 13 * i) % lm.sizes.vocab for i in range(seq)]])
    estimate_first = planner.activation_bytes(lm)  # the probe runs before anything is measured
    with F.frozen_parameters(lm.model):
        with torch.no_grad():
            embeds = lm.model.get_input_embeddings()(ids)
            lm.model(input_ids=ids[:, :64], use_cache=False)  # weights paged in before the base reading
        planner.return_freed_memory(lm.device)
        base = planner.memory_in_use(lm.device)
        _peak_reset()
        leaf = embeds.clone().requires_grad_(True)
        with planner.checkpointed_layers(lm.model, checkpoint):
            logits = lm.model(inputs_embeds=leaf, use_cache=False, logits_to_keep=2).logits
        forward_peak = _peak() - base
        planner.return_freed_memory(lm.device)
        kept = planner.memory_in_use(lm.device) - base
        values = logits[0, -1, :2]
        over: list[int] = []
        for k in (1, 2):
            planner.return_freed_memory(lm.device)
            level = planner.memory_in_use(lm.device)
            _peak_reset()
            (grad,) = torch.autograd.grad(values, leaf, grad_outputs=torch.eye(2)[:k], is_grads_batched=True,
                                          retain_graph=True)
            over.append(_peak() - level)
            del grad
    act, old = estimate_first, planner.guessed_activations(lm)
    per_block = planner.layer_token_bytes(lm, seq)
    kept_new = planner.graph_bytes(lm, seq, checkpoint=checkpoint) - (seq * per_block if checkpoint else 0)
    need_new = planner.graph_bytes(lm, seq, checkpoint=checkpoint) + planner.backward_row_bytes(lm, seq)
    width = planner.element_bytes(lm)
    old_block = old.block + old.block_square * seq
    kept_old = seq * (old.blocks * old.block_input if checkpoint else old.blocks * old_block)
    target_old = seq * 2 * old_block * 4 // width
    need_old = kept_old + (seq * old_block if checkpoint else 0) + target_old
    measured_need = max(forward_peak, kept + over[0])
    row = {"model": point["model"], "prompt_tokens": seq, "checkpointing": "on" if checkpoint else "off",
           "kept_mb": kept / MB, "kept_estimate_mb": kept_new / MB, "kept_previous_mb": kept_old / MB,
           "need_mb": measured_need / MB, "need_estimate_mb": need_new / MB, "need_previous_mb": need_old / MB,
           "per_target_mb": (over[1] - over[0]) / MB,
           "per_target_estimate_mb": planner.backward_row_bytes(lm, seq) / MB,
           "per_target_previous_mb": target_old / MB}
    row["need_estimate_over_measured"] = need_new / max(1, measured_need)
    row["need_previous_over_measured"] = need_old / max(1, measured_need)
    row["per_target_estimate_over_measured"] = planner.backward_row_bytes(lm, seq) / max(1, over[1] - over[0])
    row["per_target_previous_over_measured"] = target_old / max(1, over[1] - over[0])
    row["probe"] = (f"{act.source}: {act.block / 1024:.1f} KiB per token per block"
                    f"{f' + {act.block_square:.1f} B x seq' if act.block_square else ''}, "
                    f"{act.outside / 1024:.1f} KiB outside, {act.blocks} blocks")
    return row


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    models: tuple[str, ...] = cli_arg(("smollm2-135m-instruct", "gemma3-270m"), flag="--models",
                                      help="the models measured")
    prompts: tuple[int, ...] = cli_arg((1024, 2048), flag="--prompts", help="prompt lengths in tokens")
    threads: int = threads_arg(2)
    out: str = cli_arg("benchmarks/results/memory_estimates.json", flag="--out", help="the JSON file to write")


def run(args: Options) -> None:
    command = "python benchmarks/memory_estimates.py " + " ".join(sys.argv[1:])
    rows: list[dict[str, Any]] = []
    started = time.time()
    ctx = multiprocessing.get_context("spawn")
    for model in args.models:
        for prompt in args.prompts:
            for checkpoint in (False, True):
                point = {"model": model, "prompt": prompt, "checkpoint": checkpoint, "threads": args.threads}
                with ctx.Pool(1) as pool:  # a fresh process per point: a clean resident-memory reading
                    row = pool.apply(measure, (point,))
                rows.append(row)
                print(f"{model} {prompt} checkpointing {row['checkpointing']}: need {row['need_mb']:.0f} MB, "
                      f"estimate x{row['need_estimate_over_measured']:.2f} (previous "
                      f"x{row['need_previous_over_measured']:.2f}); per target {row['per_target_mb']:.0f} MB, "
                      f"estimate x{row['per_target_estimate_over_measured']:.2f} (previous "
                      f"x{row['per_target_previous_over_measured']:.2f})", flush=True)
                out = {"command": command, "device": "cpu", "threads": args.threads,
                       "seconds": round(time.time() - started, 1), "rows": rows}
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main(Options, run)
