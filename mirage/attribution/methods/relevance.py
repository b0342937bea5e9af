"""AttnLRP (:class:`AttnLRPMethod`, ``attnlrp``): layer-wise relevance propagation through attention and norms
(Achtibat et al., "AttnLRP: Attention-Aware Layer-Wise Relevance Propagation for Transformers", ICML 2024), in its
gradient × input form, one backward pass per answer token, on mirage's own passes.

The rules, each a change of the backward pass only (the forward pass, and so the scores and the answer, are the
model's own), applied to the model's modules for the duration of the call and then removed (:func:`lrp_rules`):

- normalisation (RMSNorm): the identity rule, i.e. no gradient through the 1/RMS factor;
- an element-wise activation (the gated MLP's): the identity rule, gradient = output / input;
- the gated MLP's element-wise product, and attention's products: the uniform rule, the gradient divided among the
  factors (1/2 at the MLP's product and at attention's values, 1/4 at its queries and keys, as the authors' ``lxt``
  does in its efficient mode, which also gives the softmax's rule).

Relevance of input position i for answer token t: ``(e_i · ∂z_t/∂e_i)`` summed over the embedding dimension, z_t the
logit of the answer's token t at its step. It runs on decoder-only models whose blocks are named as in Llama, Qwen,
Gemma and Mistral (``*RMSNorm`` with ``weight``, an MLP with ``gate_proj`` / ``up_proj`` / ``down_proj`` /
``act_fn``); on any other model it raises a RuntimeError naming the modules it could not apply a rule to.
``tests/attribution/test_lrp.py`` checks it against ``lxt`` itself on the same model and inputs.

Shapes: ``n_answer`` answer tokens, ``n_docs`` documents, ``n_context`` context tokens, ``seq`` input positions.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from mirage.attribution.forward import embed, frozen_parameters, logits_from_embeds, model_inputs
from mirage.attribution.methods.base import DocumentMethod, MethodScores, register_document_method

if TYPE_CHECKING:
    from mirage.attribution.methods.base import DocumentInputs, PassMeter

__all__ = ["AttnLRPMethod", "lrp_rules"]

#: What the RMS's epsilon is called, by model family.
_EPSILON_NAMES = ("variance_epsilon", "eps")


class _Uniform(torch.autograd.Function):
    """Identity forward; the incoming gradient divided by ``share`` (the uniform rule at a product's factor)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, share: float) -> torch.Tensor:
        ctx.share = share
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad / ctx.share, None


class _Identity(torch.autograd.Function):
    """``fn(x)`` forward; gradient × output / input backward (the identity rule at an element-wise function)."""

    @staticmethod
    def forward(ctx: Any, fn: Any, x: torch.Tensor) -> torch.Tensor:
        out = fn(x)
        ctx.save_for_backward(out / (x + 1e-10))
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor]:
        (ratio,) = ctx.saved_tensors
        return None, grad * ratio


def _uniform(x: torch.Tensor, share: float) -> torch.Tensor:
    return _Uniform.apply(x, share)


def _rms_forward(self: Any, hidden: torch.Tensor) -> torch.Tensor:
    """Llama-style RMSNorm (``weight · x / rms(x)``) with no gradient through the 1/RMS factor."""
    dtype = hidden.dtype
    x = hidden.float()
    eps = next(getattr(self, n) for n in _EPSILON_NAMES if hasattr(self, n))
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps).detach()
    return self.weight * x.to(dtype)


def _rms_norm_only(self: Any, x: torch.Tensor) -> torch.Tensor:
    """Gemma-style RMSNorm's ``_norm`` (its forward adds ``1 + weight`` itself), the 1/RMS factor detached."""
    eps = next(getattr(self, n) for n in _EPSILON_NAMES if hasattr(self, n))
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps).detach()


def _gated_mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """A gated MLP with the identity rule at its activation and the uniform rule at its product."""
    gate = _Identity.apply(self.act_fn, self.gate_proj(x))
    return self.down_proj(_uniform(gate * self.up_proj(x), 2.0))


def _attention_with_rules(inner: Any) -> Any:
    def attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any,
                  **kwargs: Any) -> Any:
        if "dropout" in kwargs:
            kwargs["dropout"] = 0.0
        return inner(module, _uniform(query, 4.0), _uniform(key, 4.0), _uniform(value, 2.0), *args, **kwargs)

    return attention


@contextmanager
def _instance_attribute(module: Any, name: str, value: Any) -> Iterator[None]:
    """``module.name = value`` for the block (an instance attribute shadowing the class's method), then removed."""
    had = name in vars(module)
    before = vars(module).get(name)
    setattr(module, name, value)
    try:
        yield
    finally:
        if had:
            setattr(module, name, before)
        else:
            delattr(module, name)


@contextmanager
def _rule_attention(model: Any) -> Iterator[None]:
    """The model's attention kernel wrapped with the attention rules for the block (registered under a name of its
    own; the model's kernel restored after)."""
    from transformers import AttentionInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    current = model.config._attn_implementation or "eager"
    name = f"mirage_attnlrp_{current}"
    if name not in ALL_ATTENTION_FUNCTIONS:
        if current == "eager":
            module = __import__(type(model).__module__, fromlist=["eager_attention_forward"])
            inner = getattr(module, "eager_attention_forward", None)
            if inner is None:
                raise RuntimeError(f"{type(model).__name__}: no eager_attention_forward in {module.__name__}; AttnLRP "
                                   "wraps the model's attention function.")
        else:
            inner = ALL_ATTENTION_FUNCTIONS[current]
        AttentionInterface.register(name, _attention_with_rules(inner))
    configs = {id(m.config): m.config for m in model.modules() if hasattr(getattr(m, "config", None),
                                                                           "_attn_implementation")}
    before = {k: c._attn_implementation for k, c in configs.items()}
    for c in configs.values():
        c._attn_implementation = name
    try:
        yield
    finally:
        for k, c in configs.items():
            c._attn_implementation = before[k]


@contextmanager
def lrp_rules(model: Any) -> Iterator[None]:
    """AttnLRP's rules on ``model`` for the block (see the module docstring), on its module instances only (its
    classes, and so other models, untouched). Raises a RuntimeError when the model has no norm or no MLP the rules
    know (the relevance would silently be plain gradient × input)."""
    with ExitStack() as stack:
        norms = mlps = 0
        for module in model.modules():
            cls = type(module).__name__
            if cls.endswith("RMSNorm") and hasattr(module, "weight"):
                if callable(getattr(type(module), "_norm", None)):
                    stack.enter_context(_instance_attribute(module, "_norm", types.MethodType(_rms_norm_only, module)))
                else:
                    stack.enter_context(_instance_attribute(module, "forward", types.MethodType(_rms_forward, module)))
                norms += 1
            elif all(hasattr(module, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn")):
                stack.enter_context(_instance_attribute(module, "forward", types.MethodType(_gated_mlp_forward,
                                                                                             module)))
                mlps += 1
            elif isinstance(module, torch.nn.Dropout):
                stack.enter_context(_instance_attribute(module, "forward", types.MethodType(lambda _s, x: x, module)))
        if not norms or not mlps:
            raise RuntimeError(f"{type(model).__name__}: AttnLRP's rules found {norms} RMSNorm and {mlps} gated MLP "
                               "modules; it runs on Llama-, Qwen-, Mistral- and Gemma-style decoders.")
        stack.enter_context(_rule_attention(model))
        yield


@dataclass(frozen=True)
class AttnLRPMethod(DocumentMethod):
    """AttnLRP (Achtibat et al., 2024) in gradient × input form: ``context_scores[t][j]``, the relevance of context
    token j for the logit of answer token t; ``doc_scores[t][d]``, its sum over document d's tokens. Signed
    (negative: evidence against the token). Cost: one forward pass with a graph and one backward pass per answer
    token (the graph kept between them). On a decoder-only model (see :func:`lrp_rules`)."""

    name: str = "attnlrp"

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        lm, tokens = inputs.lm, inputs.prepared.tokens
        if lm.is_encoder_decoder:
            raise RuntimeError("attnlrp runs on decoder-only models; this one is an encoder-decoder.")
        seq, positions = model_inputs(lm, tokens.ids, inputs.answer_ids)
        context = torch.tensor(list(tokens.context_positions), dtype=torch.long, device=lm.device)
        rows = []
        with lrp_rules(lm.model), frozen_parameters(lm.model), torch.enable_grad():
            embeds = embed(lm, seq).detach().requires_grad_(True)  # [1, seq, hidden]
            logits = logits_from_embeds(lm, embeds, inputs.answer_ids, positions)[0]  # [n_answer, vocab]
            for t, token in enumerate(inputs.answer_ids):
                (grad,) = torch.autograd.grad(logits[t, token], embeds, retain_graph=t + 1 < inputs.n_answer)
                meter.add_backward()
                rows.append((embeds[0] * grad[0]).sum(-1).index_select(0, context).double().cpu())
        scores = torch.stack(rows)  # [n_answer, n_context]
        return MethodScores(doc=inputs.per_document(scores), context=scores)


register_document_method(AttnLRPMethod())
