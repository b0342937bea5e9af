"""Figures of the benchmark reports; each function returns a matplotlib Figure (nothing is shown or saved)."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

__all__ = ["length_figure", "sweep_figure"]


def sweep_figure(sweep: dict[str, Any], *, metrics: tuple[str, ...] = ("agreement", "f1")) -> Figure:
    """Agreement (and F1) against the CCI top-% threshold (the paper's Figure 4): the average over languages as
    thick lines, each language thin, for example-level (EX) and calibrated (CAL) CTI thresholds."""
    percents = sweep["percents"]
    fig = Figure(figsize=(5.0 * len(metrics), 3.6), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    styles = {"ex": ("tab:blue", "MIRAGE-EX"), "cal": ("tab:orange", "MIRAGE-CAL")}
    for ax, metric in zip(axes, metrics):
        for variant, by_lang in sweep[metric].items():
            color, label = styles.get(variant, ("tab:gray", variant))
            for lang, values in by_lang.items():
                ys = [float("nan") if v is None else v for v in values]
                if lang == "avg":
                    ax.plot(percents, ys, color=color, linewidth=2.2, marker="o", markersize=3, label=f"{label} avg")
                else:
                    ax.plot(percents, ys, color=color, linewidth=0.8, alpha=0.45)
        ax.set_xticks([p for p in percents if p == min(percents) or p % 10 == 0])
        ax.set_xlabel("CCI top-% threshold")
        ax.set_ylabel(f"{metric.replace('_', ' ')} (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("XOR-AttriQA: CCI top-% sweep (thin lines: languages)", fontsize=10)
    return fig


def length_figure(bins: dict[str, Any]) -> Figure:
    """Citation quality by sentence length (the paper's Figure 6): ALCE recall and precision per length bin for
    self-citation and MIRAGE where judged, otherwise the share of cited sentences."""
    labels = bins["bins"]
    panels: list[str] = [m for m in ("citation_recall", "citation_precision") if m in bins] or ["cited_pct"]
    fig = Figure(figsize=(4.6 * len(panels), 3.4), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    xs = list(range(len(labels)))
    for ax, metric in zip(axes, panels):
        for offset, (source, color) in zip((-0.2, 0.2), (("self", "tab:gray"), ("mirage", "tab:blue"))):
            values = [0.0 if v is None else v for v in bins[metric].get(source, [])]
            ax.bar([x + offset for x in xs[: len(values)]], values, width=0.4, color=color,
                   label="self-citation" if source == "self" else "MIRAGE")
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{lb}\n(n={n})" for lb, n in zip(labels, bins["sentences"])], fontsize=7)
        ax.set_xlabel("sentence length (words)")
        ax.set_ylabel(metric.replace("_", " ").replace("pct", "(%)"))
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return fig
