"""Sweeps: the study run once per value of one config field, e.g. the number of documents per question ``k`` (the
attribution-bias paper's Fig. 9) or the RAGE mixture's proportions (``rage_similar`` seemingly relevant documents
against random ones, ``n_relevant`` relevant ones), each run in its own folder, resumable as every study is:

    DIR/<field><value>/   one study (items.jsonl, generations.jsonl, results.json, tables.md, cab.png), e.g. DIR/k5/
    DIR/sweep.json        the SweepResult: per value and citation source (self, mirage), precision, recall and
                          average citations per answer per mode, CAS per mode and CAB with their p-values
    DIR/sweep.png         CAS, CAB, average citations and quality against the swept value, self-citation beside mirage
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirage.attribution.serialization import JSONRecord, library_versions
from mirage.bias.metrics import METRICS, Effect
from mirage.bias.protocol import BiasConfig
from mirage.bias.results import BiasStudyResult, SourceSummary
from mirage.bias.study import run_bias_study
from mirage.config import ConfigError
from mirage.runs.files import RESULTS_FILE
from mirage.runs.lazy import MirageSource

__all__ = ["SweepResult", "parse_sweep", "point_dir", "run_bias_sweep", "summarize_sweep_dir", "sweep_configs"]

SWEEP_FORMAT = 1

#: The config fields a sweep can vary (integers), with the axis label of the plot.
SWEEP_FIELDS: dict[str, str] = {
    "k": "documents per question (k)",
    "n_relevant": "relevant documents per question",
    "rage_similar": "seemingly relevant documents (RAGE)",
    "max_doc_words": "words per document (at most)",
    "seed": "seed",
}


def parse_sweep(spec: Sequence[str]) -> tuple[str, list[int]]:
    """``FIELD VALUE [VALUE ...]`` (``mirage bias --sweep``) as (field, integer values); ConfigError otherwise."""
    if len(spec) < 2:
        raise ConfigError(f"--sweep {' '.join(spec)}: give a field and its values, e.g. --sweep k 2 5 8 10.")
    name, *texts = spec
    try:
        values = [int(t) for t in texts]
    except ValueError:
        raise ConfigError(f"--sweep {name}: the values {texts} must be integers.") from None
    return name, values


def sweep_configs(cfg: BiasConfig, parameter: str, values: Sequence[int]) -> list[BiasConfig]:
    """``cfg`` with ``parameter`` set to each of ``values``, each checked (a ConfigError names the failing value),
    so that a bad point fails before any model loads."""
    if parameter not in SWEEP_FIELDS:
        raise ConfigError(f"bias sweep over {parameter!r}: choose one of {', '.join(SWEEP_FIELDS)}.")
    if not values:
        raise ConfigError(f"bias sweep over {parameter}: give at least one value.")
    if len(set(values)) != len(values):
        raise ConfigError(f"bias sweep over {parameter}: the values {list(values)} repeat one.")
    out = []
    for value in values:
        try:
            point: dict[str, Any] = {parameter: value}  # a field named at run time (SWEEP_FIELDS)
            out.append(dataclasses.replace(cfg, **point))
        except ConfigError as err:
            raise ConfigError(f"bias sweep point {parameter}={value}: {err}") from None
    return out


def point_dir(parameter: str, value: int) -> str:
    """The folder of one sweep point inside the sweep's folder: ``k5``, ``rage_similar2``."""
    return f"{parameter}{value}"


@dataclass
class SweepSource:
    """One citation set at one sweep point: per mode its mean ``precision``, ``recall``, ``n_citations`` (average
    distinct citations per answer) and ``no_citation`` (share of answers without one), in [0, 1] but citations;
    CAS per non-vanilla mode and CAB, each with precision/recall values, p-values and the random citer's value."""

    modes: dict[str, dict[str, float]]
    cas: dict[str, Effect]
    cab: Effect | None

    @classmethod
    def from_summary(cls, summary: SourceSummary) -> SweepSource:
        modes = {m: {"precision": s.precision, "recall": s.recall, "n_citations": s.n_citations,
                     "no_citation": s.no_citation} for m, s in summary.modes.items()}
        return cls(modes=modes, cas=dict(summary.cas), cab=summary.cab)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepSource:
        return cls(modes=data["modes"], cas={m: Effect.from_dict(e) for m, e in data["cas"].items()},
                   cab=Effect.from_dict(data["cab"]) if data.get("cab") else None)


@dataclass
class SweepPoint:
    """One value of the swept field: its run's folder (relative to the sweep's), items and per-source summary."""

    value: int
    run_dir: str
    n_items: int
    sources: dict[str, SweepSource]

    @classmethod
    def from_result(cls, value: int, run_dir: str, result: BiasStudyResult) -> SweepPoint:
        return cls(value=value, run_dir=run_dir, n_items=result.n_items,
                   sources={s: SweepSource.from_summary(summary) for s, summary in result.sources.items()})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepPoint:
        return cls(value=data["value"], run_dir=data["run_dir"], n_items=data["n_items"],
                   sources={s: SweepSource.from_dict(v) for s, v in data["sources"].items()})


@dataclass
class SweepResult(JSONRecord):
    """A sweep: the field varied (``parameter``), the config of every point but that field (null here; each point's
    ``results.json`` holds its whole config), the metadata type's sides and one :class:`SweepPoint` per value, in
    the order run."""

    parameter: str
    model: str
    data: str
    config: dict[str, Any]
    metadata: dict[str, Any]
    points: list[SweepPoint]
    versions: dict[str, str] = field(default_factory=dict)
    format: int = SWEEP_FORMAT

    @property
    def values(self) -> list[int]:
        return [p.value for p in self.points]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepResult:
        data = cls.known_fields(data)
        data["points"] = [SweepPoint.from_dict(p) for p in data["points"]]
        return cls(**data)



def summarize_sweep(parameter: str, cfg: BiasConfig, results: Sequence[tuple[int, BiasStudyResult]],
                    ) -> SweepResult:
    """The sweep result of the studies ``(value, result)`` run with ``cfg``'s ``parameter`` set to each value."""
    if not results:
        raise ValueError("a sweep needs at least one study result.")
    first = results[0][1]
    config = json.loads(json.dumps(cfg.to_dict()))
    config[parameter] = None
    return SweepResult(
        parameter=parameter, model=first.model, data=first.data, config=config,
        metadata={k: first.metadata[k] for k in ("type", "first", "second") if k in first.metadata},
        points=[SweepPoint.from_result(v, point_dir(parameter, v), r) for v, r in results],
        versions=library_versions())


def run_bias_sweep(data: str, *, mirage: MirageSource, cfg: BiasConfig, parameter: str, values: Sequence[int],
                   output_dir: str | Path, **study_options: Any) -> SweepResult | None:
    """Run the study (:func:`~mirage.bias.study.run_bias_study`, with ``study_options``: limit, split, rewriter,
    progress, compare, embed, ...) once per value of ``parameter`` into ``DIR/<parameter><value>/``, then write
    ``DIR/sweep.json`` and ``DIR/sweep.png``. Every point's config is checked before any runs; the model is loaded
    once (a loader given as ``mirage`` is called once); the RAGE embedder too. A re-run resumes each point. Under a
    launcher every rank runs its share of each point and rank 0 returns the result, other ranks None."""
    configs = sweep_configs(cfg, parameter, values)
    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if callable(mirage) and not hasattr(mirage, "lm"):
        mirage = functools.cache(mirage)
    if cfg.docs == "rage" and study_options.get("embed") is None:
        from mirage.bias.rage import load_embedder

        study_options["embed"] = load_embedder(cfg.rage_embedder)
    results: list[tuple[int, BiasStudyResult]] = []
    for value, point_cfg in zip(values, configs):
        result = run_bias_study(data, mirage=mirage, cfg=point_cfg, output_dir=out_dir / point_dir(parameter, value),
                                **study_options)
        if result is not None:
            results.append((value, result))
    if len(results) != len(configs):  # one rank of several: rank 0 summarizes
        return None
    sweep = summarize_sweep(parameter, cfg, results)
    write_sweep(sweep, out_dir)
    return sweep


def write_sweep(sweep: SweepResult, out_dir: str | Path) -> None:
    """``sweep.json`` and ``sweep.png`` in ``out_dir``."""
    out_dir = Path(out_dir)
    sweep.save(out_dir / "sweep.json")
    plot_sweep(sweep).savefig(out_dir / "sweep.png", dpi=120)



def summarize_sweep_dir(out_dir: str | Path, *, without: Sequence[str] = ()) -> SweepResult | None:
    """A sweep folder's ``sweep.json`` and ``sweep.png`` written again (:func:`summarize_sweep`) from its points'
    ``results.json``, as they are now (after :func:`~mirage.bias.study.summarize_run` rewrote them), less the points
    whose folders ``without`` names (withdrawn: None, and nothing written, when that is every point); its settings
    from the ``sweep.json`` there. InputError for a folder without one, or a point without results."""
    from mirage.data.inputs import InputError

    out_dir = Path(out_dir)
    if not (out_dir / "sweep.json").is_file():
        raise InputError(f"{out_dir} has no sweep.json; give the output folder of a `mirage bias --sweep` run.")
    old = SweepResult.load(out_dir / "sweep.json")
    if not old.points:
        raise InputError(f"{out_dir}/sweep.json has no points; run the sweep again.")
    results = []
    points = [p for p in old.points if p.run_dir not in without]
    if not points:
        return None
    for point in points:
        path = out_dir / point.run_dir / RESULTS_FILE
        if not path.is_file():
            raise InputError(f"{out_dir}: sweep point {point.run_dir}/ has no results.json; run the sweep again.")
        results.append((point.value, BiasStudyResult.load(path)))
    cfg = BiasConfig.from_dict({**old.config, old.parameter: points[0].value})
    sweep = summarize_sweep(old.parameter, cfg, results)
    write_sweep(sweep, out_dir)
    return sweep


# -- the figure -------------------------------------------------------------------------------------------------------

SOURCE_NAMES = {"self": "self-citation", "mirage": "MIRAGE"}
SOURCE_COLOURS = {"self": "#4c72b0", "mirage": "#dd8452"}
MODE_STYLES = ("-", "--", ":", "-.")


def _series(ax: Any, xs: Sequence[int], ys: Sequence[float | None], ps: Sequence[float | None], *, colour: str,
            style: str, label: str) -> None:
    """One line; its markers filled where p < 0.05 and hollow elsewhere (no p-value: hollow)."""
    nan = float("nan")
    values = [nan if y is None else y for y in ys]
    ax.plot(xs, values, linestyle=style, color=colour, label=label)
    significant = [p is not None and p < 0.05 for p in ps]
    for x, y, sig in zip(xs, values, significant):
        ax.plot([x], [y], marker="o", color=colour, markerfacecolor=colour if sig else "white", markersize=5)


def plot_sweep(sweep: SweepResult) -> Any:
    """CAS (precision, recall; per mode) and CAB against the swept value, the average number of citations per
    answer per mode, and precision (solid) and recall (dashed) in the first mode; self-citation and MIRAGE in two
    colours, modes in line styles, filled markers for p < 0.05. Returns a matplotlib Figure (not shown)."""
    from matplotlib.figure import Figure

    xs = sweep.values
    fig = Figure(figsize=(14, 8), layout="constrained")
    axes = fig.subplots(2, 3)
    sources = [s for s in SOURCE_NAMES if all(s in p.sources for p in sweep.points)]
    modes = list(dict.fromkeys(m for p in sweep.points for s in p.sources.values() for m in s.modes))
    cas_modes = [m for m in modes if m != "vanilla"]
    style = {m: MODE_STYLES[i % len(MODE_STYLES)] for i, m in enumerate(modes)}
    first = sweep.metadata.get("first", "first label")
    for col, metric in enumerate(METRICS):
        ax = axes[0][col]
        for source in sources:
            for mode in cas_modes:
                stats = [p.sources[source].cas[mode].stat(metric) if mode in p.sources[source].cas else None
                         for p in sweep.points]
                _series(ax, xs, [None if s is None or s.value is None else 100 * s.value for s in stats],
                        [None if s is None else s.p_value for s in stats], colour=SOURCE_COLOURS[source],
                        style=style[mode], label=f"{SOURCE_NAMES[source]}, {mode}")
        if not cas_modes or "vanilla" not in modes:
            ax.text(0.5, 0.5, "no CAS: the runs have no vanilla mode", transform=ax.transAxes, ha="center")
        ax.set_title(f"CAS, {metric}: |mode − vanilla|", fontsize=10)
        ax.set_ylabel("CAS (%)")
        ax = axes[1][col]
        for source in sources:
            cabs = [p.sources[source].cab for p in sweep.points]
            _series(ax, xs, [None if c is None or (v := c.stat(metric).value) is None else 100 * v for c in cabs],
                    [None if c is None else c.stat(metric).p_value for c in cabs], colour=SOURCE_COLOURS[source],
                    style="-", label=f"{SOURCE_NAMES[source]}, CAB")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_title(f"CAB, {metric}: informed − counterfactual (+ = toward {first})", fontsize=10)
        ax.set_ylabel("CAB (%)")
    ax = axes[0][2]
    for source in sources:
        for mode in modes:
            ys = [p.sources[source].modes[mode]["n_citations"] if mode in p.sources[source].modes else None
                  for p in sweep.points]
            _series(ax, xs, ys, [None] * len(xs), colour=SOURCE_COLOURS[source], style=style[mode],
                    label=f"{SOURCE_NAMES[source]}, {mode}")
    ax.set_title("average citations per answer", fontsize=10)
    ax.set_ylabel("distinct documents cited")
    ax = axes[1][2]
    if modes:
        for source in sources:
            for metric, line in zip(METRICS, ("-", "--")):
                ys = [100 * p.sources[source].modes[modes[0]][metric] if modes[0] in p.sources[source].modes
                      else None for p in sweep.points]
                _series(ax, xs, ys, [None] * len(xs), colour=SOURCE_COLOURS[source], style=line,
                        label=f"{SOURCE_NAMES[source]}, {metric}")
        ax.set_title(f"precision (solid) and recall (dashed), {modes[0]}", fontsize=10)
        ax.legend(fontsize=7)
    ax.set_ylabel("%")
    pad = 0.05 * (max(xs) - min(xs)) if len(xs) > 1 else 0.5
    for ax in axes.flat:
        ax.set_xlim(min(xs) - pad, max(xs) + pad)
        ax.set_xticks(xs)
        ax.set_xlabel(SWEEP_FIELDS.get(sweep.parameter, sweep.parameter))
        ax.grid(alpha=0.3)
    handles, labels = axes[0][2].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4) or 1, fontsize=8)
    fig.suptitle(f"{sweep.model}, {sweep.metadata.get('type', '')}: filled markers p < 0.05", fontsize=11)
    return fig
