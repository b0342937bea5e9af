"""Rendering: markdown tables in the shape of the studies' tables, and a figure of CAB per model and metadata type.
Both return values (a string, a matplotlib Figure); nothing is printed or shown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .metrics import Effect, Stat
from .protocol import BiasConfig, doc_sides
from .results import BiasStudyResult, SourceSummary

SOURCE_TITLES = {"self": "Self-citation (what the model says it cites)",
                 "mirage": "MIRAGE (what the model uses, from its internals)"}


def _pct(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}"


def _p(p: float | None) -> str:
    return "–" if p is None else (f"{p:.3f}" if p >= 0.001 else f"{p:.1e}")


def _stars(p: float | None) -> str:
    if p is None:
        return ""
    return "**" if p < 0.01 else "*" if p < 0.05 else ""


def _stat(stat: Stat) -> str:
    return f"{_pct(stat.value, 2)}{_stars(stat.p_value)}"


def _mode_labels(result: BiasStudyResult, mode: str) -> str:
    cfg = BiasConfig.from_dict(result.config)
    rel, nonrel = doc_sides((True, False), mode, cfg)  # type: ignore[arg-type]
    if rel is None:
        return "none"
    name = {"first": result.metadata["first"], "second": result.metadata["second"]}
    return f"{name[rel]} / {name[nonrel]}"


def quality_table(result: BiasStudyResult, source: SourceSummary) -> str:
    """Attribution quality per mode (percentages; AC as probabilities in %, with the number of citations)."""
    lines = [("| Mode | Labels (relevant / non-relevant) | Precision | Recall | F1 | Citations | No citation | "
             "Length (words) | EM | AC relevant | AC non-relevant | Random P | Random R |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for mode, s in source.modes.items():
        base = source.baseline.get(mode, {})
        lines.append(
            f"| {mode} | {_mode_labels(result, mode)} | {_pct(s.precision)} | {_pct(s.recall)} | {_pct(s.f1)} | "
            f"{s.n_citations:.2f} | {_pct(s.no_citation)} | {s.length:.1f} | {_pct(s.correct)} | "
            f"{_ac(s.ac_relevant, s.n_ac_relevant)} | {_ac(s.ac_nonrelevant, s.n_ac_nonrelevant)} | "
            f"{_pct(base.get('precision'))} | {_pct(base.get('recall'))} |")
    return "\n".join(lines)


def _ac(value: float | None, n: int) -> str:
    return "–" if value is None else f"{_pct(value)} (n={n})"


def cas_table(source: SourceSummary) -> str:
    lines = ["| Mode vs vanilla | CAS precision | p | CAS recall | p | Random CAS P | Random CAS R | Queries |",
             "|---|---|---|---|---|---|---|---|"]
    for mode, e in source.cas.items():
        lines.append(_effect_row(mode, e))
    return "\n".join(lines) if source.cas else "(CAS needs the vanilla mode and another mode.)"


def cab_table(result: BiasStudyResult, source: SourceSummary) -> str:
    if source.cab is None:
        return "(CAB needs the informed and counterfactual modes.)"
    first = result.metadata["first"]
    lines = ["| ω | CAB precision | p | CAB recall | p | Random CAB P | Random CAB R | Queries |",
             "|---|---|---|---|---|---|---|---|",
             _effect_row(f"{result.omega:+d}", source.cab)]
    return "\n".join(lines) + f"\n\nPositive CAB = bias toward **{first}**."


def _effect_row(name: str, e: Effect) -> str:
    return (f"| {name} | {_stat(e.precision)} | {_p(e.precision.p_value)} | {_stat(e.recall)} | "
            f"{_p(e.recall.p_value)} | {_pct(e.precision.baseline, 2)} | {_pct(e.recall.baseline, 2)} | {e.n} |")


def side_by_side(result: BiasStudyResult) -> str:
    """The headline numbers, self-citation beside mirage."""
    srcs = [result.sources[s] for s in ("self", "mirage") if s in result.sources]
    lines = ["| | " + " | ".join(("Self-citation" if s.source == "self" else "MIRAGE") for s in srcs) + " |",
             "|---|" + "---|" * len(srcs)]
    modes = list(srcs[0].modes) if srcs else []

    def row(name: str, cells: list[str]) -> None:
        lines.append(f"| {name} | " + " | ".join(cells) + " |")

    for mode in modes:
        row(f"P / R, {mode}", [f"{_pct(s.modes[mode].precision)} / {_pct(s.modes[mode].recall)}" for s in srcs])
    for mode in srcs[0].cas if srcs else []:
        row(f"CAS P / R, {mode}", [f"{_stat(s.cas[mode].precision)} / {_stat(s.cas[mode].recall)}" for s in srcs])
    if srcs and srcs[0].cab is not None:
        row("CAB P / R", [f"{_stat(s.cab.precision)} / {_stat(s.cab.recall)}" if s.cab else "–" for s in srcs])
    return "\n".join(lines)


def render_markdown(result: BiasStudyResult) -> str:
    """The study's tables: per citation set, attribution quality per mode, CAS and CAB with significance."""
    md = result.metadata
    cfg = result.config
    out = [
        f"# Attribution sensitivity and bias: {result.model}",
        "",
        (f"Data `{result.data}`, {result.n_items} questions, k = {cfg['k']} documents (one relevant), "
        f"documents: {cfg['docs']}, seed {cfg['seed']}. Metadata `{md['type']}`: {md['first']} "
        f"{md['first_labels']} vs {md['second']} {md['second_labels']}; ω = {result.omega:+d} "
        f"(relevant documents labelled {md[cfg['relevant_side']]} in the informed mode)."),
        "",
        ("Values are percentages. CAS = mean |M_mode − M_vanilla|; CAB = ω · mean (M_informed − M_counterfactual). "
        "p: paired t-test; * p < 0.05, ** p < 0.01. Random: a citer that cites as many documents as the model, "
        "uniformly at random. MIRAGE's citations are computed on the same answers with the citation marks removed."),
        "",
        "## Side by side",
        "",
        side_by_side(result),
    ]
    for key, source in result.sources.items():
        out += ["", f"## {SOURCE_TITLES.get(key, key)}", "", "### Attribution quality per mode", "",
                quality_table(result, source), "", "### Attribution sensitivity (CAS)", "", cas_table(source), "",
                "### Attribution bias (CAB)", "", cab_table(result, source)]
    return "\n".join(out) + "\n"


def plot_cab(results: Sequence[BiasStudyResult]) -> Any:
    """A bar chart of CAB (precision and recall; self-citation and MIRAGE) per model and metadata type, stars for
    p < 0.05. Returns a matplotlib Figure (not shown)."""
    from matplotlib.figure import Figure

    results = [r for r in results if any(s.cab is not None for s in r.sources.values())]
    fig = Figure(figsize=(max(6.5, 2.6 * len(results) + 1.5), 4.0), layout="constrained")
    ax = fig.subplots()
    series = [("self", "precision", "#4c72b0", ""), ("self", "recall", "#4c72b0", "//"),
              ("mirage", "precision", "#dd8452", ""), ("mirage", "recall", "#dd8452", "//")]
    width = 0.8 / len(series)
    top = 0.0
    for j, (source, metric, colour, hatch) in enumerate(series):
        xs, ys, ps = [], [], []
        for i, r in enumerate(results):
            effect = r.sources[source].cab if source in r.sources else None
            if effect is None:
                continue
            stat = effect.stat(metric)
            xs.append(i - 0.4 + width * (j + 0.5))
            ys.append(100 * stat.value)
            ps.append(stat.p_value)
        label = f"{'self-citation' if source == 'self' else 'MIRAGE'} {metric}"
        ax.bar(xs, ys, width, color=colour, hatch=hatch, edgecolor="black", linewidth=0.5, label=label)
        for x, y, p in zip(xs, ys, ps):
            ax.annotate(f"{y:.1f}{_stars(p)}", (x, y), ha="center", va="bottom" if y >= 0 else "top", fontsize=7)
            top = max(top, abs(y))
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylim(-1.25 * max(top, 1.0), 1.25 * max(top, 1.0))
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels([f"{r.model}\n{r.metadata['type']}: {r.metadata['first']} vs {r.metadata['second']}"
                        for r in results], fontsize=8)
    ax.set_ylabel("CAB (%)  (+ = toward first label)")
    ax.set_title("Attribution bias (CAB): informed vs counterfactual labels; * p < 0.05, ** p < 0.01", fontsize=9)
    ax.legend(fontsize=7, ncols=2)
    return fig
