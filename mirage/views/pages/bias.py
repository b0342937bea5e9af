"""The results pages of ``mirage bias``: one attribution-sensitivity and bias study (``results.json``; the command
rebuilt from its settings, its ``--limit`` found from its questions where that is exact), the protocol's overview
(``protocol.json``), a sweep over one setting (``sweep.json``) and the comparison of retrievers
(``retrievers.json``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from mirage.data.inputs import InputError
from mirage.options import option_flag, options_argv
from mirage.runs.files import portable_command
from mirage.views.pages.core import (
    cell,
    code,
    command_section,
    data_names,
    data_section,
    link,
    md_table,
    named_data,
    page,
    plots_section,
    read_json,
    settings_section,
    text,
    versions_section,
)
from mirage.views.pages.kinds import PageKind, as_list, has_keys, no_data, pipeline_flags_of, results_of

__all__ = [
    "BIAS_PROTOCOL_PAGE",
    "BIAS_RETRIEVERS_PAGE",
    "BIAS_STUDY_PAGE",
    "BIAS_SWEEP_PAGE",
    "bias_study_command",
]


def _retriever_of(run_dir: Path) -> tuple[str, int] | None:
    """The retriever (and its ``--top-k``) of a study that ``mirage bias --retriever`` wrote into DIR/NAME/: the
    parent folder's ``retrievers.json`` names this folder as one of its runs."""
    path = run_dir.parent / "retrievers.json"
    raw = read_json(path) if path.is_file() else None
    if not isinstance(raw, dict):
        return None
    run = (raw.get("runs") or {}).get(run_dir.name)
    if not isinstance(run, dict) or run.get("run") != f"{run_dir.name}/run.trec":
        return None
    return str(run.get("retriever", run_dir.name)), int(raw.get("top_k", 100))


def _bias_limit(run_dir: Path, res: Mapping[str, Any]) -> tuple[int | None, bool]:
    """``(limit, known)``: the ``--limit`` a bias study ran with, which its results do not record, found from the
    results where that is exact: the study's questions (``n_items``; their ids in ``items.jsonl``, else those its
    shipped generations answered, ``generations.jsonl.gz``) against the
    questions its data and settings give without a limit (:func:`mirage.bias.study.build_items`, the non-relevant
    documents as retrieved: RAGE's replace them after the limit, keeping the questions). No limit where they are
    all of them; ``n_items`` where they are the first ``n_items``; unknown where the data is not here, the ids are
    not recorded or the questions are not a first part. Questions left out because the model was trained on them
(``trained_questions_left_out``) count among those the limit built."""
    import contextlib
    import dataclasses
    import io

    from mirage.bias.items import read_bias_items
    from mirage.bias.protocol import BiasConfig
    from mirage.bias.study import build_items
    from mirage.data import resolve
    from mirage.runs.store import read_records

    n = res.get("n_items")
    names = {f.name for f in dataclasses.fields(BiasConfig)}
    settings: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in (res.get("config") or {}).items()
                                if k in names}
    try:
        cfg = dataclasses.replace(BiasConfig(**settings), docs="retrieved")
        run = run_dir / "run.trec" if _retriever_of(run_dir) else None
        with contextlib.redirect_stderr(io.StringIO()):  # its notes on skipped rows are the run's, not the page's
            given = str(res.get("data"))  # the recorded path, or the dataset its data_names.json says it is
            every = [item.id for item in build_items(str(resolve(data_names(run_dir).get(given, given))), cfg,
                                                     run=run)]
        ids = ([item.id for item in read_bias_items(run_dir / "items.jsonl")]
               if (run_dir / "items.jsonl").is_file() else None)
        in_order = ids is not None
        if ids is None:  # the questions its generations answered (a store's records are in the order they finished)
            ids = list(dict.fromkeys(str(r.get("item_id")) for r in read_records(run_dir / "generations.jsonl.gz")
                                     if r.get("item_id") is not None)) or None
    except (InputError, OSError, TypeError, ValueError):
        return None, False
    # the study built the first ``built`` questions and then left out those its model was trained on
    built = n + int(res.get("trained_questions_left_out") or 0) if isinstance(n, int) else n

    def kept_of(first: list[str]) -> bool:  # the recorded ids are ``first`` less the left-out ones (in order)
        if ids is None or len(ids) != n:
            return False
        if not in_order:
            return set(ids) <= set(first)
        rest = iter(first)
        return all(i in rest for i in ids)

    if built == len(every) and (ids is None or kept_of(every)):
        return None, True
    if kept_of(every[:built]):
        return built, True
    return None, False


def bias_study_command(run_dir: Path, res: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The command rebuilt from a bias study's results, and the options it needs that they do not record: the flags
    of the fields of :class:`~mirage.runs.experiment.ExperimentConfig` and :class:`~mirage.bias.cli.BiasRunOptions`
    its folder and results give, then of each setting of its :class:`~mirage.bias.protocol.BiasConfig` (in the
    order the results record them) that is not the default, then the pipeline's."""
    from mirage.bias.cli import BiasRunOptions
    from mirage.bias.protocol import BiasConfig
    from mirage.config import GenerationConfig, MirageConfig
    from mirage.runs.experiment import ExperimentConfig

    retriever = _retriever_of(run_dir)
    limit, known = _bias_limit(run_dir, res)
    values = {"data": named_data(run_dir, str(res.get("data"))), "model": str(res.get("model")), "limit": limit,
              "retriever": [retriever[0]] if retriever else None,
              "top_k": retriever[1] if retriever and retriever[1] != 100 else None, "output": "DIR"}
    argv = ["bias", *options_argv(ExperimentConfig, values, ["data", "model"]),
            *options_argv(BiasRunOptions, values, ["retriever", "top_k"]),
            *options_argv(ExperimentConfig, values, ["limit"])]
    names = {f.name for f in fields(BiasConfig)}
    config = res.get("config") or {}
    for name, value in config.items():
        if name not in names:  # a setting of an older mirage
            continue
        if name == "labels" and isinstance(value, (list, tuple)):  # --labels takes each pool comma-separated
            value = [",".join(v) if isinstance(v, (list, tuple)) else v for v in value]
        # the study's seed is the pipeline's --seed (it seeds generation too)
        owner = GenerationConfig if name == "seed" else BiasConfig
        argv += options_argv(owner, {name: value}, [name], changed=True, defaults=BiasConfig())
    seed = option_flag(GenerationConfig, "seed")  # given above, from the study's seed
    argv += pipeline_flags_of(res.get("mirage_config") or {}, MirageConfig().to_dict(), (seed,))
    return portable_command([*argv, *options_argv(BiasRunOptions, values, ["output"])]), [] if known else [
        option_flag(ExperimentConfig, "limit")]


def _bias_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.bias.results import BiasStudyResult
    from mirage.bias.tables import render_markdown

    raw = results_of(run_dir) or {}
    result = BiasStudyResult.from_dict(raw)
    tables = render_markdown(result).split("\n", 1)[1]  # its own title is the page's
    command, missing = bias_study_command(run_dir, raw)
    return page(f"Attribution sensitivity and bias: {text(result.model)}, {text(result.metadata.get('type'))}",
                "Written by `mirage bias` (`results.json`; `tables.md` holds the same tables).",
                [tables.strip(), plots_section(run_dir), settings_section(result.config),
                 settings_section(result.mirage_config or {}, "Pipeline"), data_section(run_dir, [str(result.data)]),
                 versions_section(result.versions), command_section(run_dir, command, missing=missing),
                 *tail(run_dir)])


def _protocol_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.bias.full_protocol import OverviewRow, overview_table, withdrawn_text

    rows = [OverviewRow.from_dict(r) for r in read_json(run_dir / "protocol.json")]
    gone = withdrawn_text(run_dir)
    models = sorted({r.model for r in rows})
    links = "\n".join(f"- {link(code(r.study), f'{r.study}/README.md')}" for r in rows if (run_dir / r.study).is_dir())
    return page("Attribution-bias protocol: overview",
                f"{len(rows)} finished studies (model: {text(', '.join(models)) or '–'}), a row per citation source. "
                "Percentages; CAS = mean |change| of precision against vanilla, CAB = ω · mean (informed − "
                "counterfactual); * p < 0.05, ** p < 0.01 by each study's tests. Written by `mirage bias-protocol` "
                "(`protocol.json`, `protocol.md`).",
                ["## Overview\n\n" + overview_table(rows), "## Withdrawn\n\n" + gone if gone else None,
                 "## Studies\n\n" + links if links else None, command_section(run_dir, None), *tail(run_dir)])


def _sweep_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.bias.sweep import SweepResult

    sweep = SweepResult.from_dict(read_json(run_dir / "sweep.json"))

    def pct(x: float | None) -> str:
        return "–" if x is None else f"{100 * x:.1f}"

    def effect(e: Any) -> str:
        if e is None:
            return "–"
        stars = "" if e.precision.p_value is None else "**" if e.precision.p_value < 0.01 else (
            "*" if e.precision.p_value < 0.05 else "")
        return f"{pct(e.precision.value)}{stars}"

    rows = []
    for p in sweep.points:
        for name, src in p.sources.items():
            van = src.modes.get("vanilla", {})
            rows.append((link(text(p.value), f"{p.run_dir}/README.md"), p.n_items, cell(name),
                         pct(van.get("precision")), pct(van.get("recall")), cell(van.get("n_citations"), 2),
                         effect(src.cab)))
    return page(f"Bias sweep over {code(sweep.parameter)}: {text(sweep.model)}",
                f"Metadata {text(sweep.metadata.get('first'))} vs {text(sweep.metadata.get('second'))}; "
                "one study per value (its folder has the full tables). Percentages; * p < 0.05, ** p < 0.01. "
                "Written by `mirage bias --sweep` (`sweep.json`).",
                ["## Sweep\n\n" + md_table([cell(sweep.parameter), "questions", "source", "P vanilla", "R vanilla",
                                             "citations per answer", "CAB P"], rows),
                 plots_section(run_dir), settings_section({k: v for k, v in sweep.config.items() if v is not None}),
                 data_section(run_dir, [sweep.data]), versions_section(sweep.versions),
                 command_section(run_dir, None), *tail(run_dir)])


def _retrievers_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.bias.retrievers_study import RetrieverComparison, render_retrievers

    comparison = RetrieverComparison.from_dict(read_json(run_dir / "retrievers.json"))
    title, body = render_retrievers(comparison).split("\n", 1)
    return page(title.lstrip("# "), "Written by `mirage bias --retriever` (`retrievers.json`).\n" + body.rstrip(),
                [settings_section({"top_k": comparison.top_k, "k": comparison.k}),
                 data_section(run_dir, [comparison.data]), versions_section(comparison.versions),
                 command_section(run_dir, None), *tail(run_dir)])


#: The pages of ``mirage bias``'s folders.
BIAS_STUDY_PAGE = PageKind("bias-study", has_keys("sources", "metadata", "config"),
                           lambda d: as_list((results_of(d) or {}).get("data")), _bias_render)
BIAS_PROTOCOL_PAGE = PageKind("bias-protocol", lambda d: (d / "protocol.json").is_file(), no_data, _protocol_render,
                              "protocol.json")
BIAS_SWEEP_PAGE = PageKind("bias-sweep", lambda d: (d / "sweep.json").is_file(),
                           lambda d: as_list(read_json(d / "sweep.json").get("data")), _sweep_render, "sweep.json")
BIAS_RETRIEVERS_PAGE = PageKind("bias-retrievers", lambda d: (d / "retrievers.json").is_file(),
                                lambda d: as_list(read_json(d / "retrievers.json").get("data")), _retrievers_render,
                                "retrievers.json")
