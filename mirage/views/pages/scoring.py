"""The results pages of ``mirage score``: XOR-AttriQA (``results.json`` with its agreement tables; the command
rebuilt from its settings), ELI5, mirage beside ContextCite on XOR-AttriQA (``peers.json``) and the self-match
checks (``self_match.json``, one run or a folder of them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mirage.config import flags_for_changed_defaults
from mirage.options import options_argv
from mirage.runs.benchmark_options import ELI5_PIPELINE_SKIP, XOR_PIPELINE_SKIP, ELI5Options, XorAttriQAOptions
from mirage.runs.experiment import ExperimentConfig
from mirage.runs.files import RESULTS_FILE, portable_command
from mirage.views.pages.core import (
    cell,
    code,
    command_section,
    data_section,
    fenced,
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
from mirage.views.pages.kinds import (
    SELF_MATCH,
    PageKind,
    as_list,
    has_keys,
    no_data,
    pipeline_flags_of,
    results_of,
)

__all__ = [
    "ELI5_PAGE",
    "SELF_MATCH_CHECKS_PAGE",
    "SELF_MATCH_PAGE",
    "XOR_ATTRIQA_PAGE",
    "XOR_PEERS_PAGE",
    "eli5_command",
    "self_match_overview",
    "xor_attriqa_command",
]


def _xor_data(run_dir: Path) -> list[str]:
    s = (results_of(run_dir) or {}).get("settings", {})
    return as_list(s.get("data")) + as_list(s.get("calibrate_on"))


def xor_attriqa_command(s: Mapping[str, Any]) -> str:
    """``mirage score xor-attriqa`` rebuilt from a run's recorded settings: the flags of the fields of
    :class:`~mirage.runs.experiment.ExperimentConfig` and :class:`~mirage.runs.benchmark_options.XorAttriQAOptions`
    the settings record (by field name, in the order the pages have always shown them; the settings' own name or
    value where they differ from the field's: ``trained_questions_kept``, the setting groups), then the pipeline's."""
    from mirage.scoring.xor_attriqa import xor_attriqa_pipeline

    groups = s.get("groups")
    values = {
        "data": [registered_name(d) for d in as_list(s.get("data"))], "model": str(s.get("model")),
        "text": str(s.get("text", "en")), "calibrate_on": [registered_name(d) for d in as_list(s.get("calibrate_on"))],
        "calibrate_by": s.get("calibrate_by", "global"), "skip": s.get("skip") or None, "limit": s.get("limit"),
        # all the groups (under the old name of ``likelihood``, as runs recorded them then) are the default
        "groups": groups if groups and sorted(groups) != ["cal", "ex", "learned"] else None,
        "all_tokens": bool(s.get("all_tokens")), "group_passages": bool(s.get("group_passages")),
        "methods": s.get("methods") or None, "classifier_methods": s.get("classifier_methods") or None,
        "reuse_from": s.get("reuse_from") or None,
        "keep_trained_questions": s.get("trained_questions_kept") is not None, "output": "DIR"}
    argv = ["score", "xor-attriqa", *options_argv(ExperimentConfig, values, ["data", "model", "text", "calibrate_on"]),
            *options_argv(XorAttriQAOptions, values, ["calibrate_by"], changed=True),
            *options_argv(ExperimentConfig, values, ["skip", "limit"]),
            *options_argv(XorAttriQAOptions, values, ["groups", "all_tokens", "group_passages", "methods",
                                                      "classifier_methods", "reuse_from", "keep_trained_questions"])]
    argv += pipeline_flags_of(s.get("config", {}), xor_attriqa_pipeline().to_dict(), XOR_PIPELINE_SKIP)
    argv += flags_for_changed_defaults("xor-attriqa", s.get("config", {}), " ".join(argv))
    return portable_command([*argv, *options_argv(XorAttriQAOptions, values, ["output"])])


def _xor_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.scoring.faithfulness import FaithfulnessSummary
    from mirage.scoring.tables import xor_table
    from mirage.scoring.xor_report import XorAttriQAReport

    raw = results_of(run_dir) or {}
    report = XorAttriQAReport.from_dict(raw)
    s = report.settings
    counts = report.counts.get("all", {})
    tables = [fenced(xor_table(report))]
    if s.get("self_match"):
        tables.append("Self-match (a one-pass check: the paper's Algorithm 1 without its beam search and its "
                      "reshuffled passage orders): only the rows where the model generated the annotated answer once, "
                      "greedily, in the file's passage order, were scored, its own generation attributed:\n\n"
                      + _self_match_table(s["self_match"]))
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
         command_section(run_dir, xor_attriqa_command(s),
                         lambda command: flags_for_changed_defaults("xor-attriqa", s.get("config", {}), command)),
         *tail(run_dir)])


def _eli5_data(run_dir: Path) -> list[str]:
    return as_list((results_of(run_dir) or {}).get("settings", {}).get("data"))


def eli5_command(s: Mapping[str, Any]) -> str:
    """``mirage score eli5`` rebuilt from a run's recorded settings, as :func:`xor_attriqa_command` does
    (:class:`~mirage.runs.benchmark_options.ELI5Options`' ``at_most`` is recorded as ``at_most_citations``; a run
    that does not record ``ndocs`` or ``at_most_citations`` ran with 5 and 3)."""
    from mirage.config import MirageConfig

    values = {
        "data": [registered_name(d) for d in as_list(s.get("data"))], "model": str(s.get("model")),
        "seeds": s.get("seeds") or None, "ndocs": s.get("ndocs", 5), "at_most": s.get("at_most_citations", 3),
        "skip": s.get("skip") or None, "limit": s.get("limit"),
        "keep_trained_questions": s.get("trained_questions_kept") is not None, "output": "DIR"}
    argv = ["score", "eli5", *options_argv(ExperimentConfig, values, ["data", "model", "seeds"]),
            *options_argv(ELI5Options, values, ["ndocs", "at_most"], changed=True),
            *options_argv(ExperimentConfig, values, ["skip", "limit"]),
            *options_argv(ELI5Options, values, ["keep_trained_questions"])]
    argv += pipeline_flags_of(s.get("config", {}), MirageConfig().to_dict(), ELI5_PIPELINE_SKIP)
    return portable_command([*argv, *options_argv(ELI5Options, values, ["output"])])


def _eli5_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.scoring.eli5 import ELI5Report
    from mirage.scoring.faithfulness import FaithfulnessSummary
    from mirage.scoring.tables import eli5_table

    report = ELI5Report.from_dict(results_of(run_dir) or {})
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
                 versions_section(report.versions), command_section(run_dir, eli5_command(s)), *tail(run_dir)])


def _peers_render(run_dir: Path, tail: Callable[[Path], list[str | None]]) -> str:
    from mirage.scoring.tables import SETTING_NAMES, xor_metrics

    data = read_json(run_dir / "peers.json")
    langs = [k for k in data.get("counts", {}) if k != "all"]
    blocks = []
    for metric, label in xor_metrics().items():
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
                     cell(", ".join(as_list(data.get("data"))) or "–"), cell(total.get("rows")),
                     cell(total.get("kept")), cell(langs)))
    return md_table(["run", "model", "text", "prompt", "data", "rows", "kept", "kept per language"], rows)


def _has_self_match_checks(run_dir: Path) -> bool:
    return not (run_dir / SELF_MATCH).is_file() and any(run_dir.glob(f"*/{SELF_MATCH}"))


def _is_self_match(run_dir: Path) -> bool:
    return (run_dir / SELF_MATCH).is_file() and not (run_dir / RESULTS_FILE).is_file()


def _self_match_data(run_dir: Path) -> list[str]:
    data = read_json(run_dir / SELF_MATCH)
    return [*as_list(data.get("data")), *as_list(data.get("calibrate_on"))]


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
                "generation is the annotated answer (the authors' exact string test). No `results.json`: no test row "
                "was kept, so nothing was scored; each generation is in `matches.jsonl`.",
                ["## Rows kept\n\n" + _self_match_table(data),
                 settings_section({k: v for k, v in data.items() if k not in ("test", "calibration")}),
                 data_section(run_dir, _self_match_data(run_dir)), command_section(run_dir), *tail(run_dir)])


#: The pages of ``mirage score``'s folders.
XOR_ATTRIQA_PAGE = PageKind("xor-attriqa", has_keys("agreement", "counts", "settings"), _xor_data, _xor_render)
ELI5_PAGE = PageKind("eli5", has_keys("per_seed", "length_bins"), _eli5_data, _eli5_render)
XOR_PEERS_PAGE = PageKind("xor-peers", lambda d: (d / "peers.json").is_file(), no_data, _peers_render, "peers.json")
SELF_MATCH_CHECKS_PAGE = PageKind("self-match-checks", _has_self_match_checks, no_data, _self_match_checks_render,
                                  f"*/{SELF_MATCH}")
SELF_MATCH_PAGE = PageKind("self-match", _is_self_match, _self_match_data, _self_match_render, SELF_MATCH)
