"""One page writer per kind of results: each :class:`PageKind` says how to recognise its folder (``detect``), which
data the results name (``data``) and how to write the page (``render``), from the folder's files alone (no model, no
data). The tables come from the writers the runs already use (:mod:`mirage.scoring.tables`,
:mod:`mirage.bias.tables`, :mod:`mirage.bias.full_protocol`, :mod:`mirage.bias.retrievers_study`); figures are
formatted here only where no such writer exists (tuning runs, benchmark JSONs)."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mirage.config import flags_for_changed_defaults
from mirage.data.inputs import InputError
from mirage.runs.files import portable_command
from mirage.views.pages.core import (
    cell,
    code,
    command_section,
    data_section,
    fenced,
    files_section,
    gib,
    link,
    md_table,
    page,
    plots_section,
    read_json,
    registered_name,
    settings_section,
    text,
    versions_section,
)

RESULTS = "results.json"
#: A self-match check's counts (``mirage.scoring.benchmarks.SELF_MATCH_FILE``).
SELF_MATCH = "self_match.json"


@dataclass(frozen=True)
class PageKind:
    """A kind of results folder: ``detect(dir)``, ``data(dir)`` (the data paths or names the results record) and
    ``render(dir, sections)`` (the page's text; ``sections(dir)`` gives the shared tail: folders, files); ``files``:
    the file(s) of the folder the page is written from, as an error names them."""

    name: str
    detect: Callable[[Path], bool]
    data: Callable[[Path], list[str]]
    render: Callable[[Path, Callable[[Path], list[str | None]]], str]
    files: str = RESULTS


def _results(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / RESULTS
    if not path.is_file():
        return None
    value = read_json(path)
    return value if isinstance(value, dict) else None


def _has_keys(*keys: str) -> Callable[[Path], bool]:
    def detect(run_dir: Path) -> bool:
        res = _results(run_dir)
        return res is not None and all(k in res for k in keys)

    return detect


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def pipeline_flags_of(config: Mapping[str, Any], base: Mapping[str, Any], skip: Sequence[str] = ()) -> list[str]:
    """The pipeline flags that turn the pipeline ``base`` into ``config`` (both as ``MirageConfig.to_dict()``)."""
    from mirage.runs.experiment import pipeline_flags

    out: list[str] = []
    for section, f, _kind in pipeline_flags():
        flag = f.metadata["flag"]
        value = config.get(section, {}).get(f.name)
        if flag in skip or f.name not in config.get(section, {}) or value == base.get(section, {}).get(f.name):
            continue
        if isinstance(value, bool):
            out += [flag] if value else []
        elif value is not None:
            out += [flag, str(value)]
    return out


# -- XOR-AttriQA ---------------------------------------------------------------------------------------------------------

XOR_SKIP = ("--cci-top-k", "--cci-top-percent", "--cti-threshold", "--max-citations", "--max-new-tokens", "--sample",
            "--temperature", "--top-p", "--seed")


def _xor_data(run_dir: Path) -> list[str]:
    s = (_results(run_dir) or {}).get("settings", {})
    return _as_list(s.get("data")) + _as_list(s.get("calibrate_on"))


def _xor_command(s: Mapping[str, Any]) -> str:
    from mirage.scoring.xor_attriqa import xor_attriqa_pipeline

    argv = ["score", "xor-attriqa", *map(registered_name, _as_list(s.get("data"))), "--model", str(s.get("model")),
            "--text", str(s.get("text", "en"))]
    if s.get("calibrate_on"):
        argv += ["--calibrate-on", *map(registered_name, _as_list(s["calibrate_on"]))]
    if s.get("calibrate_by", "global") != "global":
        argv += ["--calibrate-by", s["calibrate_by"]]
    if s.get("limit") is not None:
        argv += ["--limit", str(s["limit"])]
    groups = s.get("groups")
    if groups and sorted(groups) != ["cal", "ex", "learned"]:
        argv += ["--settings", *groups]
    argv += ["--all-tokens"] if s.get("all_tokens") else []
    argv += ["--group-passages"] if s.get("group_passages") else []
    argv += ["--reuse-from", str(s["reuse_from"])] if s.get("reuse_from") else []
    argv += ["--keep-trained-questions"] if s.get("trained_questions_kept") is not None else []
    argv += pipeline_flags_of(s.get("config", {}), xor_attriqa_pipeline().to_dict(), XOR_SKIP)
    argv += flags_for_changed_defaults("xor-attriqa", s.get("config", {}), " ".join(argv))
    return portable_command([*argv, "-o", "DIR"])


def _xor_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.scoring.faithfulness import FaithfulnessSummary
    from mirage.scoring.tables import xor_table
    from mirage.scoring.xor_eval import XorAttriQAReport

    raw = _results(run_dir) or {}
    report = XorAttriQAReport.from_dict(raw)
    s = report.settings
    counts = report.counts.get("all", {})
    tables = [fenced(xor_table(report))]
    if s.get("self_match"):
        tables.append("Self-match (a one-pass check: the paper's Algorithm 1 without its beam search and its "
                      "reshuffled passage orders): only the rows where the model generated the annotated answer once, "
                      "greedily, in the file's passage order, were scored, its own generation attributed:\n\n" + _self_match_table(s["self_match"]))
    if report.faithfulness:
        tables.append(fenced(FaithfulnessSummary.from_dict(report.faithfulness).to_text()))
    features = report.features or {}
    if features.get("roc_auc"):
        langs = [*report.languages, "avg"]
        rows = [(code(name), *[cell(v.get(lang), 3) for lang in langs]) for name, v in features["roc_auc"].items()]
        tables.append("Per-passage ROC-AUC of each feature of the learned setting (the passage score is "
                      f"{code(features.get('passage_score'))}):\n\n"
                      + md_table(["feature", *map(cell, langs)], rows))
    return page(
        f"XOR-AttriQA: {text(s.get('model'))}, {text(s.get('text', 'en'))} view",
        f"{text(counts.get('items', 0))} answers, {text(counts.get('pairs', 0))} (answer, passage) pairs, "
        f"{text(counts.get('supporting', 0))} supporting; languages {text(', '.join(report.languages))}. Written by "
        "`mirage score xor-attriqa` (`results.json`).",
        ["## Tables\n\n" + "\n\n".join(tables), plots_section(run_dir),
         settings_section({k: v for k, v in s.items() if k not in ("config", "self_match")}),
         settings_section(s.get("config", {}), "Pipeline"), data_section(run_dir, _xor_data(run_dir)),
         versions_section(report.versions),
         command_section(run_dir, _xor_command(s),
                         lambda command: flags_for_changed_defaults("xor-attriqa", s.get("config", {}), command)),
         *tail(run_dir)])


# -- ELI5 ----------------------------------------------------------------------------------------------------------------


def _eli5_data(run_dir: Path) -> list[str]:
    return _as_list((_results(run_dir) or {}).get("settings", {}).get("data"))


def _eli5_command(s: Mapping[str, Any]) -> str:
    from mirage.config import MirageConfig

    argv = ["score", "eli5", *map(registered_name, _as_list(s.get("data"))), "--model", str(s.get("model"))]
    if s.get("seeds"):
        argv += ["--seeds", *[str(x) for x in s["seeds"]]]
    if s.get("ndocs", 5) != 5:
        argv += ["--ndocs", str(s["ndocs"])]
    if s.get("at_most_citations", 3) != 3:
        argv += ["--at-most-citations", str(s["at_most_citations"])]
    if s.get("limit") is not None:
        argv += ["--limit", str(s["limit"])]
    argv += ["--keep-trained-questions"] if s.get("trained_questions_kept") is not None else []
    argv += pipeline_flags_of(s.get("config", {}), MirageConfig().to_dict(), ("--seed",))
    return portable_command([*argv, "-o", "DIR"])


def _eli5_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.scoring.eli5 import ELI5Report
    from mirage.scoring.faithfulness import FaithfulnessSummary
    from mirage.scoring.tables import eli5_table

    report = ELI5Report.from_dict(_results(run_dir) or {})
    s = report.settings
    tables = [fenced(eli5_table(report))]
    if report.faithfulness:
        tables.append(fenced(FaithfulnessSummary.from_dict(report.faithfulness).to_text()))
    bins = report.length_bins or {}
    if bins.get("bins"):
        rows = [(cell(b), cell(n), *[cell(bins["cited_pct"][src][i]) for src in bins["cited_pct"]])
                for i, (b, n) in enumerate(zip(bins["bins"], bins["sentences"], strict=True))]
        tables.append("Sentences cited by answer length (words), in %:\n\n"
                      + md_table(["length", "sentences", *map(cell, bins["cited_pct"])], rows))
    return page(f"ELI5 (ALCE): {text(s.get('model'))}", "Self-citations beside MIRAGE's citations. Written by "
                "`mirage score eli5` (`results.json`).",
                ["## Tables\n\n" + "\n\n".join(tables), plots_section(run_dir),
                 settings_section({k: v for k, v in s.items() if k != "config"}),
                 settings_section(s.get("config", {}), "Pipeline"), data_section(run_dir, _eli5_data(run_dir)),
                 versions_section(report.versions), command_section(run_dir, _eli5_command(s)), *tail(run_dir)])


# -- bias studies ----------------------------------------------------------------------------------------------------------

BIAS_FLAGS = {"metadata": "--metadata", "k": "--k", "n_relevant": "--n-relevant", "modes": "--modes",
              "relevant_side": "--relevant-side", "mixed": "--mixed", "docs": "--docs", "rage_similar": "--rage-similar",
              "rage_embedder": "--rage-embedder", "max_doc_words": "--max-doc-words", "rewrite": "--rewrite",
              "explain": "--explain", "prompts_dir": "--prompts-dir", "baseline_draws": "--baseline-draws",
              "labels": "--labels", "seed": "--seed", "sentence_mark": "--sentence-mark",
              "keep_trained_questions": "--keep-trained-questions"}


def _retriever_of(run_dir: Path) -> tuple[str, int] | None:
    """The retriever (and its ``--top-k``) of a study that ``mirage bias --retriever`` wrote into DIR/NAME/: the
    parent folder's ``retrievers.json`` names this folder as one of its runs."""
    path = run_dir.parent / "retrievers.json"
    raw = read_json(path) if path.is_file() else None
    run = (raw.get("runs") or {}).get(run_dir.name) if isinstance(raw, dict) else None
    if not isinstance(run, dict) or run.get("run") != f"{run_dir.name}/run.trec":
        return None
    return str(run.get("retriever", run_dir.name)), int(raw.get("top_k", 100))


def _bias_limit(run_dir: Path, res: Mapping[str, Any]) -> tuple[int | None, bool]:
    """``(limit, known)``: the ``--limit`` a bias study ran with, which its results do not record, found from the
    results where that is exact: the study's questions (``n_items``; their ids in ``items.jsonl``) against the
    questions its data and settings give without a limit (:func:`mirage.bias.study.build_items`, the non-relevant
    documents as retrieved: RAGE's replace them after the limit, keeping the questions). No limit where they are
    all of them; ``n_items`` where they are the first ``n_items``; unknown where the data is not here, the ids are
    not recorded or the questions are not a first part (questions left out after the limit)."""
    import contextlib
    import dataclasses
    import io

    from mirage.bias.items import read_items
    from mirage.bias.protocol import BiasConfig
    from mirage.bias.study import build_items
    from mirage.data import resolve

    n = res.get("n_items")
    names = {f.name for f in dataclasses.fields(BiasConfig)}
    settings = {k: tuple(v) if isinstance(v, list) else v for k, v in (res.get("config") or {}).items() if k in names}
    try:
        cfg = dataclasses.replace(BiasConfig(**settings), docs="retrieved")
        run = run_dir / "run.trec" if _retriever_of(run_dir) else None
        with contextlib.redirect_stderr(io.StringIO()):  # its notes on skipped rows are the run's, not the page's
            every = [item.id for item in build_items(str(resolve(str(res.get("data")))), cfg, run=run)]
        ids = [item.id for item in read_items(run_dir / "items.jsonl")] if (run_dir / "items.jsonl").is_file() else None
    except (InputError, OSError, TypeError, ValueError):
        return None, False
    if n == len(every) and ids in (None, every):
        return None, True
    if ids is not None and len(ids) == n and ids == every[:n]:
        return n, True
    return None, False


def _bias_command(run_dir: Path, res: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The command rebuilt from a bias study's results, and the options it needs that they do not record."""
    from mirage.bias.protocol import BiasConfig
    from mirage.config import MirageConfig

    base = json.loads(json.dumps(asdict(BiasConfig())))  # as the results hold it (tuples are lists)
    argv = ["bias", registered_name(str(res.get("data"))), "--model", str(res.get("model"))]
    retriever = _retriever_of(run_dir)
    if retriever:
        argv += ["--retriever", retriever[0], *(["--top-k", str(retriever[1])] if retriever[1] != 100 else [])]
    limit, known = _bias_limit(run_dir, res)
    argv += ["--limit", str(limit)] if limit is not None else []
    for name, value in (res.get("config") or {}).items():
        flag = BIAS_FLAGS.get(name)
        if flag is None or value == base.get(name) or value is None:
            continue
        if isinstance(value, bool):
            argv += [flag] if value else []
        elif isinstance(value, (list, tuple)):
            argv += [flag, *[",".join(v) if isinstance(v, (list, tuple)) else str(v) for v in value]]
        else:
            argv += [flag, str(value)]
    argv += pipeline_flags_of(res.get("mirage_config") or {}, MirageConfig().to_dict(), ("--seed",))
    return portable_command([*argv, "-o", "DIR"]), [] if known else ["--limit"]


def _bias_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.bias.results import BiasStudyResult
    from mirage.bias.tables import render_markdown

    raw = _results(run_dir) or {}
    result = BiasStudyResult.from_dict(raw)
    tables = render_markdown(result).split("\n", 1)[1]  # its own title is the page's
    command, missing = _bias_command(run_dir, raw)
    return page(f"Attribution sensitivity and bias: {text(result.model)}, {text(result.metadata.get('type'))}",
                "Written by `mirage bias` (`results.json`; `tables.md` holds the same tables).",
                [tables.strip(), plots_section(run_dir), settings_section(result.config),
                 settings_section(result.mirage_config or {}, "Pipeline"), data_section(run_dir, [str(result.data)]),
                 versions_section(result.versions), command_section(run_dir, command, missing=missing),
                 *tail(run_dir)])


def _protocol_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.bias.full_protocol import OverviewRow, overview_table

    rows = [OverviewRow.from_dict(r) for r in read_json(run_dir / "protocol.json")]
    models = sorted({r.model for r in rows})
    links = "\n".join(f"- {link(code(r.study), f'{r.study}/README.md')}" for r in rows if (run_dir / r.study).is_dir())
    return page("Attribution-bias protocol: overview",
                f"{len(rows)} finished studies (model: {text(', '.join(models)) or '–'}), a row per citation source. "
                "Percentages; CAS = mean |change| of precision against vanilla, CAB = ω · mean (informed − "
                "counterfactual); * p < 0.05, ** p < 0.01 by each study's tests. Written by `mirage bias-protocol` "
                "(`protocol.json`, `protocol.md`).",
                ["## Overview\n\n" + overview_table(rows), "## Studies\n\n" + links if links else None,
                 command_section(run_dir, None), *tail(run_dir)])


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
            rows.append((link(text(p.value), f"{p.run_dir}/README.md"), p.n_items, cell(name), pct(van.get("precision")),
                         pct(van.get("recall")), cell(van.get("n_citations"), 2), effect(src.cab)))
    return page(f"Bias sweep over {code(sweep.parameter)}: {text(sweep.model)}",
                f"Metadata {text(sweep.metadata.get('first'))} vs {text(sweep.metadata.get('second'))}; one study per value "
                "(its folder has the full tables). Percentages; * p < 0.05, ** p < 0.01. Written by `mirage bias "
                "--sweep` (`sweep.json`).",
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


# -- XOR-AttriQA peers (ContextCite beside mirage) ---------------------------------------------------------------------


def _peers_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.scoring.tables import SETTING_NAMES, XOR_METRICS

    data = read_json(run_dir / "peers.json")
    langs = [k for k in data.get("counts", {}) if k != "all"]
    blocks = []
    for metric, label in XOR_METRICS.items():
        table = data.get(metric)
        if not table:
            continue
        digits = 3 if metric == "roc_auc" else 1
        rows = [(cell(SETTING_NAMES.get(s, s)), *[cell(v.get(lang), digits) for lang in [*langs, "avg"]])
                for s, v in table.items()]
        blocks.append(f"### {label}\n\n" + md_table(["setting", *map(cell, langs), "avg"], rows))
    cc = data.get("contextcite", {})
    return page("XOR-AttriQA: mirage beside ContextCite",
                f"{text(data.get('items'))} answers; ContextCite's calibrated thresholds fitted on "
                f"{text(data.get('calibration_items'))} calibration items; ContextCite took a median "
                f"{cell(cc.get('seconds_per_item'))} s per answer. Written by `benchmarks/xor_attriqa_peers.py` "
                "(`peers.json`).",
                ["## Tables\n\n" + "\n\n".join(blocks),
                 settings_section({k: v for k, v in cc.items() if k != "seconds_per_item"}, "ContextCite"),
                 command_section(run_dir, None), *tail(run_dir)])


# -- citation tuning ---------------------------------------------------------------------------------------------------------


def _tune_files(run_dir: Path) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """The folder's tuning records by kind: ``sft`` (a loss curve), ``reward`` (a reward curve), ``eval``."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {"sft": [], "reward": [], "eval": []}
    for path in sorted(run_dir.glob("*.json")):
        data = read_json(path)
        if not isinstance(data, dict):
            continue
        if "loss_curve" in data and "base_model" in data:
            out["sft"].append((path.name, data))
        elif "curve" in data and "base_model" in data:
            out["reward"].append((path.name, data))
        elif "n_answers" in data and "answers" in data:
            out["eval"].append((path.name, data))
    return out


def _is_tune(run_dir: Path) -> bool:
    return (run_dir / RESULTS).is_file() is False and any(_tune_files(run_dir).values())


def _quarters(curve: Sequence[Mapping[str, Any]], key: str) -> tuple[float | None, float | None]:
    """Mean of ``key`` over the first and the last quarter of the steps (``len // 4`` steps each)."""
    n = max(1, len(curve) // 4)
    first = [c[key] for c in curve[:n] if c.get(key) is not None]
    last = [c[key] for c in curve[len(curve) - n:] if c.get(key) is not None]
    return (statistics.fmean(first) if first else None, statistics.fmean(last) if last else None)


def _group_spread(curve: Sequence[Mapping[str, Any]]) -> str:
    """The reward's spread over the logged steps: the mean std over each generation batch's answers (trl's
    ``reward_std``) and the mean share of prompts whose sampled answers all got the same reward
    (``frac_reward_zero_std``: GRPO's group-relative advantage is zero there, so they teach nothing); empty where the
    run did not log them."""
    std = [c["reward_std"] for c in curve if c.get("reward_std") is not None]
    zero = [c["frac_reward_zero_std"] for c in curve if c.get("frac_reward_zero_std") is not None]
    parts = ([f"reward std {cell(statistics.fmean(std), 2)} over a batch's answers"] if std else []) + (
        [f"{cell(100 * statistics.fmean(zero))} % of prompts whose answers all scored the same"] if zero else [])
    return "; " + ", ".join(parts) if parts else ""


def documents_cited(answers: Sequence[Mapping[str, Any]]) -> tuple[Counter, Counter]:
    """``(by document, by set size)``: how many answers cite document 1, 2, … and how many cite 0, 1, 2, …
    documents."""
    by_doc: Counter = Counter(d for a in answers for d in set(a.get("cited", [])))
    by_size: Counter = Counter(len(set(a.get("cited", []))) for a in answers)
    return by_doc, by_size


def _tune_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    files = _tune_files(run_dir)
    sections: list[str | None] = []
    train_rows = []
    for name, d in files["sft"]:
        loss = d["loss_curve"][-1].get("loss") if d.get("loss_curve") else None
        train_rows.append((link(code(name), name), "SFT", cell(d.get("n_train")), cell(d.get("steps")),
                           cell(d.get("epochs")),
                           cell(d.get("runtime_s", 0) / 60), gib(d.get("peak_rss_mb")),
                           f"train loss {cell(d.get('train_loss'), 3)}, last step {cell(loss, 3)}"
                           + (f"; resumed from {code(Path(d['resumed_from']).name)} (minutes of the resumed part)"
                              if d.get("resumed_from") else "")))
    for name, d in files["reward"]:
        (r0, r1), (k0, k1) = _quarters(d["curve"], "reward"), _quarters(d["curve"], "kl")
        train_rows.append((link(code(name), name), "reward (GRPO)", cell(d.get("n_prompts")), cell(d.get("steps")), "–",
                           cell(d.get("runtime_s", 0) / 60), gib(d.get("peak_rss_mb")),
                           f"reward {cell(r0, 2)} → {cell(r1, 2)}, KL {cell(k0, 3)} → {cell(k1, 3)} "
                           "(first → last quarter of the steps)" + _group_spread(d["curve"])
                           + (f"; resumed from {code(Path(d['resumed_from']).name)} (minutes of the resumed part)"
                              if d.get("resumed_from") else "")))
    if train_rows:
        sections.append("## Training runs\n\n" + md_table(
            ["record", "stage", "examples / prompts", "steps", "epochs", "minutes", "peak memory", "curve"],
            train_rows))
    from mirage.bias.metrics import mean_citation_set_prf

    eval_rows, judge_rows, miss_rows = [], [], []
    for name, d in files["eval"]:
        m = d.get("misses")
        if m:
            miss_rows.append((code(name), *(cell(m[k]) for k in ("n_checked", "n_missed", "first_supports",
                                                                  "from_cited", "elsewhere", "nowhere", "yes_no"))))
        by_doc, by_size = documents_cited(d["answers"])
        three = sum(v for k, v in by_doc.items() if k >= 3)
        sizes = f"{by_size[0]} / {by_size[1]} / {by_size[2]} / {sum(v for k, v in by_size.items() if k >= 3)}"

        def pc(x: float | None) -> str:
            return "–" if x is None else f"{100 * x:.1f}"

        eval_rows.append((link(code(name), name), cell(d.get("model")), cell(d.get("n_answers")),
                          pc(d.get("answers_cited")), pc(d.get("sentences_cited")), cell(d.get("invalid_citations")),
                          f"{pc(d.get('precision'))} / {pc(d.get('recall'))} / {pc(d.get('f1'))}",
                          " / ".join(pc(v) for v in mean_citation_set_prf(d["answers"], cite_first=True)),
                          pc(d.get("exact_match")), cell(d.get("seconds_per_answer"), 2),
                          f"{by_doc[1]} / {by_doc[2]} / {three}", sizes))
        j = d.get("judge")
        if j:
            def trio(m: Mapping[str, Any]) -> str:
                return f"{cell(m.get('agreement'))} / {cell(m.get('f1'))} / {cell(m.get('balanced_accuracy'))}"

            meth = (j.get("faithfulness") or {}).get("methods", {})

            def drop(a: str, b: str, meth: Mapping[str, Any] = meth) -> str:
                if a not in meth:
                    return "–"
                return (f"{cell(meth[a].get('drop'), 2)} vs {cell(meth[b].get('drop'), 2)} "
                        f"(n={meth[a].get('n_sentences')})")

            svm = j.get("self_vs_mirage", {})
            judge_rows.append((code(name), trio(j.get("self_vs_labels", {})), trio(j.get("mirage_vs_labels", {})),
                               trio(j.get("first_vs_labels", {})),
                               f"{cell(svm.get('pair_agreement'))} / {cell(svm.get('kappa'), 3)}",
                               drop("selfcitation", "random_selfcitation"), drop("mirage", "random_mirage")))
    if eval_rows:
        sections.append(
            "## Citation evaluations\n\nPercentages. P / R / F1 per answer (answers with a supporting document), "
            "and the same for citing document 1 in every answer (\"cite [1]\", the positional baseline). "
            "\"Answers citing document 1 / 2 / 3+\": the answers whose citations include document 1, document 2, "
            "a document numbered 3 or more (an answer can count in several); \"answers citing 0 / 1 / 2 / 3+ "
            "documents\": the answers by the size of their citation set.\n\n"
            + md_table(["record", "model", "answers", "answers cited", "sentences cited", "invalid ids",
                        "P / R / F1", "cite [1] P / R / F1", "exact match", "s / answer",
                        "answers citing document 1 / 2 / 3+",
                        "answers citing 0 / 1 / 2 / 3+ documents"], eval_rows))
    if miss_rows:
        sections.append(
            "## Where the missed citations went\n\nOf the answers that cite something and whose row has a passage "
            "labelled as supporting, those citing none of those passages, by where the generated answer's own words "
            "are (normalised as exact match compares them): in a passage the answer cites (it answered from that "
            "passage and cited it; the labels judge the reference answer), only in passages it does not cite, in "
            "none; yes/no answers have no words to look for.\n\n"
            + md_table(["record", "cited answers with a label", "missed", "of which passage 1 supports",
                        "answer in a cited passage", "only in uncited ones", "in none", "yes/no"], miss_rows))
    if judge_rows:
        sections.append(
            "## Judged against the labels and mirage\n\nPooled (answer, document) pairs: agreement / F1 / balanced "
            "accuracy; \"cite [1]\" is the positional baseline. Drop: log p(answer | all documents) − log p(answer | "
            "without the cited ones), in nats, against a random set of the same size.\n\n"
            + md_table(["record", "self vs labels", "mirage vs labels", "cite [1] vs labels",
                        "self vs mirage: agr. / κ", "drop: self vs random", "drop: mirage vs random"], judge_rows))
    configs = sorted(run_dir.glob("*.yaml"))
    commands = []
    for cfg in configs:
        stage = "sft" if cfg.stem.startswith("sft") else "reward" if cfg.stem.startswith("reward") else None
        if stage:
            commands.append(portable_command(["tune", stage, "--config", cfg.name, "-o", f"DIR/{cfg.stem}"]))
    commands += [d["command"] for _n, d in files["eval"] if d.get("command")]
    recon = "\n".join(commands) if commands else None
    versions = next((d.get("versions") for kind in files.values() for _n, d in kind if d.get("versions")), None)
    settings = next((d.get("config") for kind in ("sft", "reward") for _n, d in files[kind]), None)
    data = sorted({p for kind in ("sft", "reward") for _n, d in files[kind] for p in d.get("config", {}).get("data", [])})
    return page("Citation tuning", "Records of `mirage tune sft`, `mirage tune reward` and `mirage tune eval`. "
                "Peak memory in GiB (2^30 bytes).",
                [*sections, settings_section(settings, "Settings (first training record)") if settings else None,
                 data_section(run_dir, data), versions_section(versions), command_section(run_dir, recon),
                 *tail(run_dir)])


# -- benchmark JSONs (timings, memory) -----------------------------------------------------------------------------------


def _bench_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.glob("*.json") if p.name != "provenance.json")


def _is_bench(run_dir: Path) -> bool:
    return not (run_dir / RESULTS).is_file() and bool(_bench_files(run_dir))


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


def _none(_run_dir: Path) -> list[str]:
    return []


# -- the scaling benchmark ---------------------------------------------------------------------------------------------


def _is_scale(run_dir: Path) -> bool:
    res = _results(run_dir)
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
                   "divided by its budget."), "", "| model | answer | prompt tokens | budget | peak / budget | within |",
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
    results = _results(run_dir) or {}
    models = ", ".join(results.get("settings", {}).get("models", []))
    return page(f"Scaling: {text(models)}", None, [_scale_page(results), *tail(run_dir)])


# -- the permutation test ---------------------------------------------------------------------------------------------


def _has_follow_reports(run_dir: Path) -> bool:
    """Whether the folder holds a permutation-test report (``mirage tune follow``)."""
    from mirage.tune.follow import is_follow_report

    return any(is_follow_report(read_json(path)) for path in sorted(run_dir.glob("*.json")))


def _follow_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.tune.follow import follow_changes_table, follow_folder

    folder = follow_folder(run_dir)
    sections = []
    for name, report in folder.reports.items():
        command = "\n\n" + fenced(report.command, "bash") if report.command else ""
        sections.append(f"## {code(name)}{command}\n\n{report.to_markdown()}")
    for name, (command, changes) in folder.changes.items():
        reference = changes[0].reference if changes else ""
        sections.append(
            f"## Paired changes ({code(name)})\n\n{fenced(command, 'bash')}\n\n"
            f"Self-citation only, means over items with 95 % bootstrap intervals over items; each change is "
            f"from {code(reference)} on the items both answered (paired), in points.\n\n"
            f"{follow_changes_table(changes)}")
    return page("Permutation test: does the self-citation follow the supporting passage?",
                "Each item with exactly one supporting passage is presented k times, that passage at position "
                "1..k and the other passages in one fixed shuffled order. An answer follows when its "
                "self-citations include the passage's new number and at most one other document. Rates in %; "
                "`[1] when not supporting`: presentations whose supporting passage is not first that cite [1]; "
                "the random citer cites as many documents as the model did (exact expectation).",
                [*sections, *tail(run_dir)])


# -- the self-match check ----------------------------------------------------------------------------------------------


def _self_match_table(counts: Mapping[str, Any]) -> str:
    """Rows checked and kept per split and language (``self_match.json``, or results.json's ``settings.self_match``)."""
    rows = []
    for split in ("test", "calibration"):
        for lang, c in (counts.get(split) or {}).items():
            share = 100 * c["kept"] / c["rows"] if c.get("rows") else None
            rows.append((split, cell(lang), cell(c.get("rows")), cell(c.get("kept")), cell(share, 1)))
    return md_table(["split", "language", "rows", "kept", "kept %"], rows)


def self_match_overview(folder: Path, target: Callable[[Path], str]) -> str:
    """Every self-match check in ``folder``'s run folders (their ``self_match.json``), one row each: the run (linked
    to ``target(run_folder)``), model, text view, prompt, data, test rows checked and kept, and per language."""
    rows = []
    for path in sorted(folder.glob(f"*/{SELF_MATCH}")):
        data = read_json(path)
        test = data.get("test") or {}
        total = test.get("all", {})
        langs = ", ".join(f"{lang} {c['kept']}/{c['rows']}" for lang, c in test.items() if lang != "all")
        rows.append((link(code(path.parent.name), target(path.parent)), cell(data.get("model")),
                     cell(data.get("text", "–")), cell((data.get("prompt") or {}).get("name")),
                     cell(", ".join(_as_list(data.get("data"))) or "–"), cell(total.get("rows")),
                     cell(total.get("kept")), cell(langs)))
    return md_table(["run", "model", "text", "prompt", "data", "rows", "kept", "kept per language"], rows)


def _has_self_match_checks(run_dir: Path) -> bool:
    return not (run_dir / SELF_MATCH).is_file() and any(run_dir.glob(f"*/{SELF_MATCH}"))


def _is_self_match(run_dir: Path) -> bool:
    return (run_dir / SELF_MATCH).is_file() and not (run_dir / RESULTS).is_file()


def _self_match_data(run_dir: Path) -> list[str]:
    data = read_json(run_dir / SELF_MATCH)
    return [*_as_list(data.get("data")), *_as_list(data.get("calibrate_on"))]


def _self_match_checks_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    return page("Self-match checks",
                "Each run folder below ran `mirage score xor-attriqa --self-match` (a one-pass check: the paper's "
                "Algorithm 1 without its beam search and its reshuffled passage orders) on one split: the test rows "
                "whose annotated answer the scoring model generated itself, once, greedily, in the file's passage "
                "order, kept to be scored.",
                ["## Rows kept\n\n" + self_match_overview(run_dir, lambda d: f"{d.name}/README.md"),
                 *tail(run_dir)])


def _self_match_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    data = read_json(run_dir / SELF_MATCH)
    return page(f"Self-match check: {text(data.get('model'))}",
                "A one-pass self-match check (`mirage score xor-attriqa --self-match`: the paper's Algorithm 1 "
                "without its beam search and its reshuffled passage orders): the scoring model generates each answer "
                "once, greedily, with the scoring prompt and the file's passage order, and a row is kept where its "
                "generation is the annotated answer (the authors' exact string test). No `results.json`: no test row was kept, so nothing was scored; "
                "each generation is in `matches.jsonl`.",
                ["## Rows kept\n\n" + _self_match_table(data),
                 settings_section({k: v for k, v in data.items() if k not in ("test", "calibration")}),
                 data_section(run_dir, _self_match_data(run_dir)), command_section(run_dir), *tail(run_dir)])


#: The built-in kinds, in the order they are tried (the benchmark-JSON folder last: it takes any JSON).
BUILTIN: tuple[PageKind, ...] = (
    PageKind("xor-attriqa", _has_keys("agreement", "counts", "settings"), _xor_data, _xor_render),
    PageKind("eli5", _has_keys("per_seed", "length_bins"), _eli5_data, _eli5_render),
    PageKind("bias-study", _has_keys("sources", "metadata", "config"),
             lambda d: _as_list((_results(d) or {}).get("data")), _bias_render),
    PageKind("bias-protocol", lambda d: (d / "protocol.json").is_file(), _none, _protocol_render, "protocol.json"),
    PageKind("bias-sweep", lambda d: (d / "sweep.json").is_file(),
             lambda d: _as_list(read_json(d / "sweep.json").get("data")), _sweep_render, "sweep.json"),
    PageKind("bias-retrievers", lambda d: (d / "retrievers.json").is_file(),
             lambda d: _as_list(read_json(d / "retrievers.json").get("data")), _retrievers_render, "retrievers.json"),
    PageKind("xor-peers", lambda d: (d / "peers.json").is_file(), _none, _peers_render, "peers.json"),
    PageKind("tune", _is_tune, _none, _tune_render, "*.json"),
    PageKind("bench-scale", _is_scale, lambda d: _as_list(((_results(d) or {}).get("settings") or {}).get("docs")),
             _scale_render),
    PageKind("tune-follow", _has_follow_reports, _none, _follow_render, "*.json"),
    PageKind("self-match-checks", _has_self_match_checks, _none, _self_match_checks_render, f"*/{SELF_MATCH}"),
    PageKind("self-match", _is_self_match, _self_match_data, _self_match_render, SELF_MATCH),
    PageKind("benchmark-json", _is_bench, _none, _bench_render, "*.json"),
)


def tail_sections(run_dir: Path, has_page: Callable[[Path], bool]) -> list[str | None]:
    """What ends every page: the run folders below it and the folder's files."""
    from mirage.views.pages.core import folders_section

    return [folders_section(run_dir, has_page), files_section(run_dir)]


def first(kinds: Mapping[str, PageKind], run_dir: Path) -> PageKind | None:
    return next((k for k in kinds.values() if k.detect(run_dir)), None)


__all__ = ["BUILTIN", "PageKind", "documents_cited", "first", "pipeline_flags_of", "tail_sections"]
