"""What a benchmark run chooses beyond its experiment: :class:`XorAttriQAOptions` (``mirage score xor-attriqa``) and
:class:`ELI5Options` (``mirage score eli5``), which the runners of :mod:`mirage.scoring.benchmarks` take beside the
:class:`~mirage.runs.experiment.ExperimentConfig`.

Each field a command sets declares its flag and help (:func:`mirage.options.cli_arg`), from which ``mirage score``'s
flags are made; this module imports no scorer, so that building the parser imports none either.

    options = XorAttriQAOptions(output="runs/xor", calibrate_by="language")
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from mirage.checks import ConfigError
from mirage.compat import GROUP_ALIASES, renamed
from mirage.config import AggregationConfig, CCIConfig, CTIConfig, GenerationConfig
from mirage.options import cli_arg, option_flag
from mirage.runs.experiment import KEEP_TRAINED_QUESTIONS, positive_int

__all__ = ["ELI5_PIPELINE_SKIP", "FAITHFULNESS", "OUTPUT_DIR", "SETTING_GROUPS", "XOR_PIPELINE_SKIP",
           "CalibrateBy", "ELI5Options", "XorAttriQAOptions", "setting_groups"]

#: MIRAGE-CAL's CTI threshold: one for the whole calibration split (``global``), or one per language.
CalibrateBy = Literal["global", "language"]
#: The groups of settings a run can ask for: ``ex`` (MIRAGE-EX: CCI rows of the example-level tokens), ``cal``
#: (MIRAGE-CAL and the top-% sweep: calibration rows, and test rows above the calibrated thresholds) and
#: ``likelihood`` (the passage-likelihood classifier, rows ``learned`` and ``learned_agreement`` of results.json, and
#: the threshold-free passage score: the passage signals, no CCI row).
SETTING_GROUPS: tuple[str, ...] = ("ex", "cal", "likelihood")

#: The pipeline flags of the commands that score XOR-AttriQA's annotated answers (``mirage score xor-attriqa``,
#: ``mirage methods train-at2``) do not take (``skip`` of :func:`~mirage.runs.experiment.add_experiment_args`): they
#: force-decode the answers, generating nothing, and their settings choose the CTI threshold, the CCI selection and
#: the citations. Named by field, so that a flag renamed in its config class is left out under its new name.
XOR_PIPELINE_SKIP: tuple[str, ...] = tuple(option_flag(cls, name) for cls, names in (
    (CCIConfig, ("top_k", "top_percent")), (CTIConfig, ("threshold",)), (AggregationConfig, ("max_citations",)),
    (GenerationConfig, ("max_new_tokens", "do_sample", "temperature", "top_p", "seed"))) for name in names)
#: The pipeline flag ``mirage score eli5`` does not take: ``--seed`` (its ``--seeds`` give the generation seeds).
ELI5_PIPELINE_SKIP: tuple[str, ...] = (option_flag(GenerationConfig, "seed"),)

#: The metadata of both benchmarks' ``output`` and ``faithfulness`` fields (``-o DIR``, ``--faithfulness``).
OUTPUT_DIR: dict[str, Any] = {
    "flag": "--output", "aliases": ("-o",),
    "help": "output directory (results.json, the plot, and per-item outputs: re-running resumes)"}
FAITHFULNESS: dict[str, Any] = {
    "flag": "--faithfulness",
    "help": "also score how much each citation set matters to the model (mirage.scoring.faithfulness)"}


@dataclass(frozen=True)
class XorAttriQAOptions:
    """What a ``mirage score xor-attriqa`` run chooses beyond its experiment: one field per flag of the command that
    is not an :class:`~mirage.runs.experiment.ExperimentConfig` field. Plain JSON values (``dataclasses.asdict``)."""

    #: Output directory: ``run.json``, the per-item stores (a re-run resumes), ``results.json``, ``pairs.jsonl`` and
    #: ``sweep.png``.
    output: str = cli_arg(**OUTPUT_DIR)
    #: Also check how much each citation set matters to the model (``faithfulness.jsonl``).
    faithfulness: bool = cli_arg(False, **FAITHFULNESS)
    #: The setting groups to compute (:data:`SETTING_GROUPS`).
    groups: tuple[str, ...] = cli_arg(SETTING_GROUPS, flag="--settings",
                                      choices=(*SETTING_GROUPS, *GROUP_ALIASES), help=(
        "settings to compute (default all): ex (MIRAGE-EX), cal (MIRAGE-CAL and the top-%% sweep), likelihood (the "
        "passage-likelihood classifier and the passage score; needs no CCI row; 'learned' is its old name)"))
    all_tokens: bool = cli_arg(False, flag="--all-tokens", help=(
        "compute CCI for every answer token of every item (slower; needed only for the threshold-free mirage_raw "
        "ROC-AUC); by default only the tokens some setting selects"))
    batch_items: int | None = cli_arg(None, flag="--batch-items", type=positive_int, metavar="N", help=(
        "run the passes (CTI and CCI) of N new items in padded batches (default: 8 on a GPU, 1 on a CPU)"))
    group_passages: bool = cli_arg(False, flag="--group-passages", help=(
        "rows of the per-passage release (xor_attriqa_full) with the same question and answer become one item with "
        "all their passages, as a match row (default: one item per row)"))
    #: (Unset on the command line, the preset's: ``language`` under ``--preset authors``.)
    calibrate_by: CalibrateBy = cli_arg("global", flag="--calibrate-by", cli_default=None, help=(
        "one threshold, or one per language of the calibration split (as the reference code); default global, "
        "language under --preset authors"))
    self_match: bool = cli_arg(False, flag="--self-match", help=(
        "a one-pass self-match check (the paper's Algorithm 1 without its beam search and its reshuffled passage "
        "orders): generate each answer once, greedily, with the scoring model (same prompt, the file's passage "
        "order), keep the rows where it reproduces the annotated answer, and attribute its own generation; "
        "DIR/matches.jsonl holds every generation, results.json the rows kept"))
    #: Another run's folder whose stored model outputs (the same ``run.json``) this run starts from while its own
    #: store is empty.
    reuse_from: str | None = cli_arg(None, flag="--reuse-from", metavar="RUN_DIR", help=(
        "start from the stored model outputs of another run (same model, prompt and CCI target), so a run that "
        "changes only selection or aggregation (a preset, a CTI spread, the calibration) computes only the rows it "
        "adds; used while this run's store is empty"))
    nli_dir: str | None = cli_arg(None, flag="--nli-dir", help=(
        "folder of <split>.nli-*.json baseline predictions (default: beside DATA)"))
    #: Document attribution methods (:data:`mirage.registry.DOCUMENT_METHODS`) scored beside MIRAGE on the same
    #: answers and prompts (:mod:`mirage.scoring.xor_methods`); checked against the registry when the run starts.
    methods: tuple[str, ...] = cli_arg((), flag="--methods", metavar="NAME", help=(
        "also score these document attribution methods (registered names, or all) on the same answers and prompts: "
        "per answer (mean + std) and, with --calibrate-on, at calibrated thresholds; DIR/methods.jsonl keeps their "
        "scores, results.json their rows (NAME@ex, NAME@cal, NAME@cal_agreement) and cost per answer"))
    #: Feature sets of document methods (``NAME`` or ``NAME+NAME…``, each among ``methods``): for each, the
    #: passage-likelihood classifier fitted again with those methods' passage scores among its features.
    classifier_methods: tuple[str, ...] = cli_arg((), flag="--classifier-methods", metavar="SET", help=(
        "also fit the passage-likelihood classifier with these --methods' passage scores added to its features: "
        "each SET is a method or several joined by + (at2, at2+rollout); results.json rows learned+SET"))
    #: Compute the passage signals (needed by the ``likelihood`` and ``passage_score`` settings).
    signals: bool = True
    #: Keep the test rows asking a question the model records it was trained on (a model mirage tuned); by default
    #: they are left out (:func:`~mirage.runs.experiment.leave_out_trained`), and the settings say how many.
    keep_trained_questions: bool = cli_arg(False, **KEEP_TRAINED_QUESTIONS)

    def __post_init__(self) -> None:
        _path_field(self, "output", required=True)
        _path_field(self, "nli_dir")
        _path_field(self, "reuse_from")
        if self.reuse_from is not None and self.self_match:
            raise ConfigError("reuse_from: a --self-match run attributes the model's own generations, which another "
                              "run's store does not hold; leave out --reuse-from.")
        if self.calibrate_by not in get_args(CalibrateBy):
            raise ConfigError(f"calibrate_by must be one of {list(get_args(CalibrateBy))}, got {self.calibrate_by!r}.")
        groups = (self.groups,) if isinstance(self.groups, str) else self.groups
        if not isinstance(groups, Sequence) or not all(isinstance(g, str) for g in groups):
            raise ConfigError(f"groups must be a list of setting groups, got {self.groups!r}.")
        object.__setattr__(self, "groups", tuple(groups))
        methods = (self.methods,) if isinstance(self.methods, str) else self.methods
        if not isinstance(methods, Sequence) or not all(isinstance(m, str) for m in methods):
            raise ConfigError(f"methods must be a list of document method names, got {self.methods!r}.")
        object.__setattr__(self, "methods", tuple(methods))
        sets = (self.classifier_methods,) if isinstance(self.classifier_methods, str) else self.classifier_methods
        if not isinstance(sets, Sequence) or not all(isinstance(m, str) and all(m.split("+")) for m in sets):
            raise ConfigError(f"classifier_methods must be a list of method names or names joined by + (at2, "
                              f"at2+rollout), got {self.classifier_methods!r}.")
        object.__setattr__(self, "classifier_methods", tuple(sets))
        _optional_positive(self, "batch_items")


@dataclass(frozen=True)
class ELI5Options:
    """What a ``mirage score eli5`` run chooses beyond its experiment (whose ``seeds``, ``limit`` and first ``data``
    file it runs). Plain JSON values (``dataclasses.asdict``)."""

    #: Output directory: ``run.json``, ``answers.jsonl`` (a re-run resumes), the judge's cache, ``results.json`` and
    #: ``length_bins.png``.
    output: str = cli_arg(**OUTPUT_DIR)
    #: Documents given to the model per question (None: all of the item's).
    ndocs: int | None = cli_arg(5, flag="--ndocs", help="documents given to the model (default 5)")
    faithfulness: bool = cli_arg(False, **FAITHFULNESS)
    at_most: int = cli_arg(3, flag="--at-most-citations", help="citations judged per sentence (default 3, as ALCE)")
    #: Keep the questions the model records it was trained on, as :class:`XorAttriQAOptions` does.
    keep_trained_questions: bool = cli_arg(False, **KEEP_TRAINED_QUESTIONS)

    def __post_init__(self) -> None:
        _path_field(self, "output", required=True)
        _optional_positive(self, "ndocs")
        _optional_positive(self, "at_most", optional=False)


def _path_field(options: Any, name: str, *, required: bool = False) -> None:
    """An options path as a string (a PathLike is converted); ConfigError naming the field otherwise."""
    value = getattr(options, name)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
        object.__setattr__(options, name, value)
    if (value is None and not required) or (isinstance(value, str) and value):
        return
    raise ConfigError(f"{name} must be a path{'' if required else ' or null'}, got {value!r}.")


def _optional_positive(options: Any, name: str, *, optional: bool = True) -> None:
    value = getattr(options, name)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1{' or null' if optional else ''}, got {value!r}.")


def setting_groups(groups: Iterable[str]) -> tuple[str, ...]:
    """``groups`` checked against :data:`SETTING_GROUPS`, old names (:data:`mirage.compat.GROUP_ALIASES`) renamed with a
    DeprecationWarning; a ValueError names unknown ones."""
    out = []
    for name in groups:
        name = renamed(name, GROUP_ALIASES, "the setting group {old!r} is now called {new!r}", stacklevel=3)
        if name not in SETTING_GROUPS:
            raise ValueError(f"unknown setting groups [{name!r}]; choose from {list(SETTING_GROUPS)}.")
        if name not in out:
            out.append(name)
    return tuple(out)
