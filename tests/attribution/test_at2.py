"""AT2 (mirage.attribution.methods.heads): its features are the authors' attention weights (their own
``at2.attribution.attention``, on the same tiny Llama and inputs), its loss and ablation effect are theirs, training
raises the correlation it maximises, uniform weights reduce it to the all-layers attention baseline, and a model with
no weights is told how to train them."""

from __future__ import annotations

import json

import pytest
import torch

from mirage import Mirage
from mirage.attribution.forward import model_inputs
from mirage.attribution.methods import (
    AT2Method,
    HeadWeights,
    attribute_documents,
    document_inputs,
    head_features,
    train_head_weights,
)
from mirage.attribution.methods.heads import negative_pearson, sequence_logit

pytestmark = pytest.mark.usefixtures("one_thread")

DOCS = [{"title": "France", "text": "Paris is the capital of France."},
        {"title": "Germany", "text": "Berlin is the capital of Germany."},
        {"title": "Italy", "text": "Rome is the capital of Italy."}]


@pytest.fixture(scope="module")
def inputs(tiny_causal):
    return document_inputs(Mirage(tiny_causal), {"question": "What is the capital of France?", "docs": DOCS},
                           "Paris is the capital.")


def test_the_features_are_the_authors_attention_weights(inputs):
    at2_attention = pytest.importorskip("at2.attribution.attention")
    lm = inputs.lm
    seq, _positions = model_inputs(lm, inputs.prepared.tokens.ids, inputs.answer_ids)
    with torch.no_grad():
        hidden = lm.model(input_ids=torch.tensor([seq]), output_hidden_states=True).hidden_states
    start = len(inputs.prepared.tokens.ids)
    theirs = at2_attention.get_attention_weights(lm.model, hidden, attribution_start=start,
                                                 attribution_end=start + inputs.n_answer, model_type="llama")
    n_layers, n_heads = theirs.shape[:2]
    columns = list(inputs.prepared.tokens.context_positions)
    per_token = theirs[:, :, :, columns].permute(2, 3, 0, 1).reshape(inputs.n_answer, len(columns), -1).double()
    docs = torch.tensor(list(inputs.prepared.tokens.context_docs))
    expected = torch.zeros(inputs.n_answer, inputs.n_docs, n_layers * n_heads, dtype=torch.float64)
    expected.index_add_(1, docs, per_token)
    torch.testing.assert_close(head_features(inputs), expected, rtol=1e-4, atol=1e-6)


def test_the_loss_and_the_ablation_effect_are_the_authors():
    trainer = pytest.importorskip("at2.attribution.trainer")
    utils = pytest.importorskip("at2.attribution.utils")
    g = torch.Generator().manual_seed(0)
    predicted, target = torch.randn(5, 16, generator=g), torch.randn(5, 16, generator=g)
    torch.testing.assert_close(negative_pearson(predicted, target), trainer.PearsonCorrelationLoss()(predicted, target))
    logp = -torch.rand(6, 4, generator=g, dtype=torch.float64) * 3  # token log-probabilities
    logit = logp - torch.log1p(-torch.exp(logp))  # what the authors' aggregate takes: log p - log(1 - p) per token
    torch.testing.assert_close(sequence_logit(logp), torch.tensor(utils.aggregate_logit_probs(logit.numpy())))


def test_uniform_head_weights_are_the_all_layers_attention_baseline(inputs, tmp_path):
    n_features = head_features(inputs).shape[-1]
    config = inputs.lm.model.config
    path = tmp_path / "uniform.json"
    HeadWeights(model=inputs.lm.name, n_layers=config.num_hidden_layers, n_heads=config.num_attention_heads,
                weights=[1.0 / n_features] * n_features).write(path)
    at2 = attribute_documents(inputs, AT2Method(weights=str(path)))
    baseline = attribute_documents(inputs, "attention_all")
    torch.testing.assert_close(torch.tensor(at2.doc_scores), torch.tensor(baseline.doc_scores), rtol=1e-6, atol=1e-9)
    assert at2.cost.forward_passes == 1 and at2.cost.backward_passes == 0


def test_training_raises_the_correlation_it_maximises_and_the_weights_round_trip(inputs, tmp_path):
    weights = train_head_weights([inputs, inputs], model=inputs.lm.name, masks=12, iterations=60,
                                 learning_rate=1e-2, data=["in-memory"])
    t = weights.training
    assert t["answers"] == 2 and t["held_out_answers"] == 0 and t["data"] == ["in-memory"] and t["seconds"] >= 0
    # every pass counted: per answer the attention pass, the full prompt and each distinct subset but the full one
    assert t["forward_passes"] >= 2 * 3
    assert t["correlation_after"]["fitted"] > t["correlation_before"]["fitted"]
    assert sum(abs(w) for w in weights.weights) == pytest.approx(1.0)
    weights.write(tmp_path / "w.json")
    assert HeadWeights.read(tmp_path / "w.json") == weights
    assert json.loads((tmp_path / "w.json").read_text())["model"] == inputs.lm.name


def test_held_out_answers_choose_the_weights_kept(inputs, tiny_causal):
    """With answers held out, the weights kept are the best on them, never worse than the uniform start."""
    other = document_inputs(Mirage(tiny_causal), {"question": "Which city is in Italy?", "docs": DOCS}, "Rome.")
    weights = train_head_weights([inputs, other, inputs, other], model=inputs.lm.name, masks=12, iterations=40,
                                 learning_rate=1e-2, held_out=2, check_every=5)
    t = weights.training
    assert (t["fitted_answers"], t["held_out_answers"]) == (2, 2) and 0 <= t["best_iteration"] <= 40
    assert t["correlation_after"]["held_out"] >= t["correlation_before"]["held_out"] - 1e-4


def test_a_model_without_weights_is_told_how_to_train_them(inputs, tmp_path, monkeypatch):
    monkeypatch.setenv("MIRAGE_CACHE_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"mirage methods train-at2 .* --model tiny-causal"):
        attribute_documents(inputs, "at2")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a readable AT2 head weights file"):
        attribute_documents(inputs, AT2Method(weights=str(tmp_path / "bad.json")))
