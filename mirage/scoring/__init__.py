"""Benchmarks of the method's paper: XOR-AttriQA agreement with human labels and ELI5 citation quality.

    from mirage.scoring import run_xor_attriqa, run_eli5
    report = run_xor_attriqa(mirage, ["fi.jsonl"], out_dir="out", model_name="smollm2-135m-instruct",
                             calibrate_on="val.jsonl")
    report.agreement["ex_top5pct"]["avg"]

Command line: ``mirage score xor-attriqa …`` and ``mirage score eli5 …`` (see :mod:`mirage.scoring.cli`).
"""

from .benchmarks import run_eli5, run_xor_attriqa
from .eli5 import ELI5Report, evaluate_eli5, load_alce
from .metrics import CachedJudge, NLIJudge
from .xor_attriqa import load_xor_attriqa, score_items
from .xor_eval import XorAttriQAReport, evaluate

__all__ = [
    "CachedJudge",
    "ELI5Report",
    "NLIJudge",
    "XorAttriQAReport",
    "evaluate",
    "evaluate_eli5",
    "load_alce",
    "load_xor_attriqa",
    "run_eli5",
    "run_xor_attriqa",
    "score_items",
]
