"""A loaded model and what the pipeline needs to know about it: :class:`LoadedModel` (model, tokenizer, chat
template, context window, memory budget), its :class:`ModelSizes`, the device its inputs go to
(:func:`execution_device`), and :class:`ModelLoadError`, the one error every failed load raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported when a model is loaded or a device checked, so importing mirage stays light
    import torch

__all__ = ["LoadedModel", "ModelLoadError", "ModelSizes", "execution_device"]


class ModelLoadError(ValueError):
    """A model name or path that cannot be loaded, with the fix in the message."""


@dataclass(frozen=True)
class ModelSizes:
    """A model's width, depth, attention heads and vocabulary (defaults where its config does not say)."""

    hidden: int
    layers: int
    heads: int
    vocab: int
    intermediate: int = 0  # the MLP's width (0: 4 x hidden where the config does not say)


@dataclass
class LoadedModel:
    """A model with its tokenizer and the facts the pipeline needs about it."""

    model: Any
    tokenizer: Any
    name: str
    is_encoder_decoder: bool
    use_chat_template: bool
    context_window: int | None
    #: Whether vmap batches this model's backward passes (CCI's one-graph path): None until CCI first tries,
    #: False once it failed (CCI then repeats the input per target).
    batched_backward: bool | None = None
    #: The most memory (bytes) mirage's passes may bring this process to, weights included: resident memory on a
    #: CPU, allocated memory of the input device on a GPU (see :func:`mirage.attribution.planner.plan_graph`); None: no
    #: budget.
    memory_budget: int | None = None
    #: How the last differentiable pass ran (attention kernel, checkpointing, CCI's backward), for the record.
    passes: dict[str, str] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        """Where inputs go: the input embeddings' (execution) device; for a model split over devices by
        ``device_map`` (accelerate's hooks), the device its embedding layer runs on."""
        return execution_device(self.model)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the input embeddings (a 4-/8-bit model keeps them in its compute dtype)."""
        try:
            return self.model.get_input_embeddings().weight.dtype
        except (AttributeError, NotImplementedError):
            return next(self.model.parameters()).dtype

    @property
    def sizes(self) -> ModelSizes:
        """The (text) model's width, depth, heads and vocabulary, for memory estimates."""
        cfg = self.model.config
        text = getattr(cfg, "text_config", None) or cfg
        hidden = _config_size(text, "hidden_size", "d_model", default=1024)
        return ModelSizes(hidden=hidden, layers=_config_size(text, "num_hidden_layers", "num_layers", default=24),
                          heads=_config_size(text, "num_attention_heads", "num_heads", default=16),
                          vocab=_config_size(text, "vocab_size", default=32000),
                          intermediate=_config_size(text, "intermediate_size", "d_ff", default=4 * hidden))


def _config_size(config: Any, *names: str, default: int) -> int:
    """The first of ``names`` the model config sets (not None or 0), else ``default``: configs name one size
    differently (``hidden_size`` / ``d_model``)."""
    for name in names:
        value = getattr(config, name, None)
        if value:
            return int(value)
    return default


def execution_device(model: Any) -> torch.device:
    """The device ``model``'s input embeddings run on: their weights' device, or, under accelerate's hooks (a
    ``device_map`` with offloaded or split layers), the hook's execution device."""
    import torch

    try:
        table = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        table = None
    hook = getattr(table, "_hf_hook", None)
    where = getattr(hook, "execution_device", None)
    if where is not None:
        return torch.device(where if not isinstance(where, int) else f"cuda:{where}")
    weight = getattr(table, "weight", None)
    if weight is not None and weight.device.type != "meta":
        return weight.device
    found = next((p.device for p in model.parameters() if p.device.type != "meta"), None)
    return found or torch.device("cpu")
