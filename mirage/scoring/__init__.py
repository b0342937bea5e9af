"""Benchmarks of the method's paper: XOR-AttriQA agreement with human labels and ELI5 citation quality.

    from mirage.runs.experiment import ExperimentConfig
    from mirage.scoring import XorAttriQAOptions, run_xor_attriqa
    experiment = ExperimentConfig.from_dict({"model": "smollm2-135m-instruct",
                                             "data": {"eval": ["fi.jsonl"], "calibrate_on": "val.jsonl"}},
                                            command="xor-attriqa")
    report = run_xor_attriqa(experiment, XorAttriQAOptions(output="out"), mirage=mirage)
    report.agreement["ex_top5pct"]["avg"]

Command line: ``mirage score xor-attriqa …`` and ``mirage score eli5 …`` (see :mod:`mirage.scoring.cli`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mirage.runs.lazy import lazy_exports

if TYPE_CHECKING:
    from mirage.scoring.benchmarks import ELI5Options, XorAttriQAOptions, run_eli5, run_xor_attriqa
    from mirage.scoring.eli5 import ELI5Report, evaluate_eli5, load_alce
    from mirage.scoring.metrics import CachedJudge, NLIJudge
    from mirage.scoring.xor_attriqa import score_items
    from mirage.scoring.xor_data import load_xor_attriqa
    from mirage.scoring.xor_eval import evaluate
    from mirage.scoring.xor_report import XorAttriQAReport

#: Imported on first access: the scorers bring torch, and ``mirage score --help`` should not.
__getattr__, __dir__ = lazy_exports(__name__, {
    "run_eli5": "benchmarks", "run_xor_attriqa": "benchmarks", "ELI5Options": "benchmarks",
    "XorAttriQAOptions": "benchmarks", "ELI5Report": "eli5", "evaluate_eli5": "eli5", "load_alce": "eli5",
    "CachedJudge": "metrics", "NLIJudge": "metrics", "load_xor_attriqa": "xor_data", "score_items": "xor_attriqa",
    "XorAttriQAReport": "xor_report", "evaluate": "xor_eval",
})

__all__ = [
    "CachedJudge",
    "ELI5Options",
    "ELI5Report",
    "NLIJudge",
    "XorAttriQAOptions",
    "XorAttriQAReport",
    "evaluate",
    "evaluate_eli5",
    "load_alce",
    "load_xor_attriqa",
    "run_eli5",
    "run_xor_attriqa",
    "score_items",
]
