"""Where one attribution's time goes: prompt shapes met for the first time against warm repeats, before and after the
reference procedure has run in the same process, with torch.profiler's tables of the busiest operators.

    python benchmarks/profile_attribution.py --device cuda --out benchmarks/results/gpu/profile_gpu.json

It generates the first ELI5 answer of ALCE's sample (eli5-alce; untimed warm-up), then attributes cuts of it at
lengths not met before ("cold": a new prompt shape) and the same cut again ("warm"), prints mirage's own timings of each
(prepare, CTI, CCI, total), profiles one cold and one warm call (tables printed, top operators kept in the JSON), runs
the reference once, and times new cold and warm cuts after it. On a GPU a small model is bound by launches, so these
figures show what the benchmark's rows (each a shape met once) hold besides arithmetic.
"""

from __future__ import annotations

import dataclasses
import json
import time

import torch
from harness import device_arg, device_name, main, model_arg, recorded_command

from benchmarks.bench_attribution import attribution_cases
from mirage import Mirage
from mirage.options import cli_arg
from mirage.peers.inseq import run_reference
from mirage.runs.store import write_atomic


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _top(prof, n: int) -> list[dict]:
    """The ``n`` operators with the most self CPU time (and their device time, where there is one)."""
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:n]
    return [{"op": e.key, "calls": e.count, "self_cpu_ms": round(e.self_cpu_time_total / 1000, 2),
             "device_ms": round(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) / 1000, 2)}
            for e in rows]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    model: str = model_arg()
    device: str | None = device_arg()
    top: int = cli_arg(15, flag="--top", metavar="N", help="operators kept per profile")
    out: str = cli_arg("benchmarks/results/profile_attribution.json", flag="--out", help="the JSON file to write")


def run(args: Options) -> None:
    m = Mirage.from_pretrained(args.model, device=args.device)
    device = m.lm.device
    eli5 = attribution_cases(1)[0]
    first = m.attribute_item({**eli5, "output": None})  # warm-up: generation and attribution
    ids = m.lm.tokenizer(first.answer, add_special_tokens=False)["input_ids"]
    cuts = [n for n in (12, 20, 28, 36, 44, 52) if n < len(ids)] or [max(1, len(ids) - 1)]
    rows: list[dict] = []

    def timed(n: int, label: str) -> dict:
        case = {**eli5, "output": m.lm.tokenizer.decode(ids[:n])}
        _sync(device)
        t = time.perf_counter()
        res = m.attribute_item(case)
        _sync(device)
        row = {"label": label, "answer_tokens": n, "wall_s": round(time.perf_counter() - t, 4),
               **{k: round(v, 4) for k, v in res.timings.items()}}
        print(row, flush=True)
        rows.append(row)
        return row

    half = max(1, len(cuts) // 2)
    for n in cuts[:half]:
        timed(n, "cold")
        timed(n, "warm")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiles = {}
    probe = cuts[half - 1] + 2 if cuts[half - 1] + 2 < len(ids) else cuts[half - 1]
    for label in ("cold", "warm"):
        with torch.profiler.profile(activities=activities) as prof:
            timed(probe, f"profiled {label}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top), flush=True)
        profiles[label] = _top(prof, args.top)
    res = m.attribute_item({**eli5, "output": m.lm.tokenizer.decode(ids[:cuts[0]])})
    t = time.perf_counter()
    run_reference(m.lm.model, m.lm.tokenizer, prompt=res.prompt, contextless_prompt=res.contextless_prompt,
                  context=res.context, answer=res.answer, std_k=m.config.cti.std_k)
    print(f"reference: {time.perf_counter() - t:.2f} s", flush=True)
    for n in cuts[half:]:
        timed(n, "cold, after the reference")
        timed(n, "warm, after the reference")
    out = {"model": args.model, "device": str(device), "device_name": device_name(device),
           "command": recorded_command(), "rows": rows, "profiles": profiles}
    write_atomic(args.out, json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main(Options, run)
