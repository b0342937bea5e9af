"""Rendering: markdown tables in the shape of the studies' tables, and a figure of CAB per model and metadata type.
Both return values (a string, a matplotlib Figure); nothing is printed or shown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mirage.bias.explanations import render_explanations
from mirage.bias.metrics import METRICS, Effect, FollowSide, Stat
from mirage.bias.protocol import BiasConfig, doc_sides
from mirage.bias.results import BiasStudyResult, SourceSummary
from mirage.views.markdown import fmt_p, fmt_pct, md_table, stars

__all__ = ["NO_CAB", "follow_table", "has_cab", "plot_cab", "render_markdown", "side_by_side"]

SOURCE_TITLES = {"self": "Self-citation (what the model says it cites)",
                 "mirage": "MIRAGE (what the model uses, from its internals)"}


def _stat(stat: Stat) -> str:
    return f"{fmt_pct(stat.value, 2)}{stars(stat.p_value)}"


def _mode_labels(result: BiasStudyResult, mode: str) -> str:
    cfg = BiasConfig.from_dict(result.config)
    rel, nonrel = doc_sides((True, False), mode, cfg)
    if rel is None or nonrel is None:
        return "none"
    return f"{_side_name(result, rel)} / {_side_name(result, nonrel)}"


def _side_name(result: BiasStudyResult, side: str) -> str:
    return str(result.metadata[side])


def _dagger(source: SourceSummary, mode: str, metric: str) -> str:
    """† when the mode differs from vanilla on ``metric`` at p < 0.05 (paired t-test), as the paper marks it."""
    p = source.mode_tests.get(f"vanilla vs {mode}", {}).get(metric)
    return "†" if p is not None and p < 0.05 else ""


def _queries(effect: Effect) -> str:
    """The query pairs behind an effect, and those left out (an answer empty or echoing the prompt)."""
    return f"{effect.n}" + (f" ({effect.n_excluded} left out)" if effect.n_excluded else "")


def _no_p_notes(rows: list[tuple[str, Stat]]) -> str:
    """Footnotes saying why a test gave no p-value (``Stat.p_note``), one per row and metric that has one."""
    notes = [f"- no p-value for {what}: {stat.p_note}." for what, stat in rows if stat.p_note]
    return ("\n\n" + "\n".join(notes)) if notes else ""


def quality_table(result: BiasStudyResult, source: SourceSummary) -> str:
    """Attribution quality per mode (percentages; † = differs from vanilla at p < 0.05; AC as probabilities in %,
    with the number of citations and the Welch test of relevant vs non-relevant), and the answers that are empty
    or echo the prompt."""
    head = ["Mode", "Labels (relevant / non-relevant)", "Precision", "Recall", "F1", "Citations", "No citation",
            "Length (words)", "EM", "AC relevant", "AC non-relevant", "AC p", "Random P", "Random R", "Echo / empty"]
    rows = []
    for mode, s in source.modes.items():
        base = source.baseline.get(mode, {})
        rows.append([
            mode, _mode_labels(result, mode), f"{fmt_pct(s.precision)}{_dagger(source, mode, 'precision')}",
            f"{fmt_pct(s.recall)}{_dagger(source, mode, 'recall')}", fmt_pct(s.f1), f"{s.n_citations:.2f}",
            fmt_pct(s.no_citation), f"{s.length:.1f}", fmt_pct(s.correct), _ac(s.ac_relevant, s.n_ac_relevant),
            _ac(s.ac_nonrelevant, s.n_ac_nonrelevant), fmt_p(s.ac_p_value), fmt_pct(base.get("precision")),
            fmt_pct(base.get("recall")), f"{s.n_echo} / {s.n_empty}"])
    return md_table(head, rows)


def mode_tests_table(source: SourceSummary) -> str:
    """Paired t-test p-values of precision and recall between every two modes."""
    if not source.mode_tests:
        return "(one mode only.)"
    return md_table(["Modes", "p precision", "p recall"], [[pair, fmt_p(ps.get("precision")), fmt_p(ps.get("recall"))]
                                                           for pair, ps in source.mode_tests.items()])


def grid_table(result: BiasStudyResult, source: SourceSummary) -> str:
    """The mixed grid: each cell's precision and recall, then each contrast with its test and interval."""
    grid = source.grid
    if grid is None:
        return "(The mixed grid needs all four (relevant, non-relevant) label pairs: run with --mixed-grid.)"
    cells = []
    for key, cell in grid.cells.items():
        rel, nonrel = key.split("/")
        cells.append([f"{_side_name(result, rel)} / {_side_name(result, nonrel)}", str(cell["mode"]),
                      fmt_pct(cell["precision"]), fmt_pct(cell["recall"]), str(cell["n"])])
    contrasts = [[name, _stat(e.precision), fmt_p(e.precision.p_value), _ci(e.precision.ci), _stat(e.recall),
                  fmt_p(e.recall.p_value), _ci(e.recall.ci), _queries(e)] for name, e in grid.effects.items()]
    tables = [md_table(["Relevant / non-relevant labels", "Mode", "Precision", "Recall", "Queries"], cells),
              md_table([f"Contrast (+ = toward {_side_name(result, 'first')})", "precision", "p", "95 % CI", "recall",
                        "p", "95 % CI", "Queries"], contrasts)]
    return "\n\n".join(tables) + _no_p_notes([(f"{name} {metric}", e.stat(metric))
                                            for name, e in grid.effects.items() for metric in METRICS])


def _ci(ci: list[float] | None) -> str:
    return "–" if ci is None else f"[{fmt_pct(ci[0], 2)}, {fmt_pct(ci[1], 2)}]"


def _ac(value: float | None, n: int) -> str:
    return "–" if value is None else f"{fmt_pct(value)} (n={n})"


def cas_table(source: SourceSummary) -> str:
    if not source.cas:
        return "(CAS needs the vanilla mode and another mode.)"
    head = ["Mode vs vanilla", "CAS precision", "p", "95 % CI", "shift p", "CAS recall", "p", "95 % CI", "shift p",
            "Random CAS P", "Random CAS R", "Queries"]
    rows = [[mode, _stat(e.precision), fmt_p(e.precision.p_value), _ci(e.precision.ci),
             fmt_p(e.precision.shift_p_value), _stat(e.recall), fmt_p(e.recall.p_value), _ci(e.recall.ci),
             fmt_p(e.recall.shift_p_value), fmt_pct(e.precision.baseline, 2), fmt_pct(e.recall.baseline, 2),
             _queries(e)]
            for mode, e in source.cas.items()]
    return md_table(head, rows) + _no_p_notes([(f"CAS {metric}, {mode}", e.stat(metric))
                                            for mode, e in source.cas.items() for metric in METRICS])


#: Why a study has no CAB (table, figure or page): one line naming the option that runs the modes it needs.
NO_CAB = ("No CAB: it needs the informed and counterfactual modes; run them with --modes (the default runs both) "
          "or --mixed-grid.")


def cab_table(result: BiasStudyResult, source: SourceSummary) -> str:
    if source.cab is None:
        return f"({NO_CAB})"
    first = result.metadata["first"]
    e = source.cab
    head = ["ω", "CAB precision", "p", "95 % CI", "CAB recall", "p", "95 % CI", "Random CAB P", "Random CAB R",
            "Queries"]
    row = [f"{result.omega:+d}", _stat(e.precision), fmt_p(e.precision.p_value), _ci(e.precision.ci), _stat(e.recall),
           fmt_p(e.recall.p_value), _ci(e.recall.ci), fmt_pct(e.precision.baseline, 2), fmt_pct(e.recall.baseline, 2),
           _queries(e)]
    return (md_table(head, [row]) + _no_p_notes([(f"CAB {metric}", e.stat(metric)) for metric in METRICS])
            + f"\n\nPositive CAB = bias toward **{first}**.")


def side_by_side(result: BiasStudyResult) -> str:
    """The headline numbers, self-citation beside mirage."""
    srcs = [result.sources[s] for s in ("self", "mirage") if s in result.sources]
    lines = ["| | " + " | ".join(("Self-citation" if s.source == "self" else "MIRAGE") for s in srcs) + " |",
             "|---|" + "---|" * len(srcs)]
    modes = list(srcs[0].modes) if srcs else []

    def row(name: str, cells: list[str]) -> None:
        lines.append(f"| {name} | " + " | ".join(cells) + " |")

    for mode in modes:
        row(f"P / R, {mode}", [f"{fmt_pct(s.modes[mode].precision)} / {fmt_pct(s.modes[mode].recall)}" for s in srcs])
    for mode in srcs[0].cas if srcs else []:
        row(f"CAS P / R, {mode}", [f"{_stat(s.cas[mode].precision)} / {_stat(s.cas[mode].recall)}" for s in srcs])
    if srcs and srcs[0].cab is not None:
        row("CAB P / R", [f"{_stat(s.cab.precision)} / {_stat(s.cab.recall)}" if s.cab else "–" for s in srcs])
    return "\n".join(lines)


def _marks(cfg: dict[str, Any]) -> str:
    """How the study marked the documents' sentences, when it did (``sentence_mark``)."""
    mark = cfg.get("sentence_mark")
    return "" if not mark else f" (each sentence followed by `{mark.strip()}`)"


def render_markdown(result: BiasStudyResult) -> str:
    """The study's tables: per citation set, attribution quality per mode, CAS and CAB with significance."""
    md = result.metadata
    cfg = result.config
    out = [
        f"# Attribution sensitivity and bias: {result.model}",
        "",
        (f"Data `{result.data}`, {result.n_items} questions, k = {result.documents_text()} documents "
        f"({cfg.get('n_relevant', 1)} relevant){_asked_k(result)}, "
        f"documents: {cfg['docs']}{_marks(cfg)}, seed {cfg['seed']}.{_trained(result)} Metadata `{md['type']}`: "
        f"{md['first']} {md['first_labels']} vs {md['second']} {md['second_labels']}; ω = {result.omega:+d} "
        f"(relevant documents labelled {md[cfg['relevant_side']]} in the informed mode)."),
        "",
        ("Values are percentages. CAS = mean |M_mode − M_vanilla|; CAB = ω · mean (M_informed − M_counterfactual). "
        "CAS p: one-sided t-test that the mean absolute change exceeds 0 (shift p: the paired signed t-test); "
        "CAB and contrast p: paired t-test; 95 % CI: bootstrap over queries; * p < 0.05, ** p < 0.01; † differs from "
        "vanilla at p < 0.05 (paired t-test); AC p: Welch t-test of the confidence of citations to relevant vs "
        "non-relevant documents. Random: a citer that cites as many documents as the model, uniformly at random. "
        "MIRAGE's citations are computed on the same answers with the citation marks removed. A test with fewer "
        "than two query pairs or zero variance gives no p-value (–, with the reason below its table). Echo / "
        "empty: answers that mostly repeat the prompt's instruction or have no word; they count in the quality "
        "table, and CAS, CAB and the contrasts leave out the query pairs with one (Queries: used (left out))."),
        "",
        "## Side by side",
        "",
        side_by_side(result),
    ]
    if result.follow is not None:
        f = result.follow
        out += ["", "## Does the citation follow the relevant document?", "",
                (f"The vanilla answers of the questions with one relevant document among {f.k} ({f.n_answers} "
                 "answers), by the position the study gave that document (random per question): an answer follows "
                 "when its citations include the relevant document and at most one other. A citer that cites "
                 "document 1 whatever it read follows at position 1 only. Rates in %."),
                "", follow_table(f.rows(), f.k)]
    for key, source in result.sources.items():
        out += ["", f"## {SOURCE_TITLES.get(key, key)}", "", "### Attribution quality per mode", "",
                quality_table(result, source), "", "### Mode against mode (paired t-tests)", "",
                mode_tests_table(source), "", "### Attribution sensitivity (CAS)", "", cas_table(source), "",
                "### Attribution bias (CAB)", "", cab_table(result, source)]
        if source.grid is not None:
            out += ["", "### Mixed grid (relevant × non-relevant labels)", "", grid_table(result, source)]
    if result.explanations is not None:
        out += ["", "## Explanations (what the model says about its citations, `--explain`)", "",
                render_explanations(result.explanations)]
    return "\n".join(out) + "\n"


def _trained(result: BiasStudyResult) -> str:
    """How many of the data's questions the model records it was trained on, left out or kept, when it records
    them (a model mirage tuned)."""
    if result.trained_questions_left_out == 0:
        return f" None of these questions is one {result.model} records it was trained on."
    if result.trained_questions_left_out is not None:
        return (f" {result.trained_questions_left_out} more questions of the data are left out: {result.model} was "
                "trained on them (`--keep-trained-questions` keeps them).")
    if result.trained_questions_kept is not None:
        return (f" {result.trained_questions_kept} of the questions are ones {result.model} was trained on, kept by "
                "`--keep-trained-questions`.")
    return ""


def _asked_k(result: BiasStudyResult) -> str:
    """``; k = 1000 was asked, …`` when the questions had another number of documents than the configured k."""
    k = result.config.get("k")
    if result.documents and result.documents != [k, k]:
        return f"; k = {k} was asked, and the items hold {result.documents_text()}"
    return ""


def has_cab(result: BiasStudyResult) -> bool:
    """Whether some citation set of the study has a CAB (it ran the informed and counterfactual modes)."""
    return any(s.cab is not None for s in result.sources.values())


def plot_cab(results: Sequence[BiasStudyResult]) -> Any:
    """A bar chart of CAB (precision and recall; self-citation and MIRAGE) per model and metadata type, stars for
    p < 0.05. Returns a matplotlib Figure (not shown), or None when no study has a CAB (:func:`has_cab`) defined
    over some query pair: there is nothing to draw."""
    from matplotlib.figure import Figure

    results = [r for r in results if any(s.cab is not None and any(s.cab.stat(m).value is not None for m in METRICS)
                                         for s in r.sources.values())]
    if not results:
        return None
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
            stat = effect.stat(metric) if effect is not None else None
            if stat is None or stat.value is None:
                continue
            xs.append(i - 0.4 + width * (j + 0.5))
            ys.append(100 * stat.value)
            ps.append(stat.p_value)
        label = f"{'self-citation' if source == 'self' else 'MIRAGE'} {metric}"
        ax.bar(xs, ys, width, color=colour, hatch=hatch, edgecolor="black", linewidth=0.5, label=label)
        for x, y, p in zip(xs, ys, ps):
            ax.annotate(f"{y:.1f}{stars(p)}", (x, y), ha="center", va="bottom" if y >= 0 else "top", fontsize=7)
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


def _rate(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}"


def follow_table(rows: Sequence[tuple[str, FollowSide]], k: int) -> str:
    """Citers' :class:`FollowSide` rows as a markdown table (rates in %), positions 1…``k``."""
    head = ["citer", "follows", *[f"pos {p}" for p in range(1, k + 1)], "[1] when not supporting", "docs cited",
            "P", "R", "F1"]
    cells = []
    for name, side in rows:
        cited = "—" if side.mean_cited is None else f"{side.mean_cited:.2f}"
        cells.append([name, _rate(side.follow_rate), *[_rate(v) for v in side.per_position],
                      _rate(side.first_when_not_supporting), cited, _rate(side.precision), _rate(side.recall),
                      _rate(side.f1)])
    return md_table(head, cells)
