"""CCI's vmapped backward passes, narrow against wide, in one process: time and peak memory per width.

    python benchmarks/cci_batch_width.py [--model smollm2-135m-instruct] [--prompt 2000] [--widths 1 4 8]
        [--repeats 2] [--threads 2] [--out benchmarks/results/cci_batch_width.json]

One prompt (the ELI5 sample's retrieved documents in ``tests/data``, cut to about ``--prompt`` tokens) and one
40-token answer, attributed with CTI's threshold at mean + 0 std (so that several tokens are selected) and
``cci.batch_size`` set to each width in turn, alternating widths over ``--repeats`` rounds so that a slow phase of a
shared machine falls on every width alike. Reported per width: CCI seconds (wall-clock and this process's CPU
seconds, the median over rounds) and the ratio to the narrowest width. The widths give the same scores (up to float
rounding), which is checked. Memory is not compared here: without a budget the allocator keeps what earlier rounds
freed, so a resident peak of one round says little; the scaling pages record each width's peak in its own process.
Nothing is asserted.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from harness import ROOT, main, model_arg, threads_arg

from mirage import Mirage, MirageConfig
from mirage.options import cli_arg

ANSWER = ("The first bridge over the river was built in the twelfth century by the town's merchants, who needed a "
          "crossing for their carts and paid for it with a toll on every load of goods that went over it.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    model: str = model_arg()
    prompt: int = cli_arg(2000, flag="--prompt", metavar="N", help="the prompt's length in tokens (about)")
    widths: tuple[int, ...] = cli_arg((1, 4, 8), flag="--widths", help="cci.batch_size values to compare")
    repeats: int = cli_arg(2, flag="--repeats", metavar="N", help="rounds over the widths")
    threads: int = threads_arg(2)
    out: str = cli_arg("benchmarks/results/cci_batch_width.json", flag="--out", help="the JSON file to write")


def run(args: Options) -> None:
    torch.set_num_threads(args.threads)
    base = Mirage.from_pretrained(args.model)
    tok = base.lm.tokenizer
    rows = json.loads((ROOT / "tests" / "data" / "eli5_alce" / "eli5_eval_sample.json").read_text())
    docs, used = [], 0
    for doc in (d for row in rows for d in row["docs"]):
        n = len(tok(doc["text"], add_special_tokens=False)["input_ids"]) + 6
        if used + n > args.prompt:
            break
        docs.append({"title": doc["title"], "text": doc["text"]})
        used += n
    answer = tok.decode(tok(ANSWER, add_special_tokens=False)["input_ids"][:40])
    runs: dict[int, list[dict]] = {w: [] for w in args.widths}
    scores: dict[int, list] = {}
    prompt_tokens = selected = 0
    for _round in range(args.repeats):
        for width in args.widths:
            cfg = MirageConfig().replace(prompt={"chat_template": False}, cti={"std_k": 0.0},
                                         cci={"batch_size": width})
            m = Mirage(base.lm, config=cfg)
            prep = m.prepare({"question": "When was the first bridge over the river built, and why?", "docs": docs})
            t, c = time.perf_counter(), time.process_time()
            res = m.score_tokens(prep, answer)
            runs[width].append({"total_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                                "cci_s": res.timings["cci"]})
            scores[width] = res.cci.scores
            prompt_tokens, selected = len(prep.tokens.ids), len(res.cti.selected)
            print(f"width {width}: CCI {res.timings['cci']:.1f} s, {base.lm.passes.get('cci_backward')}", flush=True)
    narrow = min(args.widths)
    med = {w: statistics.median(r["cci_s"] for r in runs[w]) for w in args.widths}
    out = {"command": "python benchmarks/cci_batch_width.py " + " ".join(sys.argv[1:]), "model": args.model,
           "device": str(base.lm.device), "threads": args.threads, "prompt_tokens": prompt_tokens,
           "answer_tokens": len(tok(answer, add_special_tokens=False)["input_ids"]), "selected": selected,
           "repeats": args.repeats, "widths": {
               str(w): {"cci_s": med[w], "cci_over_narrowest": med[w] / med[narrow],
                        "cpu_s": statistics.median(r["cpu_s"] for r in runs[w]),
                        "same_scores_as_narrowest": all(
                            torch.allclose(torch.tensor(a), torch.tensor(b), rtol=1e-4, atol=1e-7)
                            for a, b in zip(scores[w], scores[narrow]))}
               for w in args.widths}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["widths"], indent=2))


if __name__ == "__main__":
    main(Options, run)
