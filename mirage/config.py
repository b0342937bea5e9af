"""One frozen configuration tree for Python, YAML files and the CLI, validated on construction."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

CTIMetric = Literal["kl_noctx_ctx", "kl_ctx_noctx", "js", "prob_diff"]
CTISelector = Literal["std", "threshold"]
CCIMethod = Literal["saliency", "input_x_gradient", "integrated_gradients"]
PercentRule = Literal["range", "percentile"]
PromptName = Literal["selfcitation", "standard"]


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field and the fix."""


def _check_literal(owner: str, name: str, value: Any, literal: Any) -> None:
    allowed = get_args(literal)
    if value not in allowed:
        raise ConfigError(f"{owner}.{name}={value!r} is not valid; choose one of {', '.join(map(repr, allowed))}.")


@dataclass(frozen=True)
class PromptConfig:
    """Which prompt template (``configs/prompts/<name>.yaml``) builds the RAG prompt."""

    name: str = "selfcitation"
    #: Path of a custom template YAML; overrides ``name``.
    path: str | None = None
    #: Use the tokenizer's chat template: None = as the model registry / tokenizer says.
    chat_template: bool | None = None
    #: Optional system message for chat templates.
    system: str | None = None


@dataclass(frozen=True)
class GenerationConfig:
    """How answers are generated when none is given."""

    max_new_tokens: int = 200
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 42

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ConfigError("generation.max_new_tokens must be >= 1.")
        if self.temperature <= 0:
            raise ConfigError("generation.temperature must be > 0 (use do_sample=false for greedy decoding).")
        if not 0 < self.top_p <= 1:
            raise ConfigError("generation.top_p must be in (0, 1].")


@dataclass(frozen=True)
class CTIConfig:
    """Context-sensitive token identification.

    ``metric``: ``kl_noctx_ctx`` = KL(P_no-ctx || P_ctx), the default because it is what the authors' released code
    computes (inseq's ``kl_divergence`` step score with the contextless input as the original); ``kl_ctx_noctx`` =
    KL(P_ctx || P_no-ctx), the direction written in the paper; ``js`` = Jensen-Shannon divergence; ``prob_diff`` =
    p_ctx(y) - p_no-ctx(y) of the answer token.
    ``selector``: ``std`` keeps tokens with |score| >= mean + std_k * std over the answer (example-level, MIRAGE-EX);
    ``threshold`` keeps |score| >= ``threshold`` (calibrated, MIRAGE-CAL).
    """

    metric: CTIMetric = "kl_noctx_ctx"
    selector: CTISelector = "std"
    std_k: float = 1.0
    threshold: float | None = None

    def __post_init__(self) -> None:
        _check_literal("cti", "metric", self.metric, CTIMetric)
        _check_literal("cti", "selector", self.selector, CTISelector)
        if self.selector == "threshold" and self.threshold is None:
            raise ConfigError("cti.selector='threshold' needs cti.threshold (a calibrated value, e.g. from calibration).")


@dataclass(frozen=True)
class CCIConfig:
    """Contextual cues imputation.

    Exactly one of ``top_k`` and ``top_percent`` selects context tokens per context-sensitive answer token.
    ``percent_rule``: ``range`` keeps scores >= max - p/100 * (max - min), the rule of the authors' released code and
    the default, because the published numbers come from it; ``percentile`` keeps scores at or above the (100 - p)-th
    percentile, the paper's wording.
    ``batch_size``: selected tokens per backward pass; None adapts it to free memory.
    """

    method: CCIMethod = "saliency"
    top_k: int | None = None
    top_percent: float | None = 5.0
    percent_rule: PercentRule = "range"
    batch_size: int | None = None
    ig_steps: int = 16

    def __post_init__(self) -> None:
        _check_literal("cci", "method", self.method, CCIMethod)
        _check_literal("cci", "percent_rule", self.percent_rule, PercentRule)
        if (self.top_k is None) == (self.top_percent is None):
            raise ConfigError("cci: set exactly one of top_k and top_percent (e.g. top_k=3 or top_percent=5).")
        if self.top_k is not None and self.top_k < 1:
            raise ConfigError("cci.top_k must be >= 1.")
        if self.top_percent is not None and not 0 < self.top_percent <= 100:
            raise ConfigError("cci.top_percent must be in (0, 100].")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError("cci.batch_size must be >= 1 (or null to adapt to free memory).")


@dataclass(frozen=True)
class AggregationConfig:
    """How token-level attributions become sentence citations."""

    max_citations: int = 3
    #: Context tokens listed per answer token in the result.
    top_context_tokens: int = 5

    def __post_init__(self) -> None:
        if self.max_citations < 1:
            raise ConfigError("aggregation.max_citations must be >= 1.")


@dataclass(frozen=True)
class MirageConfig:
    """The whole configuration tree."""

    prompt: PromptConfig = field(default_factory=PromptConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    cti: CTIConfig = field(default_factory=CTIConfig)
    cci: CCIConfig = field(default_factory=CCIConfig)
    aggregation: AggregationConfig = field(default_factory=AggregationConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MirageConfig:
        """Build from a nested dict; unknown keys are an error naming the key."""
        sections = {f.name: f.type for f in fields(cls)}
        kwargs = {}
        for key, value in (data or {}).items():
            if key not in sections:
                raise ConfigError(f"Unknown config section {key!r}; expected one of {sorted(sections)}.")
            section_cls = _SECTIONS[key]
            known = {f.name for f in fields(section_cls)}
            unknown = set(value or {}) - known
            if unknown:
                raise ConfigError(f"Unknown key(s) {sorted(unknown)} in config section {key!r}; known: {sorted(known)}.")
            kwargs[key] = section_cls(**(value or {}))
        return cls(**kwargs)

    @classmethod
    def from_yaml(cls, path: str | Path) -> MirageConfig:
        """Load from a YAML file with the same nested layout as ``to_dict``."""
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML ({err}).") from err
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of sections (prompt, generation, cti, cci, aggregation).")
        data = {k: v for k, v in data.items() if k in _SECTIONS or k not in _EXPERIMENT_KEYS}
        return cls.from_dict(data)

    def replace(self, **sections: dict[str, Any]) -> MirageConfig:
        """A copy with some fields of some sections replaced: ``cfg.replace(cti={"std_k": 0})``."""
        updated = {
            name: dataclasses.replace(getattr(self, name), **changes) for name, changes in sections.items() if changes
        }
        return dataclasses.replace(self, **updated)


_SECTIONS = {
    "prompt": PromptConfig,
    "generation": GenerationConfig,
    "cti": CTIConfig,
    "cci": CCIConfig,
    "aggregation": AggregationConfig,
}
#: Top-level keys of experiment files (``configs/*.yaml``) that are not pipeline settings.
_EXPERIMENT_KEYS = {"model", "dataset", "description", "data", "text", "limit", "seeds", "nli"}
