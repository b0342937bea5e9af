"""Value zeroing at the document level (:class:`ValueZeroingMethod`, ``value_zeroing``): how much each layer's
output at the positions predicting the answer moves when a document's value vectors are zeroed in that layer alone
(:func:`zeroed_layer_distances`; :func:`zeroed_distances`, the pass that measures it for any groups of positions,
which inseq's token-level value zeroing is checked against in ``tests/attribution/test_methods.py``).

Shapes: ``n_answer`` answer tokens, ``n_docs`` documents, ``n_layers`` layers, ``seq`` input positions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from mirage.attribution.forward import causal_pass, model_inputs
from mirage.attribution.methods.base import DocumentMethod, MethodScores, register_document_method
from mirage.attribution.methods.passes import layer_indices
from mirage.attribution.planner import model_blocks

if TYPE_CHECKING:
    from mirage.attribution.methods.base import DocumentInputs, PassMeter
    from mirage.attribution.models import LoadedModel

__all__ = ["ValueZeroingMethod", "value_projections", "zeroed_distances", "zeroed_layer_distances"]

#: The names a block's value projection goes by (Llama, Mistral, Qwen, Gemma; BERT-style ``value``).
VALUE_NAMES = ("v_proj", "value")


def value_projections(layer: torch.nn.Module) -> list[torch.nn.Module]:
    """The value projections of one block's self-attention (every module named in :data:`VALUE_NAMES` whose output
    has one row per position), outside any cross-attention."""
    found = []
    for name, module in layer.named_modules():
        parts = name.split(".")
        if parts[-1] in VALUE_NAMES and not any("cross" in p or "encoder_attn" in p for p in parts):
            found.append(module)
    return found


def _hidden(output: Any) -> torch.Tensor:
    """A block's output hidden states (transformers' blocks return them alone or first in a tuple)."""
    return output[0] if isinstance(output, (tuple, list)) else output


@contextmanager
def _zeroed_values(projections: Sequence[torch.nn.Module], rows: torch.Tensor | None) -> Iterator[None]:
    """Within: the value projections' outputs are zero at positions ``rows`` (None: left as they are)."""

    def hook(_module: Any, _args: Any, output: torch.Tensor) -> torch.Tensor:
        if rows is None:
            return output
        out = output.clone()
        out[:, rows.to(out.device)] = 0  # a block may sit on another device than the first (a device map)
        return out

    handles = [p.register_forward_hook(hook) for p in projections]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@torch.inference_mode()
def zeroed_distances(lm: LoadedModel, seq: Sequence[int], rows: Sequence[int], groups: Sequence[Sequence[int]], *,
                     method: str = "value_zeroing") -> torch.Tensor:
    """``[n_layers, len(rows), len(groups)]`` (float64): for layer l, row r and group g (input positions), the
    cosine distance ``1 - cos(h, h')`` between layer l's output at position ``rows[r]`` in the plain pass over
    ``seq`` (``h``) and the same layer's output when, in layer l alone, the value vectors at the group's positions
    are zero (``h'``; every other layer, and the layer's input, as in the plain pass; an empty group: distance 0).
    One forward pass; inside it, each block runs again once per group on the input it was given (its keyword
    arguments too: masks, rotary tables), so only one block's input is held at a time. A ValueError naming
    ``method`` on an encoder-decoder or a model whose blocks or value projections are not found."""
    if lm.is_encoder_decoder:
        raise ValueError(f"{method} zeroes a decoder-only model's self-attention values; {lm.name} is an "
                         "encoder-decoder.")
    blocks = model_blocks(lm.model)
    projections = [value_projections(b) for b in blocks]
    if not blocks or not all(projections):
        raise ValueError(f"{method} needs the model's blocks and their value projections ({', '.join(VALUE_NAMES)}); "
                         f"none found in {lm.name} ({type(lm.model).__name__}).")
    zeroed_rows = [torch.tensor(list(g), dtype=torch.long, device=lm.device) if len(g) else None for g in groups]
    read = torch.tensor(list(rows), dtype=torch.long, device=lm.device)
    zeroed: dict[int, torch.Tensor] = {}  # block index -> [n_groups, n_rows, hidden], its outputs with values zeroed
    distances: list[torch.Tensor] = []
    replaying = [False]

    def before(index: int) -> Any:
        def pre(module: Any, args: tuple, kwargs: dict) -> None:
            if replaying[0]:
                return
            replaying[0] = True
            try:
                outs = []
                for positions in zeroed_rows:
                    with _zeroed_values(projections[index], positions):
                        hidden = _hidden(module(*args, **kwargs))[0]
                        outs.append(hidden.index_select(0, read.to(hidden.device)))
                zeroed[index] = torch.stack(outs)
            finally:
                replaying[0] = False
        return pre

    def after(index: int) -> Any:
        def post(_module: Any, _args: tuple, _kwargs: dict, output: Any) -> None:
            if replaying[0]:
                return
            hidden = _hidden(output)[0]
            plain = hidden.index_select(0, read.to(hidden.device))  # [n_rows, hidden]
            moved = zeroed.pop(index)
            cos = torch.nn.functional.cosine_similarity(plain.double()[None], moved.double(), dim=-1)
            distances.append((1 - cos).T.cpu())  # [n_rows, n_groups]
        return post

    handles = []
    try:
        for i, block in enumerate(blocks):
            handles.append(block.register_forward_pre_hook(before(i), with_kwargs=True))
            handles.append(block.register_forward_hook(after(i), with_kwargs=True))
        causal_pass(lm, rows, input_ids=torch.tensor([list(seq)], device=lm.device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return torch.stack(distances)


def zeroed_layer_distances(inputs: DocumentInputs, *, method: str = "value_zeroing") -> torch.Tensor:
    """``[n_layers, n_answer, n_docs]``: :func:`zeroed_distances` of the full prompt and the answer, read at the
    positions predicting each answer token, each document's context tokens zeroed together."""
    lm, tokens = inputs.lm, inputs.prepared.tokens
    seq, rows = model_inputs(lm, tokens.ids, inputs.answer_ids)
    groups = [[p for p, d in zip(tokens.context_positions, tokens.context_docs) if d == doc]
              for doc in range(inputs.n_docs)]
    return zeroed_distances(lm, seq, rows, groups, method=method)


@dataclass(frozen=True)
class ValueZeroingMethod(DocumentMethod):
    """Value zeroing (Mohebbi, Modarressi and Pilehvar, 2023, "Quantifying Context Mixing in Transformers"), at the
    level of documents, as the MIRAGE authors name it among the forward-only alternatives to gradients.

    The paper zeroes one token's value vector in one layer and scores every other token by the cosine distance of
    its layer output from the plain one. Here a document's tokens are zeroed together (:func:`zeroed_layer_distances`)
    and the rows read are those predicting the answer's tokens (as the attention methods read them):
    ``doc_scores[t][d]`` is that distance for answer token t, averaged over the chosen layers (``layers="all"``, or
    ``"last_quarter"``: the last ⌈L/4⌉). The paper normalises each token's row over every context token and
    combines the layers by rollout; with document groups the raw distances, averaged, are kept (comparable across
    answers, which a calibrated threshold needs). Any attention kernel (only values change, the weights are the
    model's). No context scores. Cost: one forward pass, plus each block run again once per document on its input:
    ``n_docs`` more passes' worth of blocks (counted so: ``forward_passes`` = 1 + n_docs), no output head."""

    name: str = "value_zeroing"
    layers: str = "all"

    def __post_init__(self) -> None:
        layer_indices(4, self.layers)  # a ValueError naming the field for another value

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        distances = zeroed_layer_distances(inputs, method=self.name)  # [n_layers, n_answer, n_docs]
        meter.add_forward(inputs.n_docs, tokens=inputs.n_docs * len(model_inputs(inputs.lm, inputs.prepared.tokens.ids,
                                                                                inputs.answer_ids)[0]))
        picked = layer_indices(distances.shape[0], self.layers)
        return MethodScores(doc=distances[picked].mean(dim=0))


register_document_method(ValueZeroingMethod())
