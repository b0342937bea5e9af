"""The fine-tuning settings: one frozen tree for Python, YAML (``configs/tune/*.yaml``) and ``mirage tune``'s flags.

    cfg = TuneConfig.from_yaml("configs/tune/sft.yaml")  # sections model, data, prompt, lora, train, reward, preference
    cfg = cfg.replace(model="gemma3-270m", train={"epochs": 2})

Every value is checked on construction (:mod:`mirage.checks`, as every config class is); a ConfigError names
``section.field`` and what it expects. Importing this
module imports neither torch nor trl, so that ``mirage tune --help`` stays light.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

from mirage.checks import fail as _fail
from mirage.checks import integer, number, paths, positive, positive_int, probability, seed, setfield, string
from mirage.config import DEFAULT_MODEL, ConfigError, PromptConfig, read_config_file
from mirage.data.inputs import short_repr
from mirage.options import cli_arg

__all__ = ["LoraSettings", "PreferenceLoss", "PreferenceSettings", "RewardSettings", "TrainSettings", "TuneConfig"]


@dataclass(frozen=True)
class LoraSettings:
    """The LoRA adapter (peft ``LoraConfig``): rank ``r``, scaling ``alpha``, ``dropout``, and the modules it wraps
    (``all-linear``: every linear layer but the output head, which fits any architecture; or a list of names)."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: str | tuple[str, ...] = "all-linear"

    def __post_init__(self) -> None:
        setfield(self, "lora.r", integer, minimum=1)
        setfield(self, "lora.alpha", integer, minimum=1)
        setfield(self, "lora.dropout", probability)
        modules = self.target_modules
        if isinstance(modules, Sequence) and not isinstance(modules, str):
            if not modules or not all(isinstance(m, str) and m for m in modules):
                _fail("lora.target_modules", "'all-linear' or a non-empty list of module names", modules)
            object.__setattr__(self, "target_modules", tuple(modules))
        elif not isinstance(modules, str) or not modules:
            _fail("lora.target_modules", "'all-linear' or a non-empty list of module names", modules)


@dataclass(frozen=True)
class TrainSettings:
    """The optimisation: ``epochs`` (or ``max_steps``, which wins when set), ``learning_rate``, ``batch_size`` per
    step times ``gradient_accumulation_steps``, ``max_length`` (tokens of prompt + answer: longer examples are left
    out and reported, never cut), ``seed``, how often the loss is logged and a checkpoint saved (the last
    ``save_total_limit`` are kept; a run resumes from the newest), ``method``: ``lora`` (an adapter, the
    ``lora`` section) or ``full`` (every weight of the model trained, saved as a whole model folder; the SFT stage
    only), and ``loss_on``, the answer tokens the SFT loss is computed on: ``answer`` (all of them and the end of
    turn), ``citations`` (only the tokens of the citation marks, ``[3]``, and the token that closes each run of
    marks, where the model learns that no further mark follows: a pass that teaches which documents to cite and
    leaves the answer's wording to the model; an answer without a mark keeps its loss on every token) or ``marks``
    (the marks' tokens alone, the first rule: a model taught so is never told where citing stops)."""

    epochs: float = 1.0
    max_steps: int | None = cli_arg(None, flag="--max-steps", type=positive_int, help="stop after N optimisation steps")
    learning_rate: float = 2e-4
    batch_size: int = 1
    gradient_accumulation_steps: int = 4
    max_length: int = 1024
    seed: int = 42
    logging_steps: int = 1
    save_steps: int = 20
    save_total_limit: int = 2
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    lr_scheduler: str = "linear"
    method: str = cli_arg("lora", flag="--method", choices=lambda: TrainSettings.METHODS, help=(
        "train a LoRA adapter (DIR/adapter) or every weight (DIR/model, a model folder --model takes); default: the "
        "config's train.method, lora"))
    loss_on: str = cli_arg("answer", flag="--loss-on", choices=lambda: TrainSettings.LOSS_ON, help=(
        "the answer tokens the loss is on: all of them; the citation marks' and the token that closes each (which "
        "documents to cite, and where citing stops); or the marks' alone; default: the config's train.loss_on, "
        "answer"))

    #: What ``method`` may be.
    METHODS: ClassVar[tuple[str, ...]] = ("lora", "full")
    #: What ``loss_on`` may be.
    LOSS_ON: ClassVar[tuple[str, ...]] = ("answer", "citations", "marks")

    def __post_init__(self) -> None:
        if self.method not in self.METHODS:
            _fail("train.method", f"one of {', '.join(self.METHODS)}", self.method)
        if self.loss_on not in self.LOSS_ON:
            _fail("train.loss_on", f"one of {', '.join(self.LOSS_ON)}", self.loss_on)
        setfield(self, "train.epochs", positive)
        setfield(self, "train.max_steps", integer, minimum=1, optional=True)
        setfield(self, "train.learning_rate", positive)
        for name in ("batch_size", "gradient_accumulation_steps", "max_length", "logging_steps", "save_steps",
                     "save_total_limit"):
            setfield(self, f"train.{name}", integer, minimum=1)
        setfield(self, "train.seed", seed)
        setfield(self, "train.warmup_ratio", number, minimum=0, maximum=0.999)
        setfield(self, "train.weight_decay", number, minimum=0)
        setfield(self, "train.lr_scheduler", string, nonempty=True,
                 expected="a transformers scheduler name (linear, cosine, constant, ...)")


@dataclass(frozen=True)
class RewardSettings:
    """The reward of one sampled answer (:mod:`mirage.tune.reward`): the weights of its terms (a weight of 0 skips
    the term, and its model passes), ``faithfulness_scale`` (nats per token of drop that give the faithfulness term
    1 - 1/e), and the GRPO stage: ``beta`` (the KL penalty against the starting model), ``num_generations`` answers
    sampled per prompt at ``temperature``, each at most ``max_completion_length`` tokens. ``selfcite`` (SelfCite's
    reward of the answer's own citations, ``selfcite_scale`` nats per token giving it 1 - 1/e) weighs 0 unless a
    config gives it a weight."""

    rage: float = 1.0
    agreement: float = 0.5
    faithfulness: float = 0.5
    format: float = 0.5
    permutation: float = 0.5
    selfcite: float = 0.0
    faithfulness_scale: float = 1.0
    selfcite_scale: float = 1.0
    beta: float = 0.04
    num_generations: int = 4
    max_completion_length: int = 64
    temperature: float = 1.0

    def __post_init__(self) -> None:
        for name in (*self.TERMS, "beta"):
            setfield(self, f"reward.{name}", number, minimum=0)
        if not any(getattr(self, name) for name in self.TERMS):
            raise ConfigError(f"reward: every term weight ({', '.join(self.TERMS)}) is 0; give one a positive weight.")
        setfield(self, "reward.faithfulness_scale", positive)
        setfield(self, "reward.selfcite_scale", positive)
        setfield(self, "reward.num_generations", integer, minimum=2)
        setfield(self, "reward.max_completion_length", integer, minimum=1)
        setfield(self, "reward.temperature", positive)

    #: The reward's terms (:mod:`mirage.tune.reward`), each a weight field.
    TERMS: ClassVar[tuple[str, ...]] = ("rage", "agreement", "faithfulness", "format", "permutation", "selfcite")

    @property
    def weights(self) -> dict[str, float]:
        """The term weights by term name."""
        return {name: getattr(self, name) for name in self.TERMS}


#: The preference losses ``mirage tune dpo`` takes (trl's ``DPOConfig.loss_type`` names): DPO's ``sigmoid``, IPO,
#: the hinge (SLiC) and robust DPO.
PreferenceLoss = Literal["sigmoid", "ipo", "hinge", "robust"]


@dataclass(frozen=True)
class PreferenceSettings:
    """The preference stage (:mod:`mirage.tune.dpo`): ``beta`` (the strength of the implicit KL against the starting
    model; trl's DPO ``beta``) and ``loss`` (:data:`PreferenceLoss`)."""

    beta: float = 0.1
    loss: PreferenceLoss = "sigmoid"

    def __post_init__(self) -> None:
        setfield(self, "preference.beta", positive)
        if self.loss not in get_args(PreferenceLoss):
            _fail("preference.loss", f"one of {', '.join(get_args(PreferenceLoss))}", self.loss)


_TUNE_SECTIONS = {"prompt": PromptConfig, "lora": LoraSettings, "train": TrainSettings, "reward": RewardSettings,
                  "preference": PreferenceSettings}


@dataclass(frozen=True)
class TuneConfig:
    """One fine-tuning run: the base ``model`` (any name :func:`mirage.attribution.models.load_model` takes), the
    training ``data`` (files written by ``mirage tune data``), the RAG ``prompt`` the examples are rendered with
    (mirage's prompt section: the training prompt is the inference prompt), the ``adapter`` to start from (the SFT
    adapter, for the reward stage), ``device``/``dtype`` (null: mirage's defaults, fp32 on a CPU) and the sections
    above."""

    model: str = cli_arg(DEFAULT_MODEL, flag="--model", cli_default=None, help=(
        "base model: an embedded name, a Hugging Face id or a local folder (default: the config's model)"))
    data: tuple[str, ...] = cli_arg((), flag="--data", metavar="FILE", help=(
        "training set(s) (default: the config's data)"))
    adapter: str | None = cli_arg(None, flag="--adapter", help="the SFT adapter to start from (default: the config's)")
    device: str | None = None
    dtype: str | None = None
    prompt: PromptConfig = field(default_factory=PromptConfig)
    #: More prompt templates the training examples are rendered with beside ``prompt`` (names, as ``prompt.name``
    #: takes them), so that what the model learns is not tied to one wording: each example is rendered with one of
    #: ``prompt.name`` and these, picked by a digest of its id (:meth:`example_prompt`: the same on every run, about
    #: as many examples each). ``prompt`` stays the adapter's inference prompt. Empty (the default): ``prompt`` alone.
    also_prompts: tuple[str, ...] = cli_arg((), flag="--also-prompts", metavar="NAME", cli_default=None, help=(
        "more prompt templates to train with beside the config's prompt, each example rendered with one of them "
        "(picked by a digest of its id), e.g. selfcitation_marked short (default: the config's also_prompts, none)"))
    lora: LoraSettings = field(default_factory=LoraSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    reward: RewardSettings = field(default_factory=RewardSettings)
    preference: PreferenceSettings = field(default_factory=PreferenceSettings)

    def __post_init__(self) -> None:
        setfield(self, "tune.model", string, path=True, nonempty=True,
                 expected="a model name, Hugging Face id or local path")
        for name in ("adapter", "device", "dtype"):
            setfield(self, f"tune.{name}", string, optional=True, path=True)
        setfield(self, "tune.data", paths, expected="a file or a list of files")
        if not all(self.data):
            _fail("tune.data", "a file or a list of files", list(self.data))
        setfield(self, "tune.also_prompts", paths, expected="a list of prompt template names")
        if not all(self.also_prompts) or len(set(self.training_prompts())) < 1 + len(self.also_prompts):
            _fail("tune.also_prompts", f"distinct prompt template names other than prompt.name "
                  f"({self.prompt.name!r})", list(self.also_prompts))
        for name, section_cls in _TUNE_SECTIONS.items():
            if not isinstance(getattr(self, name), section_cls):
                raise ConfigError(f"TuneConfig.{name} must be a {section_cls.__name__}; build the tree from plain "
                                  "dicts with TuneConfig.from_dict.")

    def training_prompts(self) -> tuple[str, ...]:
        """The names of the prompt templates the examples are rendered with: ``prompt.name``, then ``also_prompts``."""
        return (self.prompt.name, *self.also_prompts)

    def example_prompt(self, example_id: str) -> PromptConfig:
        """The prompt an example with id ``example_id`` is trained in: ``prompt`` without ``also_prompts``;
        otherwise the template of :meth:`training_prompts` that a SHA-256 digest of the id picks (the rest of the
        prompt section, its chat template and system message, as ``prompt`` has it)."""
        if not self.also_prompts:
            return self.prompt
        names = self.training_prompts()
        name = names[int(hashlib.sha256(example_id.encode("utf-8")).hexdigest()[:12], 16) % len(names)]
        return self.prompt if name == self.prompt.name else dataclasses.replace(self.prompt, name=name, path=None)

    def to_dict(self) -> dict[str, Any]:
        """The tree as nested dicts, ``also_prompts`` only where it names some (the records of runs before it keep
        their settings)."""
        out = dataclasses.asdict(self)
        out["data"] = list(self.data)
        if self.also_prompts:
            out["also_prompts"] = list(self.also_prompts)
        else:
            del out["also_prompts"]
        out["lora"]["target_modules"] = (self.lora.target_modules if isinstance(self.lora.target_modules, str)
                                         else list(self.lora.target_modules))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> TuneConfig:
        """From a nested mapping (a YAML file's); unknown keys are a ConfigError naming them."""
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(map(str, set(data) - known))
        if unknown:
            raise ConfigError(f"Unknown key(s) {unknown} in the tune config; known: {sorted(known)}.")
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key in _TUNE_SECTIONS:
                kwargs[key] = _section(key, value)
            elif value is not None or key in ("adapter", "device", "dtype"):
                kwargs[key] = value
        return cls(**kwargs)

    @classmethod
    def from_yaml(cls, path: str | Path) -> TuneConfig:
        """From a YAML file; every problem is a ConfigError starting with the path."""
        data = read_config_file(path)
        try:
            return cls.from_dict(data)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from err

    def replace(self, **changes: Any) -> TuneConfig:
        """A copy with top-level values replaced (None leaves a value as it is) and sections updated from
        mappings: ``cfg.replace(model="gemma3-270m", train={"epochs": 2})``."""
        updated: dict[str, Any] = {}
        for key, value in changes.items():
            if key in _TUNE_SECTIONS:
                if value:
                    updated[key] = _section(key, value, base=getattr(self, key))
            elif key not in {f.name for f in fields(self)}:
                raise ConfigError(f"Unknown key {short_repr(key)} in the tune config.")
            elif value is not None:
                updated[key] = value
        return dataclasses.replace(self, **updated)


def _section(name: str, value: Any, base: Any = None) -> Any:
    """Section ``name`` from a mapping of its fields (over ``base`` when given), checking the key names."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"tune config section {short_repr(name)} must be a mapping of fields, "
                          f"got {type(value).__name__}.")
    section_cls = _TUNE_SECTIONS[name]
    known = {f.name for f in fields(section_cls)}
    unknown = sorted(map(str, set(value) - known))
    if unknown:
        raise ConfigError(f"Unknown key(s) {short_repr(unknown)} in tune config section {short_repr(name)}; "
                          f"known: {sorted(known)}.")
    return dataclasses.replace(base, **value) if base is not None else section_cls(**value)
