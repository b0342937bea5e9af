"""How mirage scales with the model and the prompt: generation time, attribution time (CTI, CCI), peak memory and the
largest prompt that fits, on random-initialised models built from real configurations.

    python benchmarks/bench_scale.py [--docs FILE...] [--out benchmarks/results/scale_cpu]      # CPU: embedded + 1B
    python benchmarks/bench_scale.py --gpu [--models llama-3.1-8b ...] --out benchmarks/results/scale_gpu
    python benchmarks/bench_scale.py --render benchmarks/results/scale_cpu                      # README.md again

The shapes of Llama-3.1-8B, Qwen2.5-7B, Mistral-7B-v0.3, Llama-3.1-70B (4-bit, and bfloat16 for one
141 GB card) and Llama-3.2-1B are written below
(public facts of their ``config.json``); random weights are fine for time and memory. The embedded model
(smollm2-135m-instruct) runs with its real weights. Every model reads the embedded tokenizer's ids: Mistral-7B's
vocabulary (32768) is widened to the tokenizer's 49152 ids (0.8 % more weights), the others are larger already.
Prompts are real passages (``--docs``: XOR-AttriQA JSONL rows' ``passage_en`` or ALCE JSON ``docs``; cycled when
more are needed) packed to 1k/4k/16k/32k tokens; answers are 16/64/128 tokens of a fixed English text,
force-decoded.

Each point runs in its own process (a clean peak-memory reading, and a time limit: ``--point-timeout``), and is
appended to ``OUT/points.jsonl`` as soon as it finishes, so an interrupted run resumes where it stopped (points
already there are skipped). After a point fails (time limit, out of memory or over the memory budget), the longer
prompts of that model and answer length are skipped: the largest prompt that fits is the last one that finished.
``OUT/results.json`` and ``OUT/README.md`` are written from the points (the page by
:func:`mirage.views.pages.write_page`, from the JSON alone). The script prints ratios; it asserts nothing about time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness import HIDDEN, ROOT, cached_dataset, device_name, dtype_arg, main, threads_arg

from mirage.attribution.models import parse_size
from mirage.options import cli_arg
from mirage.views.pages import write_page

#: Public shapes (config.json of each model on the Hugging Face hub). ``quantization``: how it is loaded on a GPU.
SHAPES: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                     "rope_theta": 500000.0, "max_position_embeddings": 131072, "tie_word_embeddings": False,
                     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
    "qwen2.5-7b": {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
                   "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
                   "rope_theta": 1000000.0, "max_position_embeddings": 32768, "tie_word_embeddings": False},
    "mistral-7b": {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                   "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32768,
                   "rope_theta": 1000000.0, "max_position_embeddings": 32768, "tie_word_embeddings": False,
                   "sliding_window": None},
    "llama-3.1-70b": {"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
                      "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
                      "rope_theta": 500000.0, "max_position_embeddings": 131072, "tie_word_embeddings": False,
                      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                      "quantization": "4bit"},
    "llama-3.2-1b": {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
                     "rope_theta": 500000.0, "max_position_embeddings": 131072, "tie_word_embeddings": True,
                     "head_dim": 64,
                     "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
}
#: Llama-3.1-70B unquantized: 141 GB of bfloat16 weights, which one 141 GB card (H200) holds with a few GB to spare.
SHAPES["llama-3.1-70b-bf16"] = {k: v for k, v in SHAPES["llama-3.1-70b"].items() if k != "quantization"}
#: The embedded model, real weights.
EMBEDDED = "smollm2-135m-instruct"
#: A fixed English answer, cut to each answer length (in the embedded tokenizer's tokens).
ANSWER_TEXT = ("The river was formed about ten thousand years ago, when the glaciers that covered the valley melted "
               "and their water cut a channel through the soft rock. People settled along its banks because the "
               "floods left fertile soil, and by the thirteenth century the towns on the river traded grain, wool and "
               "timber with the coast. The documents agree that the first bridge was built in 1913, after an older "
               "ferry sank in a storm, and that the bridge still carries most of the traffic between the two halves "
               "of the city today, although a second crossing was opened further downstream in the nineteen "
               "seventies to relieve it during the summer months when visitors arrive in large numbers.")

CPU_PLAN = {"models": [EMBEDDED, "llama-3.2-1b"], "prompts": [1024, 2048, 4096, 7680], "answers": [40],
            "budget": "3GB", "point_timeout": 1500}
GPU_PLAN = {"models": ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b"], "prompts": [1024, 4096, 16384, 32768],
            "answers": [16, 64, 128], "budget": None, "point_timeout": 240}


# -- the arithmetic a point does --------------------------------------------------------------------------------------


def model_shape(name: str) -> dict[str, Any]:
    """The sizes the FLOP count needs: ``SHAPES[name]``, or the embedded model's own ``config.json``."""
    if name in SHAPES:
        return SHAPES[name]
    from mirage.attribution.models import embedded_checkpoint

    return json.loads((embedded_checkpoint(name) / "config.json").read_text(encoding="utf-8"))


def attribution_flops(shape: dict[str, Any], point: dict[str, Any]) -> float:
    """Floating-point operations of a point's attribution, counted from the model's sizes and the passes it ran:
    the forward pass over prompt and answer that CTI and CCI share, the contextless forward pass (question and
    answer: about 60 + answer tokens), one backward pass per selected token (the inputs' gradients only, the
    weights frozen: one matrix product per linear layer, two for attention's), and with checkpointing one more
    forward pass per backward pass (``targets per pass`` targets share it). Attention is causal (half the score
    matrix). A model, not a measurement: it says how much of the growth with the prompt is the arithmetic itself."""
    import math
    import re

    h, layers = shape["hidden_size"], shape["num_hidden_layers"]
    heads, kv = shape["num_attention_heads"], shape.get("num_key_value_heads") or shape["num_attention_heads"]
    hd = shape.get("head_dim") or h // heads
    inter, vocab = shape.get("intermediate_size") or 4 * h, shape["vocab_size"]
    linear = 2 * (2 * h * heads * hd + 2 * h * kv * hd + 3 * h * inter)  # per token per layer

    def forward(n: int, att: float = 1.0) -> float:
        return layers * (n * linear + att * 2 * heads * hd * n * n)

    a = point["answer_tokens"]
    n = point["prompt_tokens"] + a
    selected = point["n_selected"]
    heads_logits = 2 * 2 * h * vocab * a  # the answer positions' logits, with and without the documents
    backward = forward(n, att=2.0)
    total = forward(n) + forward(60 + a) + heads_logits + selected * backward
    passes = point.get("passes", {})
    if passes.get("checkpointing") == "on":
        per_pass = re.search(r"(\d+) target\(s\) per pass", passes.get("cci_backward", ""))
        total += math.ceil(selected / int(per_pass.group(1) if per_pass else 1)) * forward(n)
    return total


# -- one point, in its own process ------------------------------------------------------------------------------------


def _documents(files: list[str]) -> list[dict[str, str]]:
    docs: list[dict[str, str]] = []
    for name in files:
        text = Path(name).read_text(encoding="utf-8")
        rows = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x]
        for row in rows:
            if isinstance(row.get("passage_en"), str):
                docs.append({"title": "", "text": row["passage_en"]})
            for doc in row.get("docs") or []:
                docs.append({"title": doc.get("title", ""), "text": doc["text"]})
    if not docs:
        raise SystemExit(f"no passages in {files}")
    return docs


def _build_model(name: str, device: str, dtype: str, budget: str | None) -> Any:
    """A LoadedModel: the embedded model, or a random-initialised one of ``SHAPES[name]`` with the embedded
    tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from mirage.attribution.models import embedded_checkpoint, load_model, parse_size, resolve_dtype, wrap_model

    if name == EMBEDDED:
        return load_model(EMBEDDED, device=device, dtype=dtype, memory_budget=budget)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(embedded_checkpoint(EMBEDDED))
    shape = dict(SHAPES[name])
    quantization = shape.pop("quantization", None) if device != "cpu" else None
    shape.pop("quantization", None)
    model_type = shape.pop("model_type")
    shape["vocab_size"] = max(shape["vocab_size"], len(tokenizer))  # Mistral's 32768 ids < the tokenizer's 49152
    config = AutoConfig.for_model(model_type, **shape)
    torch_dtype = resolve_dtype(dtype, torch.device(device))
    torch.manual_seed(0)
    if quantization is not None:
        model = _random_4bit(config, torch_dtype, device)
    else:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    lm = wrap_model(model, tokenizer, name=f"{name} (random weights)", use_chat_template=False)
    lm.memory_budget = parse_size(budget) if budget else None
    return lm


def _random_4bit(config: Any, compute_dtype: Any, device: str) -> Any:
    """A random-initialised model whose linear layers are bitsandbytes 4-bit (NF4), built layer by layer so that the
    full-precision weights never exist at once (70B: 140 GB in bf16). GPU only; not measured on the CPU."""
    import bitsandbytes as bnb
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=compute_dtype)
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear) and child_name != "lm_head":
                layer = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                          compute_dtype=compute_dtype, quant_type="nf4", device="meta")
                weight = torch.randn(child.out_features, child.in_features, dtype=compute_dtype, device=device) * 0.02
                layer.weight = bnb.nn.Params4bit(weight, requires_grad=False, quant_type="nf4").to(device)
                if child.bias is not None:
                    layer.bias = torch.nn.Parameter(torch.zeros(child.out_features, dtype=compute_dtype,
                                                                device=device), requires_grad=False)
                setattr(parent, child_name, layer)
    for module_name, module in model.named_modules():  # what is left on meta: embeddings, norms, the head
        for pname, param in list(module.named_parameters(recurse=False)):
            if param.device.type == "meta":
                value = torch.randn(param.shape, dtype=compute_dtype, device=device) * 0.02 \
                    if "norm" not in module_name else torch.ones(param.shape, dtype=compute_dtype, device=device)
                setattr(module, pname, torch.nn.Parameter(value, requires_grad=False))
    for buffer_owner in model.modules():
        for bname, buf in list(buffer_owner.named_buffers(recurse=False)):
            if buf.device.type == "meta":
                buffer_owner.register_buffer(bname, torch.zeros(buf.shape, dtype=buf.dtype, device=device))
    if hasattr(model.model, "rotary_emb"):  # recompute the rotary frequencies on the device
        rotary = type(model.model.rotary_emb)(config=config, device=device)
        model.model.rotary_emb = rotary
    return model.eval()


def _peak_reset(device: str) -> None:
    import torch

    if device != "cpu":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak_bytes(device: str) -> int:
    import torch

    if device != "cpu":
        return int(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_point(point: dict[str, Any]) -> dict[str, Any]:
    """Measure one (model, prompt tokens, answer tokens) point; runs in a child process."""
    import torch

    from mirage import Mirage, MirageConfig
    from mirage.attribution.planner import MemoryBudgetError

    torch.set_num_threads(point["threads"])
    if point.get("cpu_limit"):  # a limit on this process's CPU seconds: the same work on a loaded or idle machine
        limit = int(point["cpu_limit"])
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 5))
    device = point["device"]
    t = time.perf_counter()
    lm = _build_model(point["model"], device, point["dtype"], point["budget"])
    load_s = time.perf_counter() - t
    cfg = MirageConfig().replace(prompt={"chat_template": False})
    mirage = Mirage(lm, config=cfg)
    tok = lm.tokenizer
    answer_ids = tok(ANSWER_TEXT, add_special_tokens=False)["input_ids"][: point["answer"]]
    answer = tok.decode(answer_ids)
    docs, pool, used = [], _documents(point["docs"]), 0
    while used < point["prompt"] - 60:  # room for the question and the template's text
        doc = pool[len(docs) % len(pool)]
        n = len(tok(doc["text"], add_special_tokens=False)["input_ids"]) + 6
        if used + n > point["prompt"] - 60:
            words = doc["text"].split()
            keep = max(1, int(len(words) * (point["prompt"] - 60 - used) / n))
            doc = {"title": doc["title"], "text": " ".join(words[:keep])}
            n = len(tok(doc["text"], add_special_tokens=False)["input_ids"]) + 6
        docs.append(doc)
        used += n
    prep = mirage.prepare({"question": "When was the first bridge over the river built, and why?", "docs": docs},
                          reserve_tokens=len(answer_ids) + 1)
    prompt_tokens = len(prep.tokens.ids)
    out: dict[str, Any] = {**{k: point[k] for k in ("model", "prompt", "answer", "budget", "dtype")},
                           "prompt_tokens": prompt_tokens, "answer_tokens": len(answer_ids), "load_s": load_s}
    ids = torch.tensor([prep.tokens.ids], device=lm.device)
    if device != "cpu":
        out["weights_bytes"] = int(torch.cuda.memory_allocated())
    _peak_reset(device)
    t, c = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=len(answer_ids),
                          min_new_tokens=len(answer_ids), do_sample=False, pad_token_id=tok.eos_token_id)
    out["generation_s"], out["generation_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    out["generation_peak_bytes"] = _peak_bytes(device)
    _peak_reset(device)
    t, c = time.perf_counter(), time.process_time()
    try:
        scores = mirage.score_tokens(prep, answer)
    except MemoryBudgetError as err:  # refused under a budget, or (without one) the pass ran out of memory
        out.update(status="over budget" if lm.memory_budget is not None else "out of memory", error=str(err),
                   passes=dict(lm.passes))
        return out
    out["attribution_s"], out["attribution_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    out["cti_s"], out["cci_s"] = scores.timings.get("cti"), scores.timings.get("cci")
    out["peak_bytes"] = _peak_bytes(device)
    out["n_selected"] = len(scores.cti.selected)
    out["passes"] = dict(lm.passes)
    out["plan"] = _plan(lm, prompt_tokens + len(answer_ids))
    top = []
    for row in scores.cci.scores:  # the three strongest context tokens of each selected answer token
        top.append(sorted(range(len(row)), key=lambda j, row=row: -row[j])[:3])
    out["cci_top3"] = top
    out["status"] = "ok"
    return out


def _plan(lm: Any, seq: int) -> dict[str, Any]:
    """What mirage's memory plan expected of the point's differentiable pass over ``seq`` positions (read after the
    pass, from the activation sizes it measured): the graph without and with checkpointing, the bytes each backward
    target adds, and how many targets each CCI pass took (from ``passes``), to set beside the measured peak."""
    import re

    from mirage.attribution.planner import backward_row_bytes, graph_bytes

    width = re.search(r"(\d+) target\(s\) per pass", str(lm.passes.get("cci_backward", "")))
    return {"seq": seq, "graph_bytes": graph_bytes(lm, seq, checkpoint=False),
            "graph_checkpointed_bytes": graph_bytes(lm, seq, checkpoint=True),
            "target_bytes": backward_row_bytes(lm, seq), "targets_per_pass": int(width.group(1)) if width else 1}


# -- the driver -------------------------------------------------------------------------------------------------------


def _key(p: dict[str, Any]) -> str:
    return f"{p['model']}|{p['prompt']}|{p['answer']}|{p['budget']}"


def _done(points_file: Path) -> dict[str, dict[str, Any]]:
    if not points_file.exists():
        return {}
    out = {}
    for line in points_file.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn last line of a killed run: that point runs again
        out[_key(rec)] = rec
    return out


def drive(args: SimpleNamespace) -> None:
    """Run every point not yet in OUT/points.jsonl, each in a child process, then write results.json and README.md."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    points_file = out / "points.jsonl"
    done = _done(points_file)
    for budget in [*args.budget, None]:  # the budgets' curves first, then the points without one
        for model in args.models:
            if budget is not None and _weight_bytes(model, args.dtype) > parse_size(budget):
                print(f"{model}: its weights alone exceed the budget {budget}; no points with it.", flush=True)
                continue
            for answer in args.answers:
                failed = False
                for prompt in args.prompts:
                    point = {"model": model, "prompt": prompt, "answer": answer, "budget": budget,
                             "device": args.device, "dtype": args.dtype, "threads": args.threads, "docs": args.docs,
                             "cpu_limit": args.cpu_limit}
                    if budget is None and args.budget and args.compare_at and prompt not in args.compare_at \
                            and model == EMBEDDED:
                        continue  # without the budget, only the comparison points
                    if _key(point) in done:
                        failed = failed or done[_key(point)]["status"] != "ok"
                        continue
                    if failed or args.collect:
                        continue  # a shorter prompt did not fit: this one will not either (--collect: run nothing)
                    rec = point_in_child(point, args.point_timeout)
                    with points_file.open("a", encoding="utf-8") as f:
                        f.write(json.dumps(rec) + "\n")
                    done[_key(rec)] = rec
                    failed = rec["status"] != "ok"
                    print(_line(rec), flush=True)
    write_results(out, list(done.values()), args)


def _weight_bytes(model: str, dtype: str) -> int:
    """About how many bytes the model's weights take (embedding and head counted once if tied)."""
    if model == EMBEDDED:
        return 135_000_000 * 4
    c = SHAPES[model]
    h, layers, inter, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * c.get("head_dim", h // c["num_attention_heads"])
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter
    n = layers * per_layer + vocab * h * (1 if c.get("tie_word_embeddings") else 2)
    return n * (4 if dtype == "float32" else 2)


def point_in_child(point: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Measure one point in a fresh process (its own peak memory, no allocator history); the record, or the point's
    keys with ``status`` (time limit, out of memory, CPU time limit, failed) and ``error``."""
    t = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--point", json.dumps(point)], check=False,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**{k: point[k] for k in ("model", "prompt", "answer", "budget", "dtype")}, "status": "time limit",
                "error": f"over the {timeout:.0f} s limit"}
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["killed"])[-1][:300]
        status = ("out of memory" if proc.returncode in (-9, 137) or "OutOfMemory" in proc.stderr
                  else "CPU time limit" if proc.returncode == -24 else "failed")  # -24: SIGXCPU
        if status == "CPU time limit":
            tail = f"over the {point.get('cpu_limit')} CPU-second limit"
        return {**{k: point[k] for k in ("model", "prompt", "answer", "budget", "dtype")}, "status": status,
                "error": tail, "wall_s": time.perf_counter() - t}
    return json.loads(lines[-1])


def _line(rec: dict[str, Any]) -> str:
    head = f"{rec['model']:<22} prompt {rec.get('prompt_tokens', rec['prompt']):>6} answer {rec['answer']:>3} " \
           f"budget {rec['budget'] or '-':>5}: "
    if rec["status"] != "ok":
        return head + f"{rec['status']} ({rec.get('error', '')[:120]})"
    return head + (f"generation {rec['generation_s']:.1f} s, attribution {rec['attribution_s']:.1f} s "
                   f"(cpu {rec['attribution_cpu_s']:.1f} s; {rec['attribution_s'] / rec['generation_s']:.2f}x "
                   f"generation), peak {rec['peak_bytes'] / 1e9:.2f} GB, {rec['passes']}")


def write_results(out: Path, points: list[dict[str, Any]], args: SimpleNamespace) -> None:
    """``results.json`` (settings, machine, points, growth exponents) and ``README.md`` rendered from it."""
    import torch

    device = torch.device(args.device)
    for p in points:  # derived from the record alone, so points measured before the count existed get it too
        if p["status"] == "ok" and "flops" not in p:
            p["flops"] = attribution_flops(model_shape(p["model"]), p)
    command = args.command or shlex.join(["python", "benchmarks/bench_scale.py", *sys.argv[1:]])
    notes = []  # the folder's notes describe its points, which stay from run to run: kept, then this run's added
    if (out / "results.json").exists():
        notes = list(json.loads((out / "results.json").read_text(encoding="utf-8")).get("notes", []))
    notes += [n for n in args.note or [] if n not in notes]
    results = {"benchmark": "bench_scale", "command": command,
               "machine": {"device": device_name(device), "cpus": os.cpu_count(), "threads": args.threads,
                           "python": platform.python_version(), "torch": torch.__version__},
               "settings": {"models": args.models, "prompts": args.prompts, "answers": args.answers,
                            "budgets": args.budget, "dtype": args.dtype,
                            "point_timeout_s": args.point_timeout if args.timeout_given or not args.collect else None,
                            "cpu_limit_s": args.cpu_limit,
                            "docs": [Path(d).name for d in args.docs]},
               "points": sorted(points, key=lambda r: (r["model"], r["answer"], str(r["budget"]), r["prompt"])),
               "growth": growth(points), "notes": notes}
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    write_page(out)
    for row in results["growth"]:
        print(f"{row['model']} answer {row['answer']} budget {row['budget'] or '-'}: attribution time ~ prompt^"
              f"{row['time_exponent']:.2f} (cpu ~ prompt^{row['cpu_exponent']:.2f}) from {row['from']} to "
              f"{row['to']} tokens; peak memory ~ prompt^{row['memory_exponent']:.2f}")


def growth(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, answer, budget): the exponent k of attribution time ~ prompt^k between the shortest and the
    longest finished prompt (wall-clock and CPU time), of peak memory, and of the arithmetic
    (:func:`attribution_flops`): the exponent the time would have at a constant speed per operation."""
    import math

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for p in points:
        if p["status"] == "ok":
            groups.setdefault((p["model"], p["answer"], p["budget"]), []).append(p)
    rows = []
    for (model, answer, budget), ps in sorted(groups.items(), key=lambda kv: str(kv[0])):
        ps = sorted(ps, key=lambda r: r["prompt_tokens"])
        if len(ps) < 2:
            continue
        a, b = ps[0], ps[-1]
        span = math.log(b["prompt_tokens"] / a["prompt_tokens"])

        def k(field: str, a: dict = a, b: dict = b, span: float = span) -> float:
            return math.log(b[field] / a[field]) / span

        rows.append({"model": model, "answer": answer, "budget": budget, "from": a["prompt_tokens"],
                     "to": b["prompt_tokens"], "time_exponent": k("attribution_s"),
                     "cpu_exponent": k("attribution_cpu_s"), "memory_exponent": k("peak_bytes"),
                     **({"flop_exponent": k("flops")} if "flops" in a and "flops" in b else {})})
    return rows


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    point: str | None = cli_arg(None, flag="--point", help=HIDDEN)  # one point's JSON: what a child process runs
    render: str | None = cli_arg(None, flag="--render", metavar="DIR",
                                 help="write DIR/README.md from DIR/results.json and stop")
    note: tuple[str, ...] | None = cli_arg(None, flag="--note", action="append",
                                           help="a sentence recorded in results.json and shown on the page")
    collect: bool = cli_arg(False, flag="--collect",
                            help="run no point: write results.json and README.md from the points already in OUT")
    gpu: bool = cli_arg(False, flag="--gpu", help="the GPU plan: 7-8B models, 1k-32k prompts, 16-128 tokens")
    models: tuple[str, ...] | None = cli_arg(None, flag="--models", choices=[EMBEDDED, *SHAPES],
                                             help="the models (default: the plan's)")
    prompts: tuple[int, ...] | None = cli_arg(None, flag="--prompts", help="prompt lengths in tokens")
    answers: tuple[int, ...] | None = cli_arg(None, flag="--answers", help="answer lengths in tokens")
    budget: tuple[str, ...] | None = cli_arg(None, flag="--budget", nargs="*",
                                             help="memory budgets to run besides none (e.g. 3GB)")
    compare_at: tuple[int, ...] | None = cli_arg(
        None, flag="--compare-at", nargs="*", help="with --budget: the embedded model's prompt lengths also run "
        "without a budget (to compare citations; default: all)")
    point_timeout: float | None = cli_arg(None, flag="--point-timeout", help="wall-clock seconds per point")
    cpu_limit: int | None = cli_arg(None, flag="--cpu-limit",
                                    help="CPU seconds per point (the process's own, whatever else runs on the machine)")
    threads: int = threads_arg(max(1, min(4, os.cpu_count() or 1)))
    dtype: str | None = dtype_arg(help="the models' dtype (default: float32 on a CPU, bfloat16 on a GPU)")
    docs: tuple[str, ...] | None = cli_arg(None, flag="--docs", help="passages: XOR-AttriQA JSONL or ALCE JSON files, "
                                           "or dataset names (xor-attriqa-full:val)")
    out: str | None = cli_arg(None, flag="--out", help="the results folder (default: benchmarks/results/scale_cpu, "
                              "or scale_gpu with --gpu)")
    command: str | None = cli_arg(None, flag="--command", help="the command recorded in results.json (default: this "
                                  "one); a script that runs this one in steps names itself (benchmarks/gpu_scale.sh)")


def run(options: Options) -> None:
    args = SimpleNamespace(**dataclasses.asdict(options))  # the options, then the plan's values where none is given
    if args.point:
        print(json.dumps(run_point(json.loads(args.point))), flush=True)
        return
    if args.render:
        write_page(Path(args.render))
        return
    plan = GPU_PLAN if args.gpu else CPU_PLAN
    args.device = "cuda" if args.gpu else "cpu"
    args.dtype = args.dtype or ("bfloat16" if args.gpu else "float32")
    args.models = args.models or plan["models"]
    args.prompts = sorted(args.prompts or plan["prompts"])
    args.answers = args.answers or plan["answers"]
    if args.budget is None:
        args.budget = [plan["budget"]] if plan["budget"] else []
    args.timeout_given = args.point_timeout is not None  # a --collect run records the limit its points ran under
    args.point_timeout = args.point_timeout or plan["point_timeout"]
    args.out = args.out or str(ROOT / "benchmarks" / "results" / ("scale_gpu" if args.gpu else "scale_cpu"))
    if args.docs:  # dataset names (xor-attriqa-full:val) or paths
        from mirage.data import resolve

        args.docs = [str(resolve(d)) for d in args.docs]
    else:
        cached = cached_dataset("xor-attriqa-full")
        args.docs = [str(cached / "val.jsonl")] if cached else \
            [str(p) for p in sorted((ROOT / "tests" / "data" / "xor_attriqa_full").glob("*.jsonl"))]
    drive(args)


if __name__ == "__main__":
    main(Options, run)
