"""The benchmarks of ``mirage score``, each one registered :class:`Benchmark` (:data:`mirage.registry.BENCHMARKS`):
its help, data, options, fingerprint, runner, printed table, figure and results-page kind. The options are what a
run chooses beyond its experiment: :class:`XorAttriQAOptions` (``mirage score xor-attriqa``) and
:class:`ELI5Options` (``mirage score eli5``), which the runners of :mod:`mirage.scoring.benchmarks` take beside the
:class:`~mirage.runs.experiment.ExperimentConfig`.

Each field a command sets declares its flag and help (:func:`mirage.options.cli_arg`), from which ``mirage score``'s
flags are made; this module imports no scorer, so that building the parser imports none either: a benchmark names
its runner, its printed table and its option builder as ``"module:function"``, imported when the command runs.

    options = XorAttriQAOptions(output="runs/xor", calibrate_by="language")
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from mirage.checks import ConfigError, positive_int
from mirage.compat import GROUP_ALIASES, renamed, stored_aggregation
from mirage.config import AggregationConfig, CCIConfig, CTIConfig, GenerationConfig, section_dict
from mirage.options import cli_arg, option_flag
from mirage.registry import BENCHMARKS

__all__ = ["ELI5_PIPELINE_SKIP", "FAITHFULNESS", "KEEP_TRAINED_QUESTIONS", "OUTPUT_DIR", "SETTING_GROUPS",
           "XOR_PIPELINE_SKIP", "Benchmark", "CalibrateBy", "ELI5Options", "XorAttriQAOptions", "default_prompt",
           "register_benchmark", "resolve_ref", "score_help", "setting_groups"]

#: The metadata of the ``keep_trained_questions`` field of every options class of a command that evaluates a model
#: (:func:`mirage.runs.experiment.leave_out_trained`): ``--keep-trained-questions``, None unless given.
KEEP_TRAINED_QUESTIONS: dict[str, Any] = {
    "flag": "--keep-trained-questions", "cli_default": None,
    "help": "keep the questions the model was trained on (a model mirage tuned records them); by default they are "
            "left out, and the results say how many"}
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


# -- the benchmarks ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Benchmark:
    """One benchmark of ``mirage score``: registering it (:func:`register_benchmark`) is enough for ``mirage score
    NAME`` to run it and for the benchmarks' conformance test to check it.

    ``help`` / ``description``: its line in ``mirage score --help`` and its own ``--help``; ``data``: the ``nargs``
    and ``help`` of its positional data; ``missing_data``: the error when no data is given; ``experiment``: the
    :class:`~mirage.runs.experiment.ExperimentConfig` fields it takes as flags besides the data, model, row limit and
    pipeline (``text``, ``calibrate_on``, ``seeds``, ``nli``); ``pipeline_skip``: the pipeline fields it takes no flag
    for; ``options``: its options class (frozen, ``cli_arg`` fields, with ``output`` and ``keep_trained_questions``).
    ``runner``: ``"module:function"``, ``run(experiment, options, *, mirage, progress, **extra)`` writing
    ``results.json`` into ``options.output`` and returning the report (None on a rank other than 0; where it has
    them, its ``bad_rows`` ``{"count", "rows"}`` and ``faithfulness`` means are printed too); ``table``:
    ``"module:function"``, the report as the text ``mirage score`` prints; ``figure``: the figure's file name in the
    output folder, if it writes one; ``options_from``: ``"module:function"``, ``(args, experiment) -> (options,
    extra runner keywords)``, where the options are more than the flags (default: the flags alone).
    ``fingerprint``: what its stored model outputs depend on (``fingerprint(experiment) -> dict``; default: the
    model and the whole pipeline); ``default_prompt``: the prompt it uses unless the config or ``--prompt`` names
    one; ``page``: the name of the results-page kind of :mod:`mirage.views.pages` that renders its run folders."""

    name: str
    help: str
    description: str
    options: type
    runner: str
    table: str
    data: Mapping[str, str] = field(default_factory=lambda: {"nargs": "*", "help": "data files"})
    missing_data: str = "give the data file(s) (DATA…), or 'data' in the --config file."
    experiment: tuple[str, ...] = ()
    pipeline_skip: tuple[str, ...] = ()
    figure: str | None = None
    options_from: str | None = None
    fingerprint: Callable[[Any], dict[str, Any]] | None = None
    default_prompt: str | None = None
    page: str | None = None

    def __post_init__(self) -> None:
        for name in ("runner", "table", "options_from"):
            ref = getattr(self, name)
            if ref is not None and (not isinstance(ref, str) or ref.count(":") != 1):
                raise ConfigError(f"Benchmark {self.name!r}: {name} must be 'module:function', got {ref!r}.")
        if not dataclasses.is_dataclass(self.options) or not {"output", "keep_trained_questions"} <= {
                f.name for f in dataclasses.fields(self.options)}:
            raise ConfigError(f"Benchmark {self.name!r}: options must be a dataclass with the fields output and "
                              "keep_trained_questions.")


def resolve_ref(ref: str) -> Any:
    """The function (or class) a ``"module:name"`` reference names, its module imported now."""
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def register_benchmark(benchmark: Benchmark, *, overwrite: bool = False) -> None:
    """Add ``benchmark`` to ``mirage score`` (an existing name is replaced only with ``overwrite``)."""
    BENCHMARKS.register(benchmark.name, benchmark, overwrite=overwrite)


def score_help() -> str:
    """``mirage score``'s help line, naming every registered benchmark (in its parser and the command table)."""
    return f"score a benchmark of the method's paper: {', '.join(BENCHMARKS)}"


def default_prompt(command: str) -> str | None:
    """The prompt ``command`` uses unless the config or ``--prompt`` names one (a registered benchmark's)."""
    benchmark = BENCHMARKS.get(command)
    return benchmark.default_prompt if benchmark is not None else None


def _xor_attriqa_fingerprint(experiment: Any) -> dict[str, Any]:
    """XOR-AttriQA stores raw per-token scores and selects when evaluating: the model, the prompt (and its
    template's text: its passages are untitled, and how an untitled document renders changed), the CTI metric and
    the CCI method; the CCI precision and target where not the first defaults (stores written before keep their
    shape)."""
    from mirage.attribution.prompts import load_template
    from mirage.runs.store import content_key

    cfg = experiment.pipeline
    out = {"benchmark": "xor-attriqa", "model": experiment.model, "prompt": dataclasses.asdict(cfg.prompt),
           "template": content_key(load_template(cfg.prompt).identity()),
           "cti_metric": cfg.cti.metric, "cci_method": cfg.cci.method, "ig_steps": cfg.cci.ig_steps}
    if cfg.cci.precision != "model":
        out["cci_precision"] = cfg.cci.precision
    if cfg.cci.target != "logprob":
        out["cci_target"] = cfg.cci.target
    return out


def _eli5_fingerprint(experiment: Any) -> dict[str, Any]:
    """ELI5 stores whole results keyed by seed: everything but the generation seed."""
    cfg = experiment.pipeline
    generation = {k: v for k, v in dataclasses.asdict(cfg.generation).items() if k != "seed"}
    return {"benchmark": "eli5", "model": experiment.model, "prompt": dataclasses.asdict(cfg.prompt),
            "generation": generation, "cti": section_dict(cfg.cti), "cci": section_dict(cfg.cci),
            "aggregation": stored_aggregation(cfg.aggregation)}


register_benchmark(Benchmark(
    name="xor-attriqa", help="agreement of passage attributions with XOR-AttriQA human labels",
    description="Force-decode each annotated answer, attribute it to its passages and compare with the human AIS "
                "labels, per language, beside the NLI and trivial baselines. Writes DIR/results.json and "
                "DIR/sweep.png.",
    options=XorAttriQAOptions, runner="mirage.scoring.benchmarks:run_xor_attriqa",
    table="mirage.scoring.tables:xor_text", options_from="mirage.scoring.cli:xor_options",
    data={"nargs": "*", "help": "XOR-AttriQA JSONL files (match or per-passage release)"},
    missing_data="give at least one XOR-AttriQA file (DATA…), or 'data' in the --config file.",
    experiment=("text", "calibrate_on"), pipeline_skip=XOR_PIPELINE_SKIP, figure="sweep.png",
    fingerprint=_xor_attriqa_fingerprint, default_prompt="standard", page="xor-attriqa"))
register_benchmark(Benchmark(
    name="eli5", help="ELI5 (ALCE): MIRAGE citations beside the model's self-citations",
    description="Generate answers, keep their self-citations, attribute the same text with MIRAGE and compare the "
                "two. Writes DIR/results.json and DIR/length_bins.png.",
    options=ELI5Options, runner="mirage.scoring.benchmarks:run_eli5", table="mirage.scoring.tables:eli5_table",
    options_from="mirage.scoring.cli:eli5_options",
    data={"nargs": "?", "help": "ALCE-format JSON/JSONL file, or hf:OWNER/REPO/FILE (needs datasets)"},
    missing_data="give an ALCE-format file (DATA), or 'data' in the --config file.",
    experiment=("seeds", "nli"), pipeline_skip=ELI5_PIPELINE_SKIP, figure="length_bins.png",
    fingerprint=_eli5_fingerprint, page="eli5"))
