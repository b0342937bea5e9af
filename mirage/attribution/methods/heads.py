"""AT2 (:class:`AT2Method`, ``at2``): attention weights with a learned weight per head (Cohen-Wang, Chuang and
Mądry, "Learning to Attribute with Attention", 2025), on mirage's own passes: one forward pass at attribution time.

- **Features** (:func:`head_features`): for answer token t and document d, the attention from the position that
  predicts t to d's context tokens, summed over those tokens, for every (layer, head): ``[n_answer, n_docs, L·H]``.
- **Training** (:func:`train_head_weights`): for each training answer, ``masks`` random subsets of its documents
  (each kept with probability ``keep``, seeded), the answer's sequence logit-probability ``log P - log(1 - P)`` after
  the prompt with each subset (the ablation effects, as the authors' trainer aggregates them), and per subset the
  features of the kept documents minus those of the dropped ones, averaged over the answer's tokens. One weight per
  head, from 1/(L·H), by Adam with a cosine schedule and gradient clipping, maximising the Pearson correlation
  between the weighted features and the effects over each answer's subsets; the weights are then L1-normalised.
  Unlike the authors' trainer, every fifth answer is held out and the weights that correlate best on those are kept
  (early stopping): mirage trains on a few hundred answers, not thousands. Their correlation chose the weights, so
  it is not a figure on unseen answers; a benchmark run on other data is.
- **Attribution**: ``doc_scores[t][d] = w · features[t, d]``.

The weights are a :class:`HeadWeights` file per model (JSON: the weights, the model's name and shape, the training
data and settings, and its cost: passes and seconds). ``AT2Method(weights=PATH)`` reads one; by default the file for
the attributed model is looked up by its name in mirage's shipped weights (``mirage/assets/at2/``)
and then in the cache (``$MIRAGE_CACHE_DIR/at2/``, where ``mirage methods train-at2`` writes). With none, the method
raises an error that names the command that trains them.

Shapes: ``n_answer`` answer tokens, ``n_docs`` documents, ``L`` layers, ``H`` heads (query heads).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mirage.attribution.forward import model_inputs
from mirage.attribution.methods.ablation import answer_logprobs
from mirage.attribution.methods.base import DocumentMethod, MethodScores, PassMeter, register_document_method
from mirage.attribution.methods.passes import attention_pass
from mirage.attribution.serialization import JSONRecord

if TYPE_CHECKING:
    from mirage.attribution.methods.base import DocumentInputs

__all__ = [
    "SHIPPED_WEIGHTS",
    "AT2Method",
    "HeadWeights",
    "cached_weights_dir",
    "head_features",
    "head_file_name",
    "head_weights_path",
    "mask_effects",
    "negative_pearson",
    "sequence_logit",
    "train_head_weights",
]

#: Where mirage ships head weights, one ``NAME.json`` per model.
SHIPPED_WEIGHTS = Path(__file__).resolve().parents[2] / "assets" / "at2"


def head_file_name(model: str) -> str:
    """The head weights file name of ``model`` (a model name): ``NAME.json``, other characters as ``_``."""
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in model) + ".json"


def cached_weights_dir() -> Path:
    """Where ``mirage methods train-at2`` writes head weights: ``$MIRAGE_CACHE_DIR/at2`` (default
    ``~/.cache/mirage/at2``)."""
    root = os.environ.get("MIRAGE_CACHE_DIR") or str(Path.home() / ".cache" / "mirage")
    return Path(root) / "at2"


def head_weights_path(model: str) -> Path | None:
    """The head weights file of ``model`` (a model name): mirage's shipped file, else the cache's, else None."""
    for folder in (SHIPPED_WEIGHTS, cached_weights_dir()):
        path = folder / head_file_name(model)
        if path.is_file():
            return path
    return None


@dataclass(frozen=True)
class HeadWeights(JSONRecord):
    """AT2's learned weights of one model: ``weights[l * n_heads + h]`` for layer l's head h, and how they were
    trained (``training``: data, settings, answers, passes, seconds, the final correlation)."""

    model: str
    n_layers: int
    n_heads: int
    weights: tuple[float, ...]
    training: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        if len(self.weights) != self.n_layers * self.n_heads:
            raise ValueError(f"weights has {len(self.weights)} values for {self.n_layers} layers x {self.n_heads} "
                             "heads; the file is not a head weights file of this shape.")

    @classmethod
    def read(cls, path: str | Path) -> HeadWeights:
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: not a readable AT2 head weights file ({err}); train one with "
                             "`mirage methods train-at2`.") from None

    def write(self, path: str | Path) -> None:
        from mirage.runs.store import write_atomic

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(Path(path), json.dumps(self.to_dict(), indent=1) + "\n")


def head_features(inputs: DocumentInputs, *, method: str = "at2") -> torch.Tensor:
    """``[n_answer, n_docs, L·H]`` (float64): the attention from each position that predicts an answer token to
    each document's context tokens, summed over them, per layer and head (one eager-attention pass)."""
    attentions = attention_pass(inputs, inputs.prepared.tokens.ids, method=method)
    _seq, positions = model_inputs(inputs.lm, inputs.prepared.tokens.ids, inputs.answer_ids)
    columns = torch.tensor(list(inputs.prepared.tokens.context_positions), dtype=torch.long)
    rows = torch.tensor(positions, dtype=torch.long)
    per_layer = []
    for layer in attentions:  # [1, heads, seq, seq]
        a = layer[0].index_select(1, rows.to(layer.device)).index_select(2, columns.to(layer.device))
        per_layer.append(a.double().cpu())  # [heads, n_answer, n_context]
    stacked = torch.stack(per_layer)  # [L, H, n_answer, n_context]
    n_layers, n_heads = stacked.shape[:2]
    return inputs.per_document(stacked.permute(2, 3, 0, 1).reshape(inputs.n_answer, inputs.n_context,
                                                                  n_layers * n_heads))


def _attention_shape(inputs: DocumentInputs) -> tuple[int, int]:
    config = inputs.lm.model.config
    config = getattr(config, "text_config", None) or config
    return int(config.num_hidden_layers), int(config.num_attention_heads)


@dataclass(frozen=True)
class AT2Method(DocumentMethod):
    """AT2: ``doc_scores[t][d]`` is the learned head weights' sum of answer token t's attention to document d's
    tokens (see the module docstring). ``weights``: a head weights file; None: the attributed model's, looked up by
    its name (:func:`head_weights_path`). No context scores. Cost: one forward pass (eager attention)."""

    name: str = "at2"
    weights: str | None = None

    def head_weights(self, inputs: DocumentInputs) -> HeadWeights:
        path = Path(self.weights) if self.weights else head_weights_path(inputs.lm.name)
        if path is None:
            raise RuntimeError(f"at2 has no head weights for {inputs.lm.name}: train them with `mirage methods "
                               f"train-at2 xor-attriqa-full:train --group-passages --model {inputs.lm.name}`, or give "
                               "weights=PATH.")
        found = HeadWeights.read(path)
        layers, heads = _attention_shape(inputs)
        if (found.n_layers, found.n_heads) != (layers, heads):
            raise RuntimeError(f"{path}: head weights for {found.n_layers} layers x {found.n_heads} heads "
                               f"({found.model}), but {inputs.lm.name} has {layers} x {heads}.")
        return found

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        found = self.head_weights(inputs)
        features = head_features(inputs)
        weights = torch.tensor(found.weights, dtype=torch.float64)
        return MethodScores(doc=features @ weights, notes={"weights": found.model})


def sequence_logit(logprobs: torch.Tensor) -> torch.Tensor:
    """``log P - log(1 - P)`` of each row's sequence probability P (the sum of its token log-probabilities)."""
    total = logprobs.sum(dim=-1).clamp(max=-1e-12)
    return total - torch.where(total > -0.1, torch.log(-torch.expm1(total)), torch.log1p(-torch.exp(total)))


def mask_effects(inputs: DocumentInputs, masks: int, *, keep: float = 0.5, seed: int = 0
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``masks`` random document subsets of ``inputs`` (``[masks, n_docs]`` booleans, each document kept with
    probability ``keep``, seeded by ``seed``) and the answer's sequence logit-probability after each ``[masks]``."""
    rng = random.Random(seed)
    chosen = torch.tensor([[rng.random() < keep for _ in range(inputs.n_docs)] for _ in range(masks)])
    subsets = [tuple(d for d in range(inputs.n_docs) if row[d]) for row in chosen.tolist()]
    _full, rows = answer_logprobs(inputs, subsets)
    return chosen, sequence_logit(rows)


def negative_pearson(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Minus the Pearson correlation of each row of ``predicted`` with the same row of ``target`` ``[rows, n]``,
    averaged over rows (AT2's training loss)."""
    p = predicted - predicted.mean(dim=1, keepdim=True)
    t = target - target.mean(dim=1, keepdim=True)
    corr = (p * t).mean(dim=1) / ((p.pow(2).mean(dim=1).sqrt() * t.pow(2).mean(dim=1).sqrt()) + 1e-8)
    return -corr.mean()


def train_head_weights(examples: Iterable[DocumentInputs], *, model: str, masks: int = 32, keep: float = 0.5,
                       iterations: int = 1000, learning_rate: float = 1e-3, seed: int = 0, held_out: int = 5,
                       check_every: int = 25, data: Sequence[str] = (),
                       progress: Callable[[Any, int | None, str], Any] | None = None,
                       total: int | None = None) -> HeadWeights:
    """AT2's head weights of the model behind ``examples`` (see the module docstring): the ablation effects of
    ``masks`` subsets per answer, then up to ``iterations`` steps over the training answers at once.

    Every ``held_out``-th answer (0: none) is kept out of the fit: every ``check_every`` steps the weights are scored
    by their correlation on those answers and the best are kept (with a few hundred answers, as here, hundreds of
    head weights fit the training answers' ablations far better than new ones'); with none held out, the weights
    of the best fitted correlation seen at any step are kept. ``data`` and ``model`` are recorded
    with the settings, the correlations (before training, on the fitted and the held-out answers) and the cost
    (every pass counted, seconds). Answers whose effects do not vary (one document, or every subset alike) teach
    nothing and are counted as left out."""
    start = time.perf_counter()
    features, effects, shape, left_out, passes = [], [], None, 0, 0
    for k, inputs in enumerate(progress(examples, total, "at2 ablations") if progress else examples):
        with PassMeter(inputs.lm) as meter:
            chosen, effect = mask_effects(inputs, masks, keep=keep, seed=seed + k)
            per_doc = head_features(inputs).mean(dim=0)  # [n_docs, F]: averaged over the answer's tokens
        passes += meter.cost().forward_passes
        if float(effect.std()) < 1e-9:
            left_out += 1
            continue
        features.append((chosen.double() * 2 - 1) @ per_doc)  # [masks, F]
        effects.append(effect)
        shape = shape or _attention_shape(inputs)
    if len(features) < 2 or shape is None:
        raise ValueError(f"{len(features)} training answer(s) have ablation effects that vary ({left_out} left out): "
                         "give answers with at least two documents.")
    x, y = torch.stack(features).float(), torch.stack(effects).float()  # [answers, masks, F], [answers, masks]
    check = torch.tensor([held_out > 0 and k % held_out == held_out - 1 for k in range(len(x))])
    if bool(check.all()) or not bool(check.any()):
        check = torch.zeros(len(x), dtype=torch.bool)
    fit_x, fit_y, check_x, check_y = x[~check], y[~check], x[check], y[check]
    torch.manual_seed(seed)
    w = torch.full((x.shape[-1],), 1.0 / x.shape[-1], requires_grad=True)
    optimizer = torch.optim.Adam([w], lr=learning_rate)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=iterations)

    def correlation(weights: torch.Tensor, xs: torch.Tensor, ys: torch.Tensor) -> float | None:
        return round(float(-negative_pearson(xs @ weights, ys)), 4) if len(xs) else None

    uniform = w.detach().clone()
    held = len(check_x) > 0
    # Kept: with answers held out, the weights that score best on them (checked every check_every steps); with none,
    # those of the best fitted loss seen at any step (AT2's loss does not fall monotonically: its scale is free, so a
    # step can carry the weights through a sign flip of the predicted scores).
    best, best_step, best_check = uniform, 0, correlation(uniform, check_x, check_y)
    best_loss = float(negative_pearson(fit_x @ uniform, fit_y))
    for step in range(1, iterations + 1):
        optimizer.zero_grad()
        loss = negative_pearson(fit_x @ w, fit_y)
        fitted = float(loss.detach())
        if not held and fitted < best_loss:  # the loss of the weights after step - 1 steps
            best, best_step, best_loss = w.detach().clone(), step - 1, fitted
        loss.backward()
        torch.nn.utils.clip_grad_norm_([w], max_norm=1.0)
        optimizer.step()
        schedule.step()
        if held and (step % check_every == 0 or step == iterations):
            now = correlation(w.detach(), check_x, check_y)
            if now is not None and (best_check is None or now > best_check):  # None: constant effects
                best, best_step, best_check = w.detach().clone(), step, now
    if not held and float(negative_pearson(fit_x @ w.detach(), fit_y)) < best_loss:  # the last step's weights
        best, best_step = w.detach().clone(), iterations
    weights = best.double() / best.double().abs().sum().clamp(min=1e-12)
    fitted_correlation = correlation(weights.float(), fit_x, fit_y)
    return HeadWeights(model=model, n_layers=shape[0], n_heads=shape[1], weights=tuple(weights.tolist()), training={
        "data": list(data), "answers": len(x), "fitted_answers": len(fit_x), "held_out_answers": len(check_x),
        "left_out": left_out, "masks": masks, "keep": keep, "iterations": iterations, "best_iteration": best_step,
        "learning_rate": learning_rate, "seed": seed, "forward_passes": passes,
        "seconds": round(time.perf_counter() - start, 1),
        "correlation_before": {"fitted": correlation(uniform, fit_x, fit_y),
                               "held_out": correlation(uniform, check_x, check_y)},
        "correlation_after": {"fitted": fitted_correlation,
                              "held_out": correlation(weights.float(), check_x, check_y)}})


register_document_method(AT2Method())
