"""One frozen configuration tree for Python, YAML files and the CLI, validated on construction.

Every section checks its fields' types and ranges in ``__post_init__`` with :mod:`mirage.checks` (the checks every
config class shares) and raises :class:`ConfigError` naming the field as ``section.field`` and what it expects
(``cci.top_k must be an integer >= 1, got 3.7.``):

- integer fields take an ``int`` (never a ``bool``); an integer-valued float such as ``3.0`` (what YAML gives for
  ``3.0``) is accepted and stored as ``3``; ``3.7``, ``"3"``, NaN and infinities are rejected;
- number fields take an ``int`` or ``float`` (never a ``bool``), stored as ``float``, and must be finite;
  ``cti.threshold`` may also be null;
- boolean fields take ``true``/``false`` only; string fields take a string (``prompt.path`` also a ``pathlib.Path``,
  stored as ``str``), or null where the field is optional;
- ``MirageConfig.from_dict`` / ``from_yaml`` / ``replace`` reject unknown sections and keys and sections that are not
  mappings; ``from_yaml`` turns a missing, unreadable, non-UTF-8 or invalid YAML file into a ConfigError naming it.

A field settable from the command line declares its flag in its metadata: ``flag``, ``help``, ``implies`` (other
fields of the section set with it unless also given, by the flag and by ``MirageConfig.replace``) and ``exclusive``
(a name shared by fields that choose the same thing: their flags exclude each other); :mod:`mirage.runs.experiment`
makes every run command's flags from these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from mirage.checks import ConfigError, boolean, integer, literal, number, registered, seed, setfield, show, string
from mirage.compat import CHANGED_DEFAULTS, RULE_ALIASES, renamed
from mirage.registry import CCI_METHODS, CITATION_RULES, CTI_METRICS, CTI_SELECTORS

__all__ = ["BENCHMARK_DEFAULTS", "COMMAND_SECTIONS", "DEFAULT_MODEL", "EXPERIMENT_KEYS", "PRESETS",
           "AggregationConfig", "CCIConfig", "CCIMethod", "CTIConfig", "CTIMetric", "CTISelector",
           "CitationRule", "ConfigError", "ContextView", "GenerationConfig", "MirageConfig", "PromptConfig",
           "flags_for_changed_defaults", "preset_option", "read_config_file", "read_yaml", "section_dict",
           "with_implied"]

#: The model every command and config loads unless told another (an embedded name, see
#: :func:`mirage.attribution.models.load_model`).
DEFAULT_MODEL = "smollm2-135m-instruct"

#: The built-in CTI metrics, CTI selectors, CCI methods (and citation rules, below); ``cti.metric`` / ``cti.selector``
#: / ``cci.method`` / ``aggregation.rule`` take any name registered in :data:`mirage.registry.CTI_METRICS` /
#: :data:`mirage.registry.CTI_SELECTORS` / :data:`mirage.registry.CCI_METHODS` /
#: :data:`mirage.registry.CITATION_RULES`, these included (a built-in name is accepted before the stages that
#: register the built-ins are imported: they bring torch).
CTIMetric = Literal["kl_noctx_ctx", "kl_ctx_noctx", "js", "prob_diff"]
CTISelector = Literal["std", "threshold"]
CCIMethod = Literal["saliency", "input_x_gradient", "integrated_gradients", "attention_last", "attention_all",
                    "rollout", "attnlrp"]
PercentRule = Literal["range", "percentile"]
#: ``cti.std_kind``: the spread in mean + k·std: ``sample`` (n - 1, torch's and inseq's) or ``population`` (n, numpy's,
#: the authors' released scripts).
StdKind = Literal["sample", "population"]
#: ``cti.threshold_floor``: ``none``, or ``mean``: no token below its answer's mean CTI score is selected, whatever
#: the threshold (the authors' scripts read CCI from an inseq run at mean + 0·std, so their calibrated threshold can
#: never reach below an answer's mean).
ThresholdFloor = Literal["none", "mean"]
#: ``cci.target``: the attributed quantity: ``logprob`` = log p(y) - log p(y_nc) or ``prob`` = p(y) - p(y_nc).
CCITarget = Literal["logprob", "prob"]
#: ``aggregation.ranking``: how a sentence's documents are ordered: by summed per-token ``shares`` of kept saliency,
#: or by summed raw kept ``saliency`` (the authors' ELI5 script).
DocRanking = Literal["shares", "saliency"]
#: ``cci.precision``: CCI's differentiable pass in the model's own dtype, or under autocast to a 16-bit float.
CCIPrecision = Literal["model", "bfloat16", "float16"]
#: ``cci.top_percent`` when neither it nor ``cci.top_k`` is set.
DEFAULT_TOP_PERCENT = 5.0
PromptName = Literal["selfcitation", "standard", "short", "cora_mgen"]  # the built-in templates (configs/prompts)
ContextView = Literal["all", "content"]
CitationRule = Literal["reference", "likelihood", "selfcite", "selfcite_answer"]


@dataclass(frozen=True)
class PromptConfig:
    """Which prompt template (``configs/prompts/<name>.yaml``) builds the RAG prompt."""

    name: str = field(default="selfcitation", metadata={
        "flag": "--prompt", "help": "prompt template: selfcitation (ALCE, asks for [n] citations), standard, short "
        "(a one-line instruction), selfcitation_marked (selfcitation, each document sentence ending with its "
        "number), or cora_mgen (CORA mGEN's input format, for encoder-decoders)"})
    #: Path of a custom template YAML; overrides ``name``.
    path: str | None = None
    #: Use the tokenizer's chat template: None = as the model registry / tokenizer says.
    chat_template: bool | None = None
    #: Optional system message for chat templates.
    system: str | None = None

    def __post_init__(self) -> None:
        setfield(self, "prompt.name", string)
        setfield(self, "prompt.path", string, optional=True, path=True)  # a pathlib.Path is stored as str
        setfield(self, "prompt.chat_template", boolean, optional=True, hint="or null to follow the model")
        setfield(self, "prompt.system", string, optional=True)


@dataclass(frozen=True)
class GenerationConfig:
    """How answers are generated when none is given."""

    max_new_tokens: int = field(default=200, metadata={
        "flag": "--max-new-tokens", "help": "tokens to generate when an item has no output"})
    do_sample: bool = field(default=False, metadata={
        "flag": "--sample", "help": "sample answers (seeds then differ) instead of greedy"})
    temperature: float = field(default=1.0, metadata={"flag": "--temperature", "help": "sampling temperature"})
    top_p: float = field(default=1.0, metadata={"flag": "--top-p", "help": "nucleus sampling p"})
    seed: int = field(default=42, metadata={"flag": "--seed", "help": "generation seed"})

    def __post_init__(self) -> None:
        setfield(self, "generation.max_new_tokens", integer, minimum=1)
        setfield(self, "generation.do_sample", boolean)
        setfield(self, "generation.temperature", number, above=0, hint="use do_sample=false for greedy decoding")
        setfield(self, "generation.top_p", number, above=0, maximum=1)
        setfield(self, "generation.seed", seed)


@dataclass(frozen=True)
class CTIConfig:
    """Context-sensitive token identification.

    ``metric``: ``kl_noctx_ctx`` = KL(P_no-ctx || P_ctx), the default because it is what the authors' released code
    computes (inseq's ``kl_divergence`` step score with the contextless input as the original); ``kl_ctx_noctx`` =
    KL(P_ctx || P_no-ctx), the direction written in the paper; ``js`` = Jensen-Shannon divergence; ``prob_diff`` =
    p_ctx(y) - p_no-ctx(y) of the answer token.
    ``selector``: ``std`` keeps tokens with |score| >= mean + std_k * std over the answer (example-level, MIRAGE-EX);
    ``threshold`` keeps |score| >= ``threshold`` (calibrated, MIRAGE-CAL); any other name registered with
    :func:`mirage.attribution.cti.register_cti_selector`. Left unset (None) it follows ``threshold``:
    ``CTIConfig(threshold=0.5)`` selects by that threshold, ``CTIConfig()`` by ``std``.
    """

    metric: str = field(default="kl_noctx_ctx", metadata={
        "flag": "--cti-metric", "help": "kl_noctx_ctx (reference, default), kl_ctx_noctx (paper), js, prob_diff"})
    selector: str | None = None
    std_k: float = field(default=1.0, metadata={
        "flag": "--cti-std", "help": "CTI: keep tokens with score >= mean + K*std (MIRAGE-EX); default 1",
        "implies": {"selector": "std"}, "exclusive": "cti selector"})
    threshold: float | None = field(default=None, metadata={
        "flag": "--cti-threshold", "help": "CTI: calibrated fixed threshold (MIRAGE-CAL)",
        "implies": {"selector": "threshold"}, "exclusive": "cti selector"})
    std_kind: StdKind = field(default="sample", metadata={
        "flag": "--cti-std-kind", "help": "the std of mean + K*std: sample (inseq, default) or population (the "
        "authors' scripts; a two-token answer then cites its larger token)", "later": True})
    threshold_floor: ThresholdFloor = field(default="none", metadata={
        "flag": "--cti-threshold-floor", "help": "none (default) or mean: never select a token below its answer's "
        "mean score, whatever the threshold (the authors' scripts; matters for calibrated thresholds)",
        "later": True})

    def __post_init__(self) -> None:
        setfield(self, "cti.metric", registered, registry=CTI_METRICS, builtin=CTIMetric,
                 how="mirage.attribution.cti.register_cti_metric")
        setfield(self, "cti.std_kind", literal, choices=StdKind)
        setfield(self, "cti.threshold_floor", literal, choices=ThresholdFloor)
        if self.selector is None:
            object.__setattr__(self, "selector", "std" if self.threshold is None else "threshold")
        setfield(self, "cti.selector", registered, registry=CTI_SELECTORS, builtin=CTISelector,
                 how="mirage.attribution.cti.register_cti_selector")
        setfield(self, "cti.std_k", number)
        setfield(self, "cti.threshold", number, optional=True, hint="or null with selector='std'")
        if self.selector == "threshold" and self.threshold is None:
            raise ConfigError("cti.selector='threshold' needs cti.threshold "
                              "(a calibrated value, e.g. from calibration).")


@dataclass(frozen=True)
class CCIConfig:
    """Contextual cues imputation.

    One of ``top_k`` and ``top_percent`` selects context tokens per context-sensitive answer token: setting one
    leaves the other unset; with neither, ``top_percent`` is 5 (``CCIConfig(top_k=3)`` keeps the top 3 tokens).
    ``percent_rule``: ``range`` keeps scores >= max - p/100 * (max - min), the rule of the authors' released code and
    the default, because the published numbers come from it; ``percentile`` keeps scores at or above the (100 - p)-th
    percentile, the paper's wording.
    ``batch_size``: selected tokens per backward pass; None adapts it to free memory.
    ``precision``: ``model`` (default) runs CCI's forward and backward passes in the model's dtype; ``bfloat16`` or
    ``float16`` runs them under autocast to that type (faster where the hardware has it: GPUs, CPUs with AMX or
    AVX512-BF16). CTI stays in the model's dtype, so the context-sensitive tokens are those of the default; the
    saliency, and through it the citations, are approximate (docs/method.md, "Lower precision").
    """

    method: str = field(default="saliency", metadata={
        "flag": "--cci-method", "help": "saliency (default), input_x_gradient, integrated_gradients (gradients of the "
        "contrastive target), or a document method that scores every context token: attention_last, attention_all, "
        "rollout, attnlrp (its rows of the selected tokens)"})
    top_k: int | None = field(default=None, metadata={
        "flag": "--cci-top-k", "help": "CCI: keep the N most salient context tokens", "implies": {"top_percent": None},
        "exclusive": "cci selector"})
    top_percent: float | None = field(default=None, metadata={
        "flag": "--cci-top-percent", "help": "CCI: keep the top P%% of context tokens (default 5)",
        "implies": {"top_k": None}, "exclusive": "cci selector"})
    percent_rule: PercentRule = field(default="range", metadata={
        "flag": "--cci-percent-rule", "help": "range (max - p(max-min), reference code) or percentile"})
    batch_size: int | None = field(default=None, metadata={
        "flag": "--cci-batch-size", "help": "selected tokens per backward pass (default: as many as fit the budget "
        "or free memory; one on a CPU without checkpointing)"})
    ig_steps: int = 16
    precision: CCIPrecision = field(default="model", metadata={
        "flag": "--cci-precision", "help": "model (default: the model's dtype), bfloat16 or float16: CCI's passes "
        "under autocast, faster on GPUs and CPUs with AMX/AVX512-BF16; CTI and the selected tokens stay exact, "
        "saliency is approximate", "later": True})
    target: CCITarget = field(default="logprob", metadata={
        "flag": "--cci-target", "help": "attributed quantity: logprob (log p(y) - log p(y_nc); inseq, the authors' "
        "ELI5 script; the default) or prob (p(y) - p(y_nc); the paper's Eq. 2, the authors' XOR-AttriQA script; "
        "the default of mirage score xor-attriqa)",
        "later": True})

    def __post_init__(self) -> None:
        setfield(self, "cci.method", registered, registry=CCI_METHODS, builtin=CCIMethod,
                 how="mirage.attribution.cci.register_cci_method")
        setfield(self, "cci.target", literal, choices=CCITarget)
        setfield(self, "cci.percent_rule", literal, choices=PercentRule)
        setfield(self, "cci.precision", literal, choices=CCIPrecision)
        if self.top_k is None and self.top_percent is None:
            object.__setattr__(self, "top_percent", DEFAULT_TOP_PERCENT)
        if self.top_k is not None and self.top_percent is not None:
            raise ConfigError(f"cci: set one of top_k and top_percent, not both (got top_k={show(self.top_k)}, "
                              f"top_percent={show(self.top_percent)}); e.g. top_k=3 or top_percent=5.")
        setfield(self, "cci.top_k", integer, minimum=1, optional=True)
        setfield(self, "cci.top_percent", number, above=0, maximum=100, optional=True)
        setfield(self, "cci.batch_size", integer, minimum=1, optional=True, hint="null adapts it to free memory")
        setfield(self, "cci.ig_steps", integer, minimum=1)


@dataclass(frozen=True)
class AggregationConfig:
    """How token-level attributions become sentence citations."""

    max_citations: int = field(default=3, metadata={
        "flag": "--max-citations", "help": "at most N documents cited per sentence (default 3)"})
    #: Context tokens listed per answer token in the result.
    top_context_tokens: int = 5
    #: Context tokens attribution considers: ``all`` of the documents block (the reference's) or only ``content``,
    #: the documents' titles and texts (not the prompt's ``Document [1](Title: …`` scaffolding).
    context: ContextView = field(default="all", metadata={
        "flag": "--context", "help": "context tokens to attribute to: all (reference, default) or content "
        "(document titles and texts, not the prompt's scaffolding)"})
    #: Keep the whole CCI saliency matrix (selected answer tokens × context tokens, float16) in the result.
    keep_saliency: bool = field(default=False, metadata={
        "flag": "--keep-saliency", "help": "keep the whole saliency matrix (selected tokens x context tokens)"})
    #: How a sentence's documents are chosen: ``reference`` (the union of the documents behind its context-sensitive
    #: tokens, the method's rule) or ``likelihood`` (the passage-likelihood classifier: a logistic regression over
    #: how much each passage alone raises the answer's likelihood, and the largest |CTI|; no CCI;
    #: :mod:`mirage.likelihood.classifier`; costs one single-document pass per document), ``selfcite`` (SelfCite's
    #: best-rewarded set of one or two documents per sentence, :func:`mirage.pipeline.selfcite_citations`;
    #: ``selfcite_answer``: the one set best over the whole answer, :func:`mirage.pipeline.selfcite_answer_citations`),
    #: or any rule registered with :func:`mirage.pipeline.register_citation_rule`. ``learned``, its old name, is
    #: accepted with a DeprecationWarning.
    rule: str = field(default="reference", metadata={
        "flag": "--citation-rule", "help": "reference (default: the documents behind the context-sensitive tokens) "
        "or likelihood (the passage-likelihood classifier: passage likelihoods and the largest |CTI|, no CCI; "
        "'learned' is its old name) or selfcite (SelfCite's reward: per sentence the best of every 1- or 2-document "
        "set, by its likelihood with only them minus without them) or selfcite_answer (the same reward over the whole "
        "answer: one set for the answer, cited by the sentences it makes likelier)"})
    #: The likelihood rule's classifier (a ``learned.json``, or ``shipped:MODEL``); default: the one shipped for the
    #: model, if any.
    learned_model: str | None = field(default=None, metadata={
        "flag": "--learned-model", "help": "classifier file for --citation-rule likelihood, or shipped:MODEL (default: "
        "the one shipped for the embedded model)"})
    #: How a sentence's cited documents are ordered before ``max_citations`` cuts them: ``shares`` (each
    #: context-sensitive token's kept saliency split into per-document shares, summed; mirage) or ``saliency`` (the
    #: raw kept saliency summed over the sentence's tokens; the authors' ELI5 script).
    ranking: DocRanking = field(default="shares", metadata={
        "flag": "--doc-ranking", "help": "order of a sentence's cited documents: shares (summed per-token shares, "
        "default) or saliency (summed raw saliency, the authors' ELI5 script)", "later": True})

    def __post_init__(self) -> None:
        setfield(self, "aggregation.max_citations", integer, minimum=1)
        setfield(self, "aggregation.top_context_tokens", integer, minimum=0)
        setfield(self, "aggregation.context", literal, choices=ContextView)
        object.__setattr__(self, "rule", renamed(self.rule, RULE_ALIASES, "aggregation.rule={old!r} is now called "
                                                 "{new!r}", stacklevel=3))
        setfield(self, "aggregation.rule", registered, registry=CITATION_RULES, builtin=CitationRule,
                 how="mirage.pipeline.register_citation_rule")
        setfield(self, "aggregation.ranking", literal, choices=DocRanking)
        setfield(self, "aggregation.learned_model", string, optional=True, path=True)
        setfield(self, "aggregation.keep_saliency", boolean)


@dataclass(frozen=True)
class MirageConfig:
    """The whole configuration tree."""

    prompt: PromptConfig = field(default_factory=PromptConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    cti: CTIConfig = field(default_factory=CTIConfig)
    cci: CCIConfig = field(default_factory=CCIConfig)
    aggregation: AggregationConfig = field(default_factory=AggregationConfig)
    #: The preset the tree started from (:data:`PRESETS`; fields set after it may differ from it), or None.
    preset: str | None = field(default=None, metadata={
        "flag": "--preset", "choices": lambda: list(PRESETS), "help": "start the pipeline from a preset: authors "
        "(the MIRAGE authors' released scripts, per benchmark) or inseq (inseq's attribute_context); the file's "
        "fields and the flags override it (docs/fidelity.md)"})

    def __post_init__(self) -> None:
        for name, section_cls in _SECTIONS.items():
            value = getattr(self, name)
            if not isinstance(value, section_cls):
                raise ConfigError(f"MirageConfig.{name} must be a {section_cls.__name__}, got "
                                  f"{type(value).__name__}; build the tree from plain dicts "
                                  "with MirageConfig.from_dict.")
        if self.preset is not None and self.preset not in PRESETS:
            raise ConfigError(f"preset={show(self.preset)} is not valid; choose one of "
                              f"{', '.join(map(repr, PRESETS))}.")

    def to_dict(self) -> dict[str, Any]:
        """The tree as nested dicts, without the fields added after stores were first written (``later`` in their
        metadata) while they are at their defaults: record keys and run fingerprints of existing runs stay valid.
        ``preset`` is there when the tree came from one."""
        out: dict[str, Any] = {name: section_dict(getattr(self, name)) for name in _SECTIONS}
        if self.preset is not None:
            out["preset"] = self.preset
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, *, benchmark: str | None = None) -> MirageConfig:
        """Build from a nested dict; unknown sections or keys and non-mapping sections are errors naming them.
        A ``preset`` key starts from that preset (for ``benchmark`` where it differs by benchmark,
        :meth:`from_preset`); the sections given override its fields. Without a preset, the fields not given take
        ``benchmark``'s defaults where it has its own (:data:`BENCHMARK_DEFAULTS`), mirage's elsewhere."""
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"a config must be a mapping of sections ({', '.join(_SECTIONS)}), "
                              f"got {type(data).__name__}.")
        if data.get("preset") is not None:
            sections = {key: value for key, value in data.items() if key != "preset"}
            for key in sections:
                _build_section(key, {})  # unknown sections are errors before the preset is applied
            return cls.from_preset(data["preset"], benchmark=benchmark).replace(**sections)
        given = {key: value for key, value in data.items() if key != "preset"}
        for key, defaults in BENCHMARK_DEFAULTS.get(benchmark or "", {}).items():
            section = given.get(key, {})
            if isinstance(section, Mapping):  # anything else is refused by _build_section, naming the section
                given[key] = {**defaults, **section}
        return cls(**{key: _build_section(key, value) for key, value in given.items()})

    @classmethod
    def from_preset(cls, name: str, *, benchmark: str | None = None) -> MirageConfig:
        """The tree a preset sets (:data:`PRESETS`), the rest at mirage's defaults, recording the preset's name.
        ``benchmark`` (``xor-attriqa``, ``eli5``; None: general use, as ELI5) picks the variant where the preset
        differs by benchmark: ``MirageConfig.from_preset("authors", benchmark="xor-attriqa")``."""
        if not isinstance(name, str) or name not in PRESETS:
            raise ConfigError(f"preset={show(name)} is not valid; choose one of {', '.join(map(repr, PRESETS))}.")
        sections = preset_sections(name, benchmark)
        return cls(**{key: _build_section(key, value) for key, value in sections.items()}, preset=name)

    @classmethod
    def from_yaml(cls, path: str | Path) -> MirageConfig:
        """Load from a YAML file with the same nested layout as ``to_dict``.

        Every problem with the file (missing, a directory, unreadable, not UTF-8 text, invalid YAML, invalid values)
        is a ConfigError whose message starts with the path.
        """
        data = read_config_file(path)
        data = {k: v for k, v in data.items()
                if k in _SECTIONS or (k not in EXPERIMENT_KEYS and k not in COMMAND_SECTIONS)}
        try:
            return cls.from_dict(data)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from err

    def replace(self, **sections: Mapping[str, Any] | None) -> MirageConfig:
        """A copy with some fields of some sections replaced: ``cfg.replace(cti={"std_k": 0})``.

        A field set here also sets the fields it implies unless they are given too (see :func:`with_implied`):
        ``replace(cci={"top_k": 3})`` clears ``cci.top_percent``, ``replace(cti={"threshold": 0.5})`` selects by it.
        """
        updated = {
            name: _build_section(name, changes, base=getattr(self, name, None))
            for name, changes in sections.items()
            if changes or name not in _SECTIONS
        }
        return dataclasses.replace(self, **updated)


def _build_section(name: Any, value: Any, base: Any = None) -> Any:
    """One section from a mapping of its fields (over ``base`` when given), checking section and key names."""
    if name not in _SECTIONS:
        raise ConfigError(f"Unknown config section {show(name)}; expected one of {sorted(_SECTIONS)}.")
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"config section {show(name)} must be a mapping of fields, got {type(value).__name__}.")
    section_cls = _SECTIONS[name]
    known = {f.name for f in fields(section_cls)}
    unknown = [key for key in value if key not in known]
    if unknown:
        shown = sorted(map(str, unknown))
        raise ConfigError(f"Unknown key(s) {show(shown)} in config section {show(name)}; known: {sorted(known)}.")
    if base is not None:
        return dataclasses.replace(base, **with_implied(name, value))
    return section_cls(**value)


def with_implied(section: str, changes: Mapping[str, Any]) -> dict[str, Any]:
    """``changes`` to a config section plus the fields that the changed fields imply (their metadata ``implies``),
    unless given too: ``{"top_k": 3}`` → ``{"top_k": 3, "top_percent": None}``. A field set to None implies nothing.
    Two changed fields implying different values of one field are a ConfigError naming both."""
    by_name = {f.name: f for f in fields(_SECTIONS[section])}
    out, source = dict(changes), dict[str, str]()
    for key, value in changes.items():
        if value is None:
            continue
        for other, implied in by_name[key].metadata.get("implies", {}).items():
            if other in changes:
                continue
            if other in source and out[other] != implied:
                raise ConfigError(f"{section}.{source[other]} and {section}.{key} are both set, and they ask for "
                                  f"different {section}.{other}; give one of them, or set {section}.{other} too.")
            out[other], source[other] = implied, key
    return out


#: Presets: name → benchmark (None: every other use) → the sections' fields it sets. ``authors``: what the MIRAGE
#: authors' released scripts compute (Betswish/MIRAGE-reproduce: ``sec4_alignment/MIRAGE_match.py`` for XOR-AttriQA,
#: ``sec5_longQA/mirage_cite.py`` for ELI5 and general use); ``inseq``: inseq's ``attribute_context`` with mirage's
#: document aggregation (what ``tests/peers/test_parity.py`` pins). docs/fidelity.md lists every choice.
PRESETS: dict[str, dict[str | None, dict[str, dict[str, Any]]]] = {
    "authors": {
        None: {"cti": {"metric": "kl_noctx_ctx", "std_k": 1.0, "std_kind": "population",
                        "threshold_floor": "mean"},
               "cci": {"method": "saliency", "target": "logprob", "top_k": None, "top_percent": 5.0,
                       "percent_rule": "range"},
               "aggregation": {"context": "all", "ranking": "saliency", "max_citations": 3, "rule": "reference"}},
        "xor-attriqa": {"cti": {"metric": "kl_noctx_ctx", "std_k": 1.0, "std_kind": "population",
                        "threshold_floor": "mean"},
                        "cci": {"method": "saliency", "target": "prob", "top_k": None, "top_percent": 5.0,
                                "percent_rule": "range"},
                        "aggregation": {"context": "content", "ranking": "saliency", "max_citations": 3,
                                        "rule": "reference"}},
    },
    "inseq": {
        None: {"cti": {"metric": "kl_noctx_ctx", "std_k": 1.0, "std_kind": "sample",
                        "threshold_floor": "none"},
               "cci": {"method": "saliency", "target": "logprob", "top_k": None, "top_percent": 5.0,
                       "percent_rule": "range"},
               "aggregation": {"context": "all", "ranking": "shares", "max_citations": 3, "rule": "reference"}},
    },
}
#: Where mirage's default differs by benchmark (fields neither given nor set by a preset): ``mirage score
#: xor-attriqa`` attributes p(y) - p(y_nc), the paper's Eq. 2 and the authors' XOR-AttriQA script, chosen on the
#: ``train`` / ``val`` splits (docs/fidelity.md, "The default, and why"); ELI5 and general use keep log p(y) - log
#: p(y_nc), the authors' ELI5 script and inseq's reference adapter.
BENCHMARK_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {"xor-attriqa": {"cci": {"target": "prob"}}}


def flags_for_changed_defaults(benchmark: str, config: Mapping[str, Any], command: str | None = None) -> list[str]:
    """The flags that give a run's recorded ``config`` (``MirageConfig.to_dict()`` as results store it) the values
    of :data:`mirage.compat.CHANGED_DEFAULTS` it ran with, where they are not today's defaults for ``benchmark``
    and ``command`` (the recorded command line, if any) neither names the flag nor a preset."""
    if command is not None and "--preset" in command.split():
        return []
    today = MirageConfig.from_dict({}, benchmark=benchmark)
    flags = {(section, f.name): f.metadata.get("flag") for section, cls in _SECTIONS.items() for f in fields(cls)}
    out: list[str] = []
    for bench, section, name, before in CHANGED_DEFAULTS:
        value = config.get(section, {}).get(name, before)
        flag = flags[(section, name)]
        if bench != benchmark or value == getattr(getattr(today, section), name) or flag is None:
            continue
        if command is None or flag not in command.split():
            out += [flag, str(value)]
    return out


#: Command options (not pipeline fields) a preset changes for one benchmark: ``authors`` calibrates MIRAGE-CAL's
#: CTI threshold per language, as the authors' ``MIRAGE_match.py`` does.
PRESET_OPTIONS: dict[tuple[str, str], dict[str, Any]] = {("authors", "xor-attriqa"): {"calibrate_by": "language"}}


def preset_sections(name: str, benchmark: str | None = None) -> dict[str, dict[str, Any]]:
    """The fields preset ``name`` sets for ``benchmark`` (its general variant where it has none for it)."""
    variants = PRESETS[name]
    return {key: dict(value) for key, value in variants.get(benchmark, variants[None]).items()}


def preset_option(preset: str | None, benchmark: str, option: str, default: Any) -> Any:
    """A command option's value under ``preset`` (:data:`PRESET_OPTIONS`), or ``default``."""
    return PRESET_OPTIONS.get((preset or "", benchmark), {}).get(option, default)


_SECTIONS = {
    "prompt": PromptConfig,
    "generation": GenerationConfig,
    "cti": CTIConfig,
    "cci": CCIConfig,
    "aggregation": AggregationConfig,
}
#: Top-level keys of experiment files (``configs/*.yaml``) that are not pipeline settings (read by
#: :class:`mirage.runs.experiment.ExperimentConfig`; ``MirageConfig.from_yaml`` skips them).
EXPERIMENT_KEYS = frozenset({"model", "dataset", "description", "data", "text", "limit", "seeds", "nli",
                             "adapter", "device_map", "max_memory", "quantization", "memory_budget"})
#: Sections of experiment files that configure one command rather than the pipeline (``bias:``, read by
#: ``mirage bias``); skipped by the pipeline and by :class:`mirage.runs.experiment.ExperimentConfig`.
COMMAND_SECTIONS = frozenset({"bias"})


def section_dict(section: Any) -> dict[str, Any]:
    """One section as a dict, its ``later`` fields (see :meth:`MirageConfig.to_dict`) left out at their defaults."""
    out = dataclasses.asdict(section)
    for f in fields(section):
        if f.metadata.get("later") and out[f.name] == f.default:
            del out[f.name]
    return out


#: How deeply a YAML file's values may nest (mirage's files nest a few levels).
MAX_YAML_DEPTH = 100


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases: an alias (``*name``) is refused where it stands, so that a few lines
    cannot expand into gigabytes (a "billion laughs" file) in the config or in an error message showing it."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"an alias (*{event.anchor}) repeats another value; mirage's YAML files take no "
                "aliases: write the value out", event.start_mark)
        if self.depth >= MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"values nested deeper than {MAX_YAML_DEPTH} levels",
                                              self.peek_event().start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def load_yaml(text: str) -> Any:
    """The value of a YAML text, read safely: no Python objects, no aliases, nesting and numbers bounded. Every
    problem is a ``yaml.YAMLError`` (with its line where known): what a caller turns into its one-line error."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader
    except RecursionError:
        raise yaml.YAMLError("values nested too deeply") from None
    except yaml.YAMLError:
        raise
    except ValueError as err:  # an integer of more digits than Python converts
        raise yaml.YAMLError(f"a value cannot be read ({str(err).split(';')[0]})") from None


def read_yaml(path: str | Path, *, name: str | None = None) -> Any:
    """The value of a YAML file (:func:`load_yaml`): the one reader of mirage's YAML files beside
    :func:`read_config_file` (which says more, for the files users write). A file that cannot be read or is not YAML
    is a ConfigError ``{name} cannot be read as YAML (reason).``; ``name`` defaults to ``{path}:``."""
    try:
        return load_yaml(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        reason = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ConfigError(f"{name or f'{path}:'} cannot be read as YAML ({reason[:200]}).") from None


def read_config_file(path: str | Path, *, expected: str = "a mapping of sections (prompt, generation, cti, cci, "
                     "aggregation)") -> dict[str, Any]:
    """The top-level mapping of a YAML config or experiment file (``expected``: what the file should hold, for the
    message when its top level is not a mapping, e.g. a protocol file's description).

    Every problem with the file (missing, a directory, unreadable, not UTF-8 text, invalid YAML, not a mapping) is a
    ConfigError whose message starts with the path.
    """
    file = Path(path)
    fix = "give the path of a YAML config file (sections prompt, generation, cti, cci, aggregation; see configs/)"
    if not file.exists():
        raise ConfigError(f"{path}: config file not found; {fix}.")
    if file.is_dir():
        raise ConfigError(f"{path}: is a directory, not a config file; {fix}.")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte {err.start} cannot be decoded; a binary file?); "
                          f"{fix}.") from err
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config file ({err.strerror or err}); check it is a readable "
                          f"file, or {fix}.") from err
    try:
        data = load_yaml(text) or {}
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        reason = " ".join(str(getattr(err, "problem", None) or err).split())
        fix = "fix the syntax there" if at else "fix the file: a config is plain YAML text"
        raise ConfigError(f"{path}: not valid YAML{at} ({reason}); {fix}.") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected {expected}; its top level is a YAML {type(data).__name__}.")
    return data
