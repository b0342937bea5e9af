"""The results pages of ``benchmarks/``: the scaling benchmark (``benchmarks/bench_scale.py``'s ``results.json``:
times, memory and growth with the prompt, the memory plan against the measured peak), and any folder of benchmark
JSON records, each shown as tables of its fields (the catch-all kind, tried last)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mirage.runs.files import RESULTS_FILE
from mirage.views.pages.core import (
    cell,
    code,
    fenced,
    gib,
    link,
    md_table,
    page,
    plots_section,
    read_json,
    text,
)
from mirage.views.pages.kinds import PageKind, as_list, no_data, results_of

__all__ = [
    "BENCHMARK_JSON_PAGE",
    "BENCH_SCALE_PAGE",
]


def _bench_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.glob("*.json") if p.name != "provenance.json")


def _is_bench(run_dir: Path) -> bool:
    return not (run_dir / RESULTS_FILE).is_file() and bool(_bench_files(run_dir))


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _bench_value(key: str, value: Any) -> str:
    if key.endswith("_mb") and isinstance(value, (int, float)):
        return gib(value)
    return cell(value, 3 if isinstance(value, float) and abs(value) < 10 else 1)


def _bench_header(key: str) -> str:
    return key[:-3] + " (GiB)" if key.endswith("_mb") else key


def _table_of(items: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    keys = list(dict.fromkeys(k for _n, row in items for k, v in row.items() if _scalar(v)))
    return md_table(["", *[_bench_header(k) for k in keys]],
                    [(name, *[_bench_value(k, row.get(k)) for k in keys]) for name, row in items])


def _bench_section(path: Path) -> str:
    data = read_json(path)
    parts = [f"### {link(code(path.name), path.name)}"]
    if isinstance(data, list):
        data = {"rows": data}
    if not isinstance(data, dict):
        return parts[0] + "\n\n" + cell(data)
    if data.get("command"):
        parts.append(fenced(str(data["command"]), "bash"))
    scalars = [(code(k), _bench_value(k, v)) for k, v in data.items() if _scalar(v) and k != "command"]
    if scalars:
        parts.append(md_table(["field", "value"], scalars))
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            parts.append(f"{code(key)}:\n\n" + _table_of([(str(i + 1), r) for i, r in enumerate(value)]))
        elif isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            parts.append(f"{code(key)}:\n\n" + _table_of([(code(k), v) for k, v in value.items()]))
        elif isinstance(value, dict) and value and all(_scalar(v) for v in value.values()):
            parts.append(f"{code(key)}:\n\n" + md_table(["", "value"], [(code(k), _bench_value(k, v))
                                                                    for k, v in value.items()]))
        elif isinstance(value, list) and value and all(_scalar(v) for v in value):
            parts.append(f"{code(key)}: " + cell(value, 3))
    return "\n\n".join(parts)


def _bench_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    return page("Benchmark records",
                "Each JSON file of this folder as written by the script its `command` names (`benchmarks/`). "
                "Memory recorded in MB (2^20 bytes) is shown in GiB (2^30 bytes).",
                ["## Records\n\n" + "\n\n".join(_bench_section(p) for p in _bench_files(run_dir)),
                 plots_section(run_dir), *tail(run_dir)])


def _is_scale(run_dir: Path) -> bool:
    res = results_of(run_dir)
    return res is not None and {"machine", "settings", "points", "growth"} <= res.keys()


def _as_text(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record whose fields a hand-built table shows: its text fields (and texts in its lists) as :func:`cell`
    shows them, so none ends a row or a cell; numbers stay numbers."""
    def shown(v: Any) -> Any:
        return cell(v) if isinstance(v, str) else [shown(x) for x in v] if isinstance(v, list) else v

    return {k: shown(v) for k, v in record.items()}


def _scale_page(results: dict[str, Any]) -> str:
    """The scaling benchmark's page body (``benchmarks/bench_scale.py``'s ``results.json``)."""
    m, s = _as_text(results["machine"]), _as_text(results["settings"])
    points, growth = [_as_text(p) for p in results["points"]], [_as_text(g) for g in results["growth"]]
    limit = "as its steps set them" if s["point_timeout_s"] is None else f"{s['point_timeout_s']:.0f} s"
    lines = [(f"Measured by {code(results['command'])}; this page is written from its `results.json` by "
              "`mirage report`."),
             "",
             (f"Machine: {m['device']}, {m['cpus']} CPU(s), {m['threads']} torch thread(s), torch {m['torch']}, "
             f"Python {m['python']}. Models other than the embedded one have random weights (time and memory only). "
             f"dtype {s['dtype']}; limits per point {limit} wall-clock, "
              f"{s.get('cpu_limit_s') or '-'} CPU seconds; passages from "
             f"{', '.join(s['docs'])}."), "",
             *(f"Note: {text(n)}" for n in results.get("notes", [])), *([""] if results.get("notes") else []),
             ("Wall-clock times on a shared machine vary with its load; CPU seconds (`cpu`) are this process's own. "
             "Peak memory: resident memory of the point's process on a CPU (weights included), allocated GPU memory "
             "on a GPU."), "",
             ("| model | budget | prompt tokens | answer | generation s | attribution s (cpu s) | CTI s | CCI s | "
             "CCI s per selected token | attribution / generation | peak GiB | selected | passes |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for p in points:
        budget = p["budget"] or "-"
        if p["status"] != "ok":
            lines.append(f"| {p['model']} | {budget} | {p.get('prompt_tokens', p['prompt'])} | {p['answer']} | "
                         f"{p['status']}: {str(p.get('error', ''))[:90].replace('|', '/')} | | | | | | | | |")
            continue
        passes = ", ".join(f"{cell(k)} {cell(v)}" for k, v in p.get("passes", {}).items())
        lines.append(f"| {p['model']} | {budget} | {p['prompt_tokens']} | {p['answer_tokens']} | "
                     f"{p['generation_s']:.1f} | {p['attribution_s']:.1f} ({p['attribution_cpu_s']:.1f}) | "
                     f"{p['cti_s']:.1f} | {p['cci_s']:.1f} | {p['cci_s'] / max(1, p['n_selected']):.1f} | "
                     f"{p['attribution_s'] / p['generation_s']:.2f} | "
                     f"{p['peak_bytes'] / 2**30:.2f} | {p['n_selected']} | {passes} |")
    fits: dict[tuple, int] = {}
    for p in points:
        if p["status"] == "ok":
            key = (p["model"], p["answer"], p["budget"] or "-")
            fits[key] = max(fits.get(key, 0), p["prompt_tokens"])
    lines += ["", "## Largest prompt that finished", "", "| model | answer | budget | prompt tokens |",
              "|---|---:|---|---:|"]
    lines += [f"| {k[0]} | {k[1]} | {k[2]} | {v} |" for k, v in sorted(fits.items(), key=str)]
    lines += ["", "## Growth with the prompt", "",
              ("Exponent k of `time ~ prompt^k` between the shortest and the longest finished prompt. CCI's time "
               "is proportional to the number of tokens CTI selects, which differs from prompt to prompt (see "
               "`selected`)."), "",
              "| model | answer | budget | prompts | attribution time k (cpu k) | arithmetic k | peak memory k |",
              "|---|---:|---|---|---:|---:|---:|"]
    for g in growth:
        flop_k = f"{g['flop_exponent']:.2f}" if "flop_exponent" in g else "-"
        lines.append(f"| {g['model']} | {g['answer']} | {g['budget'] or '-'} | {g['from']}-{g['to']} | "
                     f"{g['time_exponent']:.2f} ({g['cpu_exponent']:.2f}) | {flop_k} | {g['memory_exponent']:.2f} |")
    counted = [p for p in points if p["status"] == "ok" and p.get("flops")]
    if counted:
        lines += ["", "## Time per operation", "",
                  ("The arithmetic of each point (`flops`: counted from the model's sizes and the passes it ran, by "
                   "`benchmarks/bench_scale.py`'s `attribution_flops`; a count, not a measurement) and the CPU "
                   "seconds it took per 10^12 operations. Where that rate stays flat as the prompt grows, the growth "
                   "of the time is the arithmetic's (attention's share grows with the prompt), not overhead."), "",
                  "| model | answer | budget | prompt tokens | selected | TFLOP | cpu s per TFLOP |",
                  "|---|---:|---|---:|---:|---:|---:|"]
        lines += [f"| {p['model']} | {p['answer']} | {p['budget'] or '-'} | {p['prompt_tokens']} | "
                  f"{p['n_selected']} | {p['flops'] / 1e12:.2f} | {p['attribution_cpu_s'] / (p['flops'] / 1e12):#.3g} |"
                  for p in sorted(counted, key=lambda r: (r["model"], r["answer"], str(r["budget"]),
                                                          r["prompt_tokens"]))]
    same = _scale_same_citations(points)
    if same:
        lines += ["", "## CCI's strongest context tokens with and without a budget", ""]
        lines += [f"- {line}" for line in same]
    within = _scale_within_budget(points)
    if within:
        lines += ["", "## Peak memory against the budget", "",
                  ("The point's peak (resident memory of its process on a CPU, weights and interpreter included) "
                   "divided by its budget."), "",
                  "| model | answer | prompt tokens | budget | peak / budget | within |",
                  "|---|---:|---:|---|---:|---|"]
        lines += within
    planned = _scale_plan(points)
    if planned:
        lines += ["", "## Memory plan against the measured peak", "",
                  ("What mirage's memory plan expected of the differentiable pass (its graph, checkpointed or not as "
                   "the point ran, plus the bytes each backward target adds times the targets per CCI pass), beside "
                   "the measured peak above the weights (the allocated memory before the pass; the peak includes "
                   "CTI's passes and the allocator's temporaries). A ratio above 1: the plan underestimated."), "",
                  ("| model | budget | prompt tokens | checkpointing | targets per pass | weights GiB | planned GiB | "
                   "measured above weights GiB | measured / planned |"), "|---|---|---:|---|---:|---:|---:|---:|---:|"]
        lines += planned
    return "\n".join(lines) + "\n"


def _scale_plan(points: list[dict[str, Any]]) -> list[str]:
    """One table row per finished GPU point that recorded mirage's memory plan (``plan``, ``weights_bytes``)."""
    rows = []
    for p in points:
        plan = p.get("plan")
        if p["status"] != "ok" or not plan or "weights_bytes" not in p:
            continue
        on = p.get("passes", {}).get("checkpointing") == "on"
        need = (plan["graph_checkpointed_bytes"] if on else plan["graph_bytes"]) \
            + plan["targets_per_pass"] * plan["target_bytes"]
        above = p["peak_bytes"] - p["weights_bytes"]
        rows.append(f"| {p['model']} | {p['budget'] or '-'} | {p['prompt_tokens']} | {'on' if on else 'off'} | "
                    f"{plan['targets_per_pass']} | {p['weights_bytes'] / 2**30:.2f} | {need / 2**30:.2f} | "
                    f"{above / 2**30:.2f} | {above / max(1, need):.2f} |")
    return rows


def _scale_within_budget(points: list[dict[str, Any]]) -> list[str]:
    """One table row per finished point run under a budget: its peak over the budget."""
    from mirage.attribution.models import parse_size

    rows = []
    for p in points:
        if p["status"] == "ok" and p["budget"] is not None:
            ratio = p["peak_bytes"] / parse_size(p["budget"])
            rows.append(f"| {p['model']} | {p['answer']} | {p['prompt_tokens']} | {p['budget']} | {ratio:.3f} | "
                        f"{'yes' if ratio <= 1 else 'no'} |")
    return rows


def _scale_same_citations(points: list[dict[str, Any]]) -> list[str]:
    """Points measured with and without a budget: for how many selected answer tokens CCI's three strongest context
    tokens agree (and the strongest one, where the three do not)."""
    by = {(p["model"], p["prompt"], p["answer"], p["budget"]): p for p in points if p["status"] == "ok"}
    out = []
    for (model, prompt, answer, budget), p in sorted(by.items(), key=str):
        base = by.get((model, prompt, answer, None))
        if budget is None or base is None:
            continue
        n = len(p["cci_top3"])
        same = sum(a == b for a, b in zip(p["cci_top3"], base["cci_top3"]))
        first = sum(a[:1] == b[:1] for a, b in zip(p["cci_top3"], base["cci_top3"]))
        agree = ("the same as without a budget, for each of " if same == n and len(base["cci_top3"]) == n else
                 f"the same as without a budget for {same} (the strongest one for {first}) of ")
        out.append(f"{model}, {p['prompt_tokens']} prompt tokens, budget {budget}: CCI's three strongest context "
                   f"tokens {agree}{n} selected answer tokens")
    return out


def _scale_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    results = results_of(run_dir) or {}
    models = ", ".join(results.get("settings", {}).get("models", []))
    return page(f"Scaling: {text(models)}", None, [_scale_page(results), *tail(run_dir)])


#: The pages of ``benchmarks/``' folders.
BENCH_SCALE_PAGE = PageKind("bench-scale", _is_scale,
                            lambda d: as_list(((results_of(d) or {}).get("settings") or {}).get("docs")), _scale_render)
BENCHMARK_JSON_PAGE = PageKind("benchmark-json", _is_bench, no_data, _bench_render, "*.json")
