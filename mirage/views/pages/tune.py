"""The results pages of ``mirage tune``: a folder of tuning records (SFT loss curves, GRPO reward curves, citation
evaluations, with the commands rebuilt from the stage configs beside them) and the permutation test's reports
(``mirage tune follow``)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mirage.runs.files import RESULTS_FILE, portable_command
from mirage.views.pages.core import (
    cell,
    code,
    command_section,
    data_section,
    fenced,
    gib,
    link,
    md_table,
    page,
    read_json,
    settings_section,
    versions_section,
)
from mirage.views.pages.kinds import PageKind, no_data

__all__ = [
    "TUNE_FOLLOW_PAGE",
    "TUNE_PAGE",
    "documents_cited",
]


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
    return (run_dir / RESULTS_FILE).is_file() is False and any(_tune_files(run_dir).values())


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
    from mirage.options import option_flag
    from mirage.tune.options import StageOptions

    config_flag = option_flag(StageOptions, "config")
    commands = []
    for cfg in sorted(run_dir.glob("*.yaml")):
        stage = "sft" if cfg.stem.startswith("sft") else "reward" if cfg.stem.startswith("reward") else None
        if stage:
            commands.append(portable_command(["tune", stage, config_flag, cfg.name, "-o", f"DIR/{cfg.stem}"]))
    commands += [d["command"] for _n, d in files["eval"] if d.get("command")]
    recon = "\n".join(commands) if commands else None
    versions = next((d.get("versions") for kind in files.values() for _n, d in kind if d.get("versions")), None)
    settings = next((d.get("config") for kind in ("sft", "reward") for _n, d in files[kind]), None)
    data = sorted({p for kind in ("sft", "reward") for _n, d in files[kind]
                   for p in d.get("config", {}).get("data", [])})
    return page("Citation tuning", "Records of `mirage tune sft`, `mirage tune reward` and `mirage tune eval`. "
                "Peak memory in GiB (2^30 bytes).",
                [*sections, settings_section(settings, "Settings (first training record)") if settings else None,
                 data_section(run_dir, data), versions_section(versions), command_section(run_dir, recon),
                 *tail(run_dir)])


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


#: The pages of ``mirage tune``'s folders.
TUNE_PAGE = PageKind("tune", _is_tune, no_data, _tune_render, "*.json")
TUNE_FOLLOW_PAGE = PageKind("tune-follow", _has_follow_reports, no_data, _follow_render, "*.json")
