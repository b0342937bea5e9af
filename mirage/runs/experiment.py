"""One experiment configuration for every run command, read once from an experiment file and the command line.

An :class:`ExperimentConfig` holds what a run command runs: the model, the data files, the XOR-AttriQA text view, the
row limit, the generation seeds, the NLI judge, the pipeline :class:`~mirage.config.MirageConfig`, and where the model
runs. An experiment file (``configs/*.yaml``) gives the top-level keys of :data:`mirage.config.EXPERIMENT_KEYS` beside
the pipeline sections; flags given on the command line win over it. :meth:`ExperimentConfig.fingerprint` is what the
stored model outputs of a run depend on: every run command's resume check compares it.

    exp = ExperimentConfig.from_yaml("configs/xor_attriqa_cora_mgen.yaml", command="xor-attriqa")
    exp.fingerprint()     # {"benchmark": "xor-attriqa", "model": "gsarti/cora_mgen", ...}
    mirage = exp.load_mirage()

The pipeline flags (``--cti-std``, ``--cci-top-k``, …) are made from the metadata of the config fields that declare
one (``flag``, ``help``, ``implies``; see :mod:`mirage.config`), and the experiment's own (``--model``, ``--limit``,
``--device``, …) from :class:`ExperimentConfig`'s, by :func:`mirage.options.add_options`: a new field gets its flag
where it is declared.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mirage.checks import (
    boolean,
    fail,
    integer,
    literal,
    non_negative_int,
    paths,
    registered,
    seed,
    setfield,
    string,
)
from mirage.compat import RULE_ALIASES, renamed, stored_aggregation
from mirage.config import (
    COMMAND_SECTIONS,
    DEFAULT_MODEL,
    EXPERIMENT_KEYS,
    ConfigError,
    MirageConfig,
    read_config_file,
    with_implied,
)
from mirage.options import add_options, cli_arg, option_dest, option_fields, value_type
from mirage.registry import BENCHMARKS
from mirage.runs.benchmark_options import default_prompt

if TYPE_CHECKING:
    from mirage.pipeline import Mirage

__all__ = ["HALVES", "OWN_COMMANDS", "TRAINED_KEPT", "TRAINED_LEFT_OUT",
           "ExperimentConfig", "Half", "RunCommand", "TextView", "add_device_args", "add_experiment_args",
           "leave_out_trained", "loading_args", "loading_argv", "pipeline_changes",
           "pipeline_flags", "pipeline_sections", "question_digest", "question_half",
           "trained_question_keys"]

#: A run command: ``attribute``, ``bias``, or a benchmark of ``mirage score`` (``xor-attriqa``, ``eli5``: those
#: registered in :data:`mirage.registry.BENCHMARKS`); each stores model outputs that its resume check guards with
#: the fingerprint.
RunCommand = str
#: The run commands that are not benchmarks of ``mirage score`` (whose names are those registered in
#: :data:`mirage.registry.BENCHMARKS`).
OWN_COMMANDS = ("attribute", "bias")
#: XOR-AttriQA text view: the English translations or the annotated (native) text.
TextView = Literal["en", "native"]


@dataclass(frozen=True)
class ExperimentConfig:
    """What a run command runs; see the module docstring. ``data`` are input files (``calibrate_on`` the XOR-AttriQA
    calibration split), ``seeds`` the generation seeds (empty: the pipeline's one seed), ``nli`` the Hugging Face NLI
    judge of ELI5's citation quality; ``device``, ``dtype`` and ``trust_remote_code`` say how the model is loaded and
    ``description`` / ``dataset`` describe the file: of these five only a ``dtype`` other than float32 (given, or the
    device's default: bf16/fp16 on a GPU) changes what is stored, and the fingerprint names it."""

    command: RunCommand
    model: str = cli_arg(DEFAULT_MODEL, flag="--model", help="embedded model name, Hugging Face id or local path")
    #: The data files; each command says what they are (a positional argument of its own arity and help).
    data: tuple[str, ...] = cli_arg((), flag="data", help="data files")
    calibrate_on: tuple[str, ...] = cli_arg((), flag="--calibrate-on", metavar="FILE", help=(
        "splits to calibrate on (e.g. train.jsonl val.jsonl; never the test files): MIRAGE-CAL's CTI thresholds and "
        "the learned passage classifier are fitted on their pooled items"))
    text: TextView = cli_arg("en", flag="--text", help=(
        "en: English translations (English models, default); native: the annotated text"))
    limit: int | None = cli_arg(None, flag="--limit", type=non_negative_int, help="only the first N items")
    skip: int | None = cli_arg(None, flag="--skip", type=non_negative_int, help=(
        "leave out the first N rows of each data file (never of --calibrate-on), before --limit: --skip 30 "
        "--limit 30 reads rows 31-60, a half to confirm on after choosing on the first"))
    seeds: tuple[int, ...] = cli_arg((), flag="--seeds", help="generation seeds (default: the config's seed)")
    nli: str | None = cli_arg(None, flag="--nli", help=(
        "Hugging Face NLI judge for ALCE citation quality (the paper: google/t5_xxl_true_nli_mixture)"))
    pipeline: MirageConfig = field(default_factory=MirageConfig)
    description: str | None = None
    dataset: str | None = None
    device: str | None = cli_arg(None, flag="--device", help=(
        "torch device: cpu, cuda, cuda:1 … (default: cuda if available, else cpu)"))
    dtype: str | None = cli_arg(None, flag="--dtype", help=(
        "float32, bfloat16 or float16 (default: bf16/fp16 on GPU, fp32 on CPU)"))
    trust_remote_code: bool = cli_arg(False, flag="--trust-remote-code", help="allow model code from the hub",
                                      cli_default=False)
    #: How the model is loaded (see :meth:`mirage.Mirage.from_pretrained`): a LoRA adapter folder, a device map and
    #: per-device caps (accelerate), 8-/4-bit weights (bitsandbytes), mirage's memory budget for its passes.
    adapter: str | None = cli_arg(None, flag="--adapter", metavar="DIR", help=(
        "a LoRA adapter folder (mirage tune sft -o RUN: RUN/adapter) merged into the model; its base model unless "
        "--model names one"))
    device_map: str | dict[str, Any] | None = cli_arg(None, flag="--device-map", metavar="MAP", help=(
        "split the model over devices (accelerate): auto, balanced, sequential, or MODULE=DEVICE,… (e.g. "
        "model.layers.0=0,lm_head=1; devices: GPU index, cpu, disk)"))
    max_memory: str | int | dict[Any, Any] | None = cli_arg(None, flag="--max-memory", metavar="SIZE|DEV=SIZE,…",
                                                            help=(
        "per device (0=20GiB,cpu=60GiB: accelerate's caps for --device-map), or one size (3GB: the same as "
        "--memory-budget)"))
    #: (Its choices are those of :data:`mirage.attribution.models.QUANTIZATIONS`: named here, parsing imports no torch.)
    quantization: str | None = cli_arg(None, flag="--quantization", choices=("8bit", "4bit"), help=(
        "load the weights in 8 or 4 bits (bitsandbytes; needs a CUDA GPU)"))
    memory_budget: str | int | None = cli_arg(None, flag="--memory-budget", metavar="SIZE", help=(
        "the most memory attribution may use, weights included (3GB; CPU: resident memory, GPU: allocated): long "
        "prompts get gradient checkpointing and smaller CCI batches, and one that cannot fit is refused in one line. "
        "Default on a CPU: half of the memory the process holds and the machine has available, when each pass is "
        "planned (a pass that cannot fit it is tried all the same); on a GPU none: passes are planned within its "
        "free memory"))

    def __post_init__(self) -> None:
        setfield(self, "experiment.command", registered, registry=BENCHMARKS, builtin=OWN_COMMANDS,
                 how="mirage.runs.benchmark_options.register_benchmark")
        setfield(self, "experiment.model", string, path=True, nonempty=True,
                 expected="a model name, Hugging Face id or local path")
        object.__setattr__(self, "calibrate_on", paths("experiment.calibrate_on", self.calibrate_on or ()))
        for name in ("nli", "description", "dataset", "device", "dtype"):
            setfield(self, f"experiment.{name}", string, optional=True, path=True)
        setfield(self, "experiment.data", paths)
        setfield(self, "experiment.text", literal, choices=TextView)
        setfield(self, "experiment.limit", integer, minimum=0, optional=True, expected="an integer >= 0 or null")
        setfield(self, "experiment.skip", integer, minimum=0, optional=True, expected="an integer >= 0 or null")
        seeds = (self.seeds,) if isinstance(self.seeds, (int, float)) else self.seeds  # one seed, as YAML gives it
        if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
            _fail("seeds", "a list of integers in [0, 2**63)", self.seeds)
        object.__setattr__(self, "seeds", tuple(seed("experiment.seeds", s) for s in seeds))
        if not isinstance(self.pipeline, MirageConfig):
            _fail("pipeline", "a MirageConfig", self.pipeline)
        setfield(self, "experiment.trust_remote_code", boolean)
        self._check_loading()

    def _check_loading(self) -> None:
        """The loading options, checked without loading anything (errors name ``experiment.<field>``)."""
        from mirage.attribution.models import QUANTIZATIONS, ModelLoadError, resolve_placement

        setfield(self, "experiment.adapter", string, optional=True, path=True, nonempty=True,
                 expected="a LoRA adapter folder or null")
        setfield(self, "experiment.quantization", literal, choices=sorted(QUANTIZATIONS), optional=True)
        try:
            resolve_placement(self.device, self.device_map, self.max_memory, self.memory_budget)
        except ModelLoadError as err:
            raise ConfigError(f"experiment: {err}") from None

    def loading(self) -> dict[str, Any]:
        """The keywords of :meth:`mirage.Mirage.from_pretrained` that say how the model is loaded."""
        return {"device": self.device, "dtype": self.dtype, "trust_remote_code": self.trust_remote_code,
                "adapter": self.adapter, "device_map": self.device_map, "max_memory": self.max_memory,
                "quantization": self.quantization, "memory_budget": self.memory_budget}

    @property
    def generation_seeds(self) -> tuple[int, ...]:
        """The seeds answers are generated with: ``seeds``, or the pipeline's generation seed."""
        return self.seeds or (self.pipeline.generation.seed,)

    def dtype_name(self) -> str:
        """The dtype the model runs in (``dtype``, or the default of ``device``), e.g. ``"float32"``."""
        from mirage.attribution.models import dtype_name, resolve_device, resolve_dtype

        return dtype_name(resolve_dtype(self.dtype, resolve_device(self.device)))

    def fingerprint(self) -> dict[str, Any]:
        """What this command's stored model outputs depend on; a store holding outputs of another fingerprint is
        refused, never mixed in. A dtype other than float32 is named (``"dtype"``; runs in float32, all those written
        before it was, leave it out).

        ``attribute`` and ``bias`` store whole results: the model and the whole pipeline config. ``xor-attriqa``
        stores raw per-token scores and selects when evaluating: the model, prompt (and its template's text), CTI
        metric and CCI method. ``eli5`` stores whole results keyed by seed: all but the generation seed. (The shapes are
        those of the ``run.json`` files and result records already written, so existing runs resume.)
        """
        out = self._outputs_depend_on()
        dtype = self.dtype_name()
        if dtype != "float32":
            out["dtype"] = dtype
        from mirage.attribution.models import adapter_digest, is_adapter_folder

        adapter = self.adapter or (self.model if is_adapter_folder(self.model) else None)
        if adapter is not None:  # the outputs are the tuned model's: its weights, not the folder's name
            out["adapter"] = adapter_digest(adapter)
        if self.quantization is not None:
            out["quantization"] = self.quantization
        return out

    def _outputs_depend_on(self) -> dict[str, Any]:
        benchmark = BENCHMARKS.get(self.command)
        if benchmark is not None and benchmark.fingerprint is not None:
            return benchmark.fingerprint(self)
        cfg = self.pipeline
        config = cfg.to_dict()
        config.pop("preset", None)  # what the outputs depend on is the fields, however they were set
        config["aggregation"] = stored_aggregation(cfg.aggregation)
        return {"model": self.model, "config": config}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, command: RunCommand) -> ExperimentConfig:
        """From an experiment file's mapping: the keys of :data:`~mirage.config.EXPERIMENT_KEYS` (null = unset) and
        the pipeline sections. ``data`` is a file, a list of files, or
        ``{eval: files, calibrate_on: file or files}``."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"an experiment must be a mapping of keys, got {type(data).__name__}.")
        if "bias" in data and command != "bias":
            raise ConfigError("the 'bias' section configures `mirage bias`; leave it out of a file for "
                              f"`{command}`.")
        sections = {key: value for key, value in data.items()
                    if key not in EXPERIMENT_KEYS and key not in COMMAND_SECTIONS}
        pipeline = MirageConfig.from_dict(sections, benchmark=command)  # unknown keys are errors naming them
        prompt = sections.get("prompt")
        own_prompt = default_prompt(command)
        if own_prompt is not None and not (isinstance(prompt, Mapping) and {"name", "path"} & set(prompt)):
            pipeline = pipeline.replace(prompt={"name": own_prompt})
        files, calibrate_on = data.get("data"), None
        if isinstance(files, Mapping):
            unknown = sorted(map(str, set(files) - {"eval", "calibrate_on"}))
            if unknown:
                raise ConfigError(f"Unknown key(s) {unknown} in 'data'; known: ['calibrate_on', 'eval'].")
            calibrate_on = files.get("calibrate_on")
            files = files.get("eval")
        given = {key: data[key] for key in ("model", "text", "limit", "skip", "seeds", "nli", "description", "dataset",
                                            *LOADING_KEYS)
                 if data.get(key) is not None}
        return cls(command=command, data=() if files is None else files, calibrate_on=calibrate_on or (),
                   pipeline=pipeline, **given)

    @classmethod
    def from_yaml(cls, path: str | Path, *, command: RunCommand) -> ExperimentConfig:
        """From an experiment file or a pipeline config file; every problem is a ConfigError starting with the
        path."""
        data = read_config_file(path)
        try:
            exp = cls.from_dict(data, command=command)
            exp.check_prompt()
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from err
        return exp

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, command: RunCommand) -> ExperimentConfig:
        """The ``--config`` file (if any) with the flags of ``args`` applied on top (see
        :func:`add_experiment_args`); positional ``data`` files replace the file's."""
        config = getattr(args, "config", None)
        preset = getattr(args, "preset", None)
        data = read_config_file(config) if config else {}
        if preset is not None:  # the file's own fields still override the preset's, and the flags both
            data = {**data, "preset": preset}
        try:
            exp = cls.from_dict(data, command=command)
        except ConfigError as err:
            raise ConfigError(f"{config}: {err}" if config else str(err)) from err
        changes: dict[str, Any] = {name: getattr(args, name) for name in
                                   ("model", "calibrate_on", "text", "limit", "skip", "nli", "device", "dtype",
                                    *LOADING_KEYS)
                                   if getattr(args, name, None) is not None}
        for name in ("data", "seeds"):
            if getattr(args, name, None):
                changes[name] = getattr(args, name)
        if getattr(args, "trust_remote_code", False):
            changes["trust_remote_code"] = True
        exp = dataclasses.replace(exp, pipeline=exp.pipeline.replace(**pipeline_changes(args)), **changes)
        file_prompt = data.get("prompt")
        flag = getattr(args, "prompt", None) is not None
        if not flag and not (isinstance(file_prompt, Mapping) and {"name", "path"} & set(file_prompt)):
            exp = exp.with_trained_prompt()
        exp.check_adapter()
        try:
            exp.check_prompt(name_field="--prompt" if flag else "prompt.name")
        except ConfigError as err:
            raise ConfigError(f"{config}: {err}" if config and not (flag and exp.pipeline.prompt.path is None)
                              else str(err)) from None
        return exp

    def check_adapter(self) -> None:
        """Read the adapter folder (``adapter``, or ``model`` naming one) now as its loader reads it (its config and
        its weights' header), before any model loads or output is written: a ConfigError naming the field."""
        from mirage.attribution.models import ModelLoadError, check_adapter_folder, is_adapter_folder

        name = "adapter" if self.adapter is not None else "model" if is_adapter_folder(self.model) else None
        if name is not None:
            try:
                check_adapter_folder(getattr(self, name))
            except ModelLoadError as err:
                raise ConfigError(f"experiment.{name}: {err}") from None

    def check_prompt(self, *, name_field: str = "prompt.name") -> None:
        """Read the prompt template now, before any model loads or output is written: a ConfigError naming the
        field (``prompt.path``, or ``name_field``: how the name was given) and the known prompts. A bias study's
        prompts are its own (``bias.prompts_dir``)."""
        if self.command == "bias":
            return
        from mirage.attribution.prompts import load_template

        load_template(self.pipeline.prompt, name_field=name_field)

    def with_trained_prompt(self) -> ExperimentConfig:
        """This experiment prompting a model mirage tuned (a shipped adapter by name, an adapter or fully
        fine-tuned model folder) in the template it was trained in, said on stderr; unchanged for other models and
        for a command with prompts of its own (a benchmark's ``default_prompt``, the bias study's). For a prompt
        nobody chose."""
        from mirage.attribution.models import trained_prompt_name

        own = default_prompt(self.command) is not None or self.command == "bias"
        trained = None if own else trained_prompt_name(self.adapter or self.model)
        if not trained or trained == self.pipeline.prompt.name:
            return self
        import sys

        print(f"mirage: {self.adapter or self.model} was trained in the {trained} prompt, so it is prompted in it "
              "(--prompt chooses another).", file=sys.stderr)
        return dataclasses.replace(self, pipeline=self.pipeline.replace(prompt={"name": trained}))

    def check_device(self) -> None:
        """Check ``device`` and ``dtype`` now (a ModelLoadError), before data is read or anything slow happens."""
        from mirage.attribution.models import quantization_config, resolve_device, resolve_dtype

        quantization_config(self.quantization, resolve_dtype(self.dtype, resolve_device(self.device)))

    def load_mirage(self) -> Mirage:
        """The experiment's model, with its pipeline config, on ``device`` in ``dtype``."""
        from mirage.pipeline import Mirage

        loading = self.loading()
        # with an adapter and the default model, the base model is the one the adapter names
        model = None if self.adapter is not None and self.model == DEFAULT_MODEL else self.model
        return Mirage.from_pretrained(model, config=self.pipeline, **loading)


def _fail(name: str, expected: str, value: Any) -> typing.NoReturn:
    fail(f"experiment.{name}", expected, value)


# -- a tuned model's training questions -------------------------------------------------------------------------------

#: What an evaluation's results say of the questions its model was trained on: how many were left out, or kept.
TRAINED_LEFT_OUT, TRAINED_KEPT = "trained_questions_left_out", "trained_questions_kept"
_Item = typing.TypeVar("_Item")


def question_digest(question: str) -> str:
    """The key of a question, whatever its documents or their order: :func:`~mirage.runs.store.content_key` of its
    whitespace-normalised text. A model mirage tuned records the keys of the questions it was trained on
    (:func:`mirage.tune.data.trained_questions`), and every evaluation of it leaves them out
    (:func:`leave_out_trained`)."""
    from mirage.runs.store import content_key

    return content_key(" ".join(question.split()))


#: The selection protocol's two halves of the questions (:func:`question_half`): recipes are compared and chosen on
#: the ``choosing`` half only, and each chosen one is reported once on the ``confirming`` half.
Half = typing.Literal["choosing", "confirming"]
HALVES: tuple[Half, ...] = typing.get_args(Half)


def question_half(question: str) -> Half:
    """The half of the selection protocol (:data:`HALVES`) a question falls in: by the parity of its key
    (:func:`question_digest`), so fixed per question whatever file, order or documents it is read with, and about
    half of any set of questions in each."""
    return HALVES[int(question_digest(question), 16) % 2]


def trained_question_keys(model: Any, *, noun: str = "items") -> set[str] | None:
    """The keys (:func:`question_digest`) of the questions ``model`` records it was trained on (the
    ``training.questions`` of a model mirage tuned, :func:`~mirage.attribution.models.tuned_record`); None for any
    other model (no record; or one saved before mirage kept its questions, said on stderr: none of the ``noun`` is
    left out). ModelLoadError for a record whose questions are not a list of keys."""
    import sys

    from mirage.attribution.models import ModelLoadError, tuned_record

    record = tuned_record(model)
    training = record.get("training") if record else None
    trained = training.get("questions") if isinstance(training, dict) else None
    if trained is None:
        if record is not None:
            print(f"{model} records no training questions (saved before mirage recorded them): none of the {noun} "
                  "is left out.", file=sys.stderr)
        return None
    if not isinstance(trained, list) or not all(isinstance(q, str) for q in trained):
        raise ModelLoadError(f"{model}: training.questions of its mirage-adapter.json is not a list of question "
                             "keys; save the model again.")
    return set(trained)


def leave_out_trained(items: Sequence[_Item], model: Any, *, question: Callable[[_Item], str], keep: bool = False,
                      noun: str = "items") -> tuple[list[_Item], dict[str, int]]:
    """``items`` less those whose ``question(item)`` is one ``model`` records it was trained on (the
    ``training.questions`` of a model mirage tuned, :func:`~mirage.attribution.models.tuned_record`: a shipped
    adapter by name, an adapter or fully fine-tuned model folder), and what the results say of it:
    ``{TRAINED_LEFT_OUT: n}``, or with ``keep`` every item and ``{TRAINED_KEPT: n}``; for any other model (no
    record, or one saved before mirage kept its questions) every item and ``{}``. The count is said on stderr;
    InputError when every item is one the model was trained on."""
    import sys

    keys = trained_question_keys(model, noun=noun)
    if keys is None:
        return list(items), {}
    asked = [question_digest(question(item)) in keys for item in items]
    n = sum(asked)
    if keep:
        print(f"{n} of {len(items)} {noun} ask a question {model} was trained on; --keep-trained-questions keeps "
              "them.", file=sys.stderr)
        return list(items), {TRAINED_KEPT: n}
    print(f"{n} of {len(items)} {noun} ask a question {model} was trained on and are left out "
          "(--keep-trained-questions keeps them).", file=sys.stderr)
    if items and n == len(items):
        from mirage.data.inputs import InputError

        raise InputError(f"every one of the {len(items)} {noun} asks a question {model} was trained on, so none is "
                         "left to evaluate it on; give data it was not trained on (XOR-AttriQA's fi and ru), or "
                         "--keep-trained-questions.")
    return [item for item, seen in zip(items, asked) if not seen], {TRAINED_LEFT_OUT: n}


# -- command-line flags ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExperimentFile:
    """The file a run command's experiment starts from (``--config``; :meth:`ExperimentConfig.from_args` reads it,
    the preset is :attr:`mirage.config.MirageConfig.preset`'s ``--preset``)."""

    config: str | None = cli_arg(None, flag="--config", help=(
        "YAML config: pipeline sections (prompt, generation, cti, cci, aggregation), and for experiment files "
        "(configs/*.yaml) model/data/text/…"))


def pipeline_sections() -> Iterator[tuple[str, type]]:
    """``(name, class)`` of each section of the pipeline config (:class:`~mirage.config.MirageConfig`), in order."""
    sections = typing.get_type_hints(MirageConfig)
    for section in fields(MirageConfig):
        section_cls = sections[section.name]
        # not ``preset``: a name, not a section
        if isinstance(section_cls, type) and dataclasses.is_dataclass(section_cls):
            yield section.name, section_cls


def pipeline_flags() -> Iterator[tuple[str, dataclasses.Field, type]]:
    """``(section, field, value type)`` of every pipeline config field that declares a flag, in declaration order."""
    for name, section_cls in pipeline_sections():
        for opt in option_fields(section_cls):
            yield name, opt.field, value_type(opt.hint)


#: The loading options beyond device and dtype (:meth:`ExperimentConfig.loading`): experiment-file keys and flags.
LOADING_KEYS = ("adapter", "device_map", "max_memory", "quantization", "memory_budget")


def add_device_args(parser: argparse.ArgumentParser, *, placement: bool = True, adapter: bool = True) -> None:
    """The model-loading flags every command that loads a model takes: ``--device`` and ``--dtype``; with
    ``placement``, also ``--adapter`` (unless ``adapter`` is False: the command has its own), ``--device-map``,
    ``--max-memory``, ``--memory-budget`` and ``--quantization`` (read back by :func:`loading_args`)."""
    names = ["device", "dtype"]
    if placement:
        names += [*(["adapter"] if adapter else []), "device_map", "max_memory", "memory_budget", "quantization"]
    add_options(parser, ExperimentConfig, names, unset=True)


def loading_args(args: argparse.Namespace, *, adapter: bool = True) -> dict[str, Any]:
    """The loading flags of :func:`add_device_args` that ``args`` gives (device and dtype included), as keywords of
    :meth:`mirage.Mirage.from_pretrained`; without ``adapter`` where the command reads its own ``--adapter``."""
    return {name: getattr(args, name) for name in ("device", "dtype", *LOADING_KEYS)
            if getattr(args, name, None) is not None and (adapter or name != "adapter")}


def loading_argv(args: argparse.Namespace) -> list[str]:
    """The loading flags of ``args`` as a command line again (for commands that run others, e.g. bias-protocol)."""
    return [item for name, value in loading_args(args).items()
            for item in (f"--{name.replace('_', '-')}", str(value))]


def add_experiment_args(parser: argparse.ArgumentParser, *, skip: Collection[str] = (),
                        benchmark: str | None = None) -> None:
    """The model, config-file and pipeline flags every run command takes, less the pipeline flags in ``skip`` (those
    the command sets itself); each pipeline flag's help shows the field's default (``benchmark``'s, where it has its
    own: :data:`mirage.config.BENCHMARK_DEFAULTS`). Unset, each is None: the file's value, or the preset's, stays."""
    add_options(parser, ExperimentConfig, ["model"], unset=True)
    add_options(parser, ExperimentFile)
    add_options(parser, MirageConfig, ["preset"], unset=True)
    add_device_args(parser)
    add_options(parser, ExperimentConfig, ["trust_remote_code"], unset=True)
    defaults = MirageConfig.from_dict({}, benchmark=benchmark)
    sections = typing.get_type_hints(MirageConfig)
    for section in fields(MirageConfig):
        if dataclasses.is_dataclass(sections[section.name]):
            # numbers read as the field's check reads them (``--cci-top-k 3.0`` is 3, as ``top_k: 3.0`` is)
            add_options(parser, sections[section.name], skip=skip, unset=True,
                        defaults=getattr(defaults, section.name))


def pipeline_changes(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Per config section, the fields the pipeline flags in ``args`` set, then the fields those imply (unless given
    too): ``--cci-top-k 3`` is ``{"cci": {"top_k": 3, "top_percent": None}}``."""
    changes: dict[str, dict[str, Any]] = {}
    for section, f, _kind in pipeline_flags():
        value = getattr(args, option_dest(f.metadata), None)
        if (section, f.name) == ("aggregation", "rule"):
            flag = f.metadata["flag"]
            value = renamed(value, RULE_ALIASES, f"{flag} {{old}} is now {flag} {{new}}", note=True)
        if value is not None:
            changes.setdefault(section, {})[f.name] = value
    return {section: with_implied(section, fields_set) for section, fields_set in changes.items()}
