"""A scoring run folder whose answers are attribution results, ``mirage score eli5 … -o DIR``, as one
self-contained HTML page: what ``mirage view DIR`` writes for such a folder. It is the attribution report of
:mod:`mirage.views.report` over the run's answers (``DIR/answers.jsonl``: per answer the self-citations beside mirage's
citations, sentence by sentence, the attributed spans and the documents' heat), with the run's summary above the
items: the table ``mirage score eli5`` prints from ``DIR/results.json`` (and the faithfulness means when the run
checked them), and the length-bins figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from markupsafe import Markup

from mirage.attribution.results import AttributionResult
from mirage.data.inputs import InputError, short_repr
from mirage.runs.files import RESULTS_FILE, figure_uri, read_json, read_run_records, run_file
from mirage.scoring.eli5 import ELI5Report
from mirage.views.report import record_problem, report_html, result_from_record, template_asset, template_env

__all__ = ["ANSWERS", "eli5_report_html", "read_eli5_answers"]

#: The files of an ELI5 run folder that the view reads (each may be gzipped; and :data:`RESULTS_FILE`), see
#: :mod:`mirage.scoring.benchmarks`.
ANSWERS = "answers.jsonl"
FIGURE = "length_bins.png"


def read_eli5_answers(folder: str | Path, seeds: Sequence[int] = ()) -> list[AttributionResult]:
    """The attributed answers of a run folder, by seed (in ``seeds``' order, then any other) and data row; an answer
    without an id of its own is named by its row and seed (``row 3 · seed 1``)."""
    path = run_file(folder, ANSWERS)
    if path is None:
        raise InputError(f"{folder} has no {ANSWERS} (nor {ANSWERS}.gz), the answers of a `mirage score eli5` run.")
    rows = []
    for rec in read_run_records(path):
        if not isinstance(rec.get("result"), dict):
            raise InputError(f"{path}: record {short_repr(rec['key'])} has no 'result'; "
                             "give the folder `mirage score eli5` wrote.")
        res = result_from_record(rec["result"], f"{path}: record {short_repr(rec['key'])}")
        seed: Any = rec.get("seed")  # as the record has it: an int of ``seeds``, or any other value
        line = rec.get("line")
        if res.id is None:
            res = replace(res, id=f"row {line} · seed {seed}")
        order = list(seeds).index(seed) if seed in seeds else len(seeds)
        rows.append(((order, str(seed), line if isinstance(line, int) else 0), res))
    if not rows:
        raise InputError(f"{path} holds no answer; run `mirage score eli5` into {folder} first.")
    return [res for _key, res in sorted(rows, key=lambda row: row[0])]


def read_eli5_report(folder: str | Path) -> ELI5Report:
    """The run's ``results.json`` (:class:`mirage.scoring.eli5.ELI5Report`)."""
    path = run_file(folder, RESULTS_FILE)
    if path is None:
        raise InputError(f"{folder} has no {RESULTS_FILE}; the run has not finished "
                         "(re-run `mirage score eli5` with the same -o to write it).")
    data = read_json(path)
    if not isinstance(data, dict) or "per_seed" not in data:
        raise InputError(f"{path} is not the results of `mirage score eli5` (no 'per_seed').")
    problem = record_problem(data, ELI5Report)
    seeds = (data.get("settings") or {}).get("seeds") if isinstance(data.get("settings"), dict) else None
    if problem is None and seeds is not None and not (isinstance(seeds, list) and all(
            isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
        problem = ("settings.seeds", "must be a list of integers")
    if problem is not None:
        raise InputError(f"{path}: field {short_repr(problem[0], 80)} {problem[1]}; give the results.json "
                         "`mirage score eli5` wrote.")
    return ELI5Report.from_dict(data)


def summary_text(report: ELI5Report) -> str:
    """The run's summary as ``mirage score eli5`` prints it: the citation table and, when the run checked them,
    the faithfulness means."""
    from mirage.scoring.tables import eli5_table

    text = eli5_table(report)
    if report.faithfulness:
        from mirage.scoring.faithfulness import FaithfulnessSummary

        text += "\n\n" + FaithfulnessSummary.from_dict(report.faithfulness).to_text()
    return text


def eli5_report_html(folder: str | Path, *, title: str | None = None) -> str:
    """The self-contained page of the ELI5 run in ``folder``."""
    folder = Path(folder)
    report = read_eli5_report(folder)
    seeds = report.settings.get("seeds") or []
    results = read_eli5_answers(folder, seeds)
    try:
        table = summary_text(report)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as err:  # a results.json edited by hand
        raise InputError(f"{run_file(folder, RESULTS_FILE)}: its summary cannot be shown ({type(err).__name__}: "
                         f"{short_repr(str(err), 120)}); give the results.json `mirage score eli5` wrote.") from None
    preface = template_env().get_template("eli5_summary.html.j2").render(
        report=report, table=table, n_answers=len(results), css=template_asset("runs.css"),
        figure=figure_uri(folder / FIGURE))
    return report_html(results, title=title or f"mirage ELI5 run: {folder.name}", preface=Markup(preface))

