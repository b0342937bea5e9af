"""Which attention kernels a model runs on a GPU: scaled-dot-product attention without cuDNN's per-shape plans
(:func:`without_cudnn_attention`), and the same choice for calls of a model's blocks from outside its forward pass
(:func:`attention_kernels`, for a checkpointed block's recomputation)."""

from __future__ import annotations

from contextlib import nullcontext
from functools import wraps
from typing import Any

__all__ = ["attention_kernels", "without_cudnn_attention"]


def attention_kernels(model: Any) -> Any:
    """A context in which scaled-dot-product attention runs with the kernels ``model``'s forward pass is held to
    (:func:`without_cudnn_attention`: flash, memory-efficient or math, never cuDNN's); a no-op context for a model
    that is not held to any. Calls of the model's blocks from outside its forward pass (the recomputation of a
    checkpointed block in the backward pass: :func:`mirage.attribution.planner.checkpointed_layers`) run in it, so
    they pick the kernel the forward pass picked and save the same tensors."""
    if not getattr(model, "_mirage_without_cudnn_attention", False):
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def without_cudnn_attention(model: Any) -> Any:
    """Make ``model``'s forward pass run scaled-dot-product attention with the flash, memory-efficient or math
    backend, never cuDNN's, and return it (idempotent; numerically the same attention).

    cuDNN's backend builds a plan for every new sequence length: on an H200 that cost 85 ms in the forward and 48 ms
    in the backward pass of each new prompt shape (smollm2-135m, bfloat16; ``benchmarks/profile_attribution.py``),
    against about 3 ms once built, and every prompt, answer cut and generation step is a new shape. Mirage loads
    models onto a GPU with this set (:func:`load_model`, :func:`wrap_model`). The backward pass uses the backend
    its forward pass chose, so wrapping the forward covers both, except a checkpointed block's recomputation, which
    runs in :func:`attention_kernels`. Generation's ``inspect.signature`` checks still see the model's own signature.
    """
    if getattr(model, "_mirage_without_cudnn_attention", False):
        return model
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:  # torch < 2.3, which has no cuDNN attention either
        return model
    if not hasattr(SDPBackend, "CUDNN_ATTENTION"):  # torch < 2.5: none to avoid
        return model
    inner = model.forward
    model._mirage_without_cudnn_attention = True

    @wraps(inner)
    def forward(*args: Any, **kwargs: Any) -> Any:
        with attention_kernels(model):
            return inner(*args, **kwargs)

    model.forward = forward
    return model
