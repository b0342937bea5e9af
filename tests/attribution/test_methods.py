"""Document attribution methods (mirage.attribution.methods): every registered method through one conformance test
on the tiny in-memory model (registering a method is enough to get it tested), and property tests of each method
against plain passes that share nothing with it (no cache, prompts prepared by the Mirage itself)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
import torch

from mirage import Mirage
from mirage.attribution.cti import js
from mirage.attribution.forward import answer_logits, token_probabilities
from mirage.attribution.methods import (
    DocumentAttribution,
    DocumentMethod,
    MethodScores,
    attribute_documents,
    cite_documents,
    contextcite_masks,
    document_inputs,
    gated_logprobs,
    gated_pass,
    lasso_surrogate,
    logit_of_logprob,
    permutation_orders,
    register_document_method,
    shapley_values,
    subsamples,
    train_head_weights,
    value_projections,
    zeroed_distances,
    zeroed_layer_distances,
)
from mirage.attribution.methods.heads import cached_weights_dir
from mirage.attribution.models import wrap_model
from mirage.attribution.planner import model_blocks
from mirage.registry import DOCUMENT_METHODS

pytestmark = pytest.mark.usefixtures("one_thread")

DOCS = [{"title": "France", "text": "Paris is the capital of France."},
        {"title": "Germany", "text": "Berlin is the capital of Germany."},
        {"title": "Italy", "text": "Rome is the capital of Italy and of its region."}]
QUESTION = "What is the capital of France?"
ANSWER = "Paris is the capital."
BUILT_INS = {"attention_last", "attention_all", "attntrace", "leave_one_out", "arc_jsd", "shapley",
             "document_gate_jvp", "mirage_cci", "gradient_all", "attnlrp", "at2", "rollout", "selfcite",
             "value_zeroing", "contextcite"}


def head_weights_path_for(model):
    return cached_weights_dir() / f"{model}.json"


def _inputs(lm, docs=DOCS):
    return document_inputs(Mirage(lm), {"question": QUESTION, "docs": docs}, ANSWER)


@pytest.fixture(scope="module")
def inputs(tiny_causal):
    return _inputs(tiny_causal)


@pytest.fixture(scope="module", autouse=True)
def at2_weights(inputs, tmp_path_factory):
    """AT2's head weights for the tiny model, trained on its own ablations (a few steps) into this module's own
    cache, where ``mirage methods train-at2`` leaves them: the registered ``at2`` finds them by the model's name."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MIRAGE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        weights = train_head_weights([inputs, inputs], model=inputs.lm.name, masks=8, iterations=20, held_out=0)
        weights.write(head_weights_path_for(inputs.lm.name))
        yield weights


def _plain_logits(inputs, kept):
    """The answer's logits after the prompt with the documents ``kept`` (0-based), prepared by the Mirage and run
    whole, without any cache: the reference the methods are checked against."""
    m = Mirage(inputs.lm)
    if kept:
        prompt = m.prepare({"question": QUESTION, "docs": [inputs.prepared.item.docs[i] for i in kept]},
                           reserve_tokens=inputs.n_answer + 1).tokens.ids
    else:
        prompt = inputs.prepared.tokens.contextless_ids
    return answer_logits(inputs.lm, prompt, inputs.answer_ids)


def _plain_logprobs(inputs, kept):
    return torch.tensor(token_probabilities(_plain_logits(inputs, kept), inputs.answer_ids, log=True),
                        dtype=torch.float64)


# -- the conformance test: every registered method -------------------------------------------------------------------

def test_the_built_in_methods_are_registered():
    assert BUILT_INS <= set(DOCUMENT_METHODS)


@pytest.mark.parametrize("name", sorted(DOCUMENT_METHODS))
def test_every_registered_method_conforms(name, inputs):
    method = DOCUMENT_METHODS[name]
    kernel = inputs.lm.model.config._attn_implementation
    first, second = method.attribute(inputs), method.attribute(inputs)
    assert first.method == name
    doc = torch.tensor(first.doc_scores, dtype=torch.float64)
    assert doc.shape == (inputs.n_answer, inputs.n_docs)
    assert torch.isfinite(doc).all() and (doc.abs().sum() > 0 or method.sparse)
    if first.context_scores is not None:
        context = torch.tensor(first.context_scores, dtype=torch.float64)
        assert context.shape == (inputs.n_answer, inputs.n_context)
        assert torch.isfinite(context).all()
    # deterministic: the same input gives the same scores and the same passes
    assert (first.doc_scores, first.context_scores) == (second.doc_scores, second.context_scores)
    assert first.options == second.options == json.loads(json.dumps(first.options))
    measured = ("forward_passes", "jvp_passes", "backward_passes", "tokens")
    assert [getattr(first.cost, f) for f in measured] == [getattr(second.cost, f) for f in measured]
    # the cost: at least one pass over at least the prompt, timed
    cost = first.cost
    assert cost.forward_passes + cost.jvp_passes + cost.backward_passes >= 1
    assert cost.tokens >= len(inputs.prepared.tokens.ids) and cost.seconds > 0
    assert cost.peak_memory_bytes is None or cost.peak_memory_bytes > 0
    # plain JSON and back
    assert DocumentAttribution.from_json(first.to_json()) == first
    assert DocumentAttribution.from_dict(json.loads(json.dumps(first.to_dict()))) == first
    # the model's attention kernel is its own again
    assert inputs.lm.model.config._attn_implementation == kernel


# -- ContextCite ----------------------------------------------------------------------------------------------------

def test_contextcite_masks_logits_and_surrogate_are_contextcite_s_own():
    """The masks are ContextCite's draws (context-cite 0.0.4's ``_create_mask``: seed 0 is its own masks), the
    answer's score its ``logit_prob`` aggregation, and the surrogate's weights its LassoRegression's."""
    import numpy as np
    from context_cite.solver import LassoRegression
    from context_cite.utils import _create_mask, aggregate_logit_probs

    masks = contextcite_masks(5, 64, 0.5, seed=0)
    assert masks == [tuple(bool(v) for v in _create_mask(5, 0.5, j)) for j in range(64)]
    assert contextcite_masks(5, 64, 0.5, seed=1) == [tuple(bool(v) for v in _create_mask(5, 0.5, 64 + j))
                                                     for j in range(64)]
    gen = torch.Generator().manual_seed(0)
    token_logits = torch.randn(64, 3, generator=gen) * 2  # per-token logit probabilities
    token_logprobs = torch.nn.functional.logsigmoid(token_logits.double())
    ours = logit_of_logprob(token_logprobs.sum(dim=1))
    theirs = torch.as_tensor(aggregate_logit_probs(token_logits.numpy()), dtype=torch.float64)
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-4)
    weights, bias = lasso_surrogate(masks, (theirs / 3).tolist(), 0.01)
    expected_w, expected_b = LassoRegression(0.01).fit(np.array(masks), theirs.numpy(), 3)
    assert np.allclose(np.array(weights) * 3, expected_w, rtol=1e-6, atol=1e-9)
    assert math.isclose(bias * 3, float(expected_b), rel_tol=1e-6, abs_tol=1e-9)


def test_contextcite_on_the_model_is_the_surrogate_of_plain_passes(inputs):
    """The method's weights are ContextCite's solver fitted on the answer's logit probability read from plain
    passes (no cache, prompts prepared by the Mirage) under its masks; every row holds the whole answer's weights;
    ``span="token"`` fits each token on its own; a document that raises the answer weighs more than one that does
    not."""
    import dataclasses

    import numpy as np
    from context_cite.solver import LassoRegression

    # the tiny model's documents barely move its answer: ContextCite's alpha (0.01) zeros every weight, a small one
    assert not any(map(any, DOCUMENT_METHODS["contextcite"].attribute(inputs).doc_scores))
    method = dataclasses.replace(DOCUMENT_METHODS["contextcite"], lasso_alpha=1e-6)
    res = method.attribute(inputs)
    assert any(res.doc_scores[0])
    masks = contextcite_masks(inputs.n_docs, method.num_ablations, method.keep_prob)
    plain = {m: _plain_logprobs(inputs, [d for d in range(inputs.n_docs) if m[d]]) for m in set(masks)}
    answer = torch.stack([logit_of_logprob(plain[m].sum()) for m in masks])
    expected, _ = LassoRegression(method.lasso_alpha).fit(np.array(masks), answer.numpy(), inputs.n_answer)
    doc = torch.tensor(res.doc_scores, dtype=torch.float64)
    assert all(row == res.doc_scores[0] for row in res.doc_scores)
    assert np.allclose(doc[0].numpy(), expected, rtol=1e-4, atol=1e-6)
    assert res.cost.forward_passes == len(set(masks)) + (1 if tuple([True] * inputs.n_docs) not in masks else 0)
    per_token = dataclasses.replace(method, span="token").attribute(inputs)
    for t in range(inputs.n_answer):
        logits = torch.stack([logit_of_logprob(plain[m][t]) for m in masks])
        w, _ = LassoRegression(method.lasso_alpha).fit(np.array(masks), logits.numpy(), 1)
        assert np.allclose(per_token.doc_scores[t], w, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="span='all' is not valid; choose 'answer'"):
        dataclasses.replace(method, span="all")
    with pytest.raises(ValueError, match="keep_prob=1.0 is not valid"):
        dataclasses.replace(method, keep_prob=1.0)


# -- Shapley --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_shapley_values_are_efficient_exactly(n):
    gen = torch.Generator().manual_seed(n)
    value = {mask: torch.randn(4, generator=gen, dtype=torch.float64) for mask in range(1 << n)}
    phi = shapley_values(n, value)
    assert torch.allclose(phi.sum(0), value[(1 << n) - 1] - value[0], rtol=0, atol=1e-12)


def test_shapley_values_of_an_additive_game_are_its_weights():
    weights = torch.tensor([0.5, -2.0, 3.0, 0.25], dtype=torch.float64)
    value = {mask: sum((weights[i] for i in range(4) if mask >> i & 1), torch.tensor(1.0, dtype=torch.float64))
             for mask in range(16)}
    assert torch.allclose(shapley_values(4, value), weights, rtol=0, atol=1e-12)


@pytest.mark.parametrize("max_exact", [10, 1])
def test_shapley_sums_to_all_minus_none(inputs, max_exact):
    """Exact (2**3 subsets) and sampled (permutations: each one telescopes) alike."""
    res = attribute_documents(inputs, "shapley", max_exact=max_exact, permutations=5)
    total = torch.tensor(res.doc_scores, dtype=torch.float64).sum(1)
    expected = _plain_logprobs(inputs, [0, 1, 2]) - _plain_logprobs(inputs, [])
    assert torch.allclose(total, expected, rtol=0, atol=1e-4)
    assert res.options["permutations"] == 5
    assert res.notes["shapley"].startswith("exact" if max_exact == 10 else "sampled: 5 permutations")
    visited = {sum(1 << p for p in order[:k]) for order in permutation_orders(3, 5, 0) for k in range(4)}
    assert res.cost.forward_passes == (8 if max_exact == 10 else len(visited))  # one pass per distinct subset


def test_two_document_shapley_is_the_mean_of_both_orders(tiny_causal):
    inputs = _inputs(tiny_causal, DOCS[:2])
    phi = torch.tensor(attribute_documents(inputs, "shapley").doc_scores, dtype=torch.float64)
    loo = torch.tensor(attribute_documents(inputs, "leave_one_out").doc_scores, dtype=torch.float64)
    none = _plain_logprobs(inputs, [])
    for d in range(2):
        alone = _plain_logprobs(inputs, [d]) - none  # document d added first
        assert torch.allclose(phi[:, d], (loo[:, d] + alone) / 2, rtol=0, atol=1e-4)


# -- leave-one-out and ARC-JSD --------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["tiny_causal", "tiny_sliding", "tiny_seq2seq"])
def test_leave_one_out_matches_plain_passes(model, request):
    """Cache reuse (decoder-only), its sliding-window fallback (Gemma 3, 16-token window) and whole prompts
    (encoder-decoder) give f(all) - f(without d) of plain passes."""
    inputs = _inputs(request.getfixturevalue(model))
    res = attribute_documents(inputs, "leave_one_out")
    full = _plain_logprobs(inputs, [0, 1, 2])
    for d in range(3):
        expected = full - _plain_logprobs(inputs, [i for i in range(3) if i != d])
        assert torch.allclose(torch.tensor(res.doc_scores)[:, d].double(), expected, rtol=0, atol=1e-4)
    # n + 1 passes; the sliding-window model one more, for the cache of what the prompts share once the full
    # prompt's cache cannot be cut back
    assert res.cost.forward_passes == (5 if model == "tiny_sliding" else 4)


def test_arc_jsd_is_the_symmetric_bounded_divergence_of_plain_passes(inputs):
    res = attribute_documents(inputs, "arc_jsd")
    scores = torch.tensor(res.doc_scores, dtype=torch.float64)
    assert (scores >= 0).all() and (scores <= math.log(2) + 1e-9).all()
    ids = torch.tensor(list(inputs.answer_ids))
    logp = torch.log_softmax(_plain_logits(inputs, [0, 1, 2]), -1)
    for d in range(3):
        logq = torch.log_softmax(_plain_logits(inputs, [i for i in range(3) if i != d]), -1)
        assert torch.allclose(js(logp, logq, ids), js(logq, logp, ids), rtol=0, atol=1e-7)  # symmetric
        assert torch.allclose(scores[:, d], js(logq, logp, ids).double(), rtol=0, atol=1e-5)
    assert res.cost.forward_passes == inputs.n_docs + 1


# -- the document gate ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_gpt2_64(real_tokenizer):
    """A tiny seeded GPT-2 in float64 (its layer norms compute in the model's dtype, where Llama's RMSNorm computes
    in float32): a finite difference of its passes is exact to about 1e-10."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(real_tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=2048,
                        bos_token_id=real_tokenizer.eos_token_id, eos_token_id=real_tokenizer.eos_token_id)
    return wrap_model(GPT2LMHeadModel(config).double(), real_tokenizer, name="tiny-gpt2-64")


def test_the_gate_jvp_matches_a_finite_difference(tiny_gpt2_64):
    """The JVP with tangent e_d is the central difference of the gated pass at alpha = 1 ± eps."""
    inputs = _inputs(tiny_gpt2_64)
    res = attribute_documents(inputs, "document_gate_jvp")
    jvp = torch.tensor(res.doc_scores, dtype=torch.float64)
    assert res.cost.jvp_passes == 3 and res.cost.forward_passes == 0
    eps, ones = 1e-4, torch.ones(3, dtype=torch.float64)
    for d in range(3):
        step = torch.zeros(3, dtype=torch.float64)
        step[d] = eps
        fd = (gated_logprobs(inputs, ones + step) - gated_logprobs(inputs, ones - step)) / (2 * eps)
        assert torch.allclose(jvp[:, d], fd.cpu(), rtol=1e-6, atol=1e-9), (d, jvp[:, d], fd)
    plain = _plain_logprobs(inputs, [0, 1, 2])  # in float32, as answer_logits gives them
    assert torch.allclose(gated_logprobs(inputs, ones).cpu(), plain, rtol=0, atol=1e-5)  # alpha = 1: the plain pass


def test_the_gate_jvp_is_the_gated_pass_jacobian(inputs):
    """On the float32 Llama, the forward-mode derivatives equal the reverse-mode Jacobian of the gated pass."""
    res = attribute_documents(inputs, "document_gate_jvp")
    jacobian = torch.autograd.functional.jacobian(gated_pass(inputs), torch.ones(3))
    assert torch.allclose(torch.tensor(res.doc_scores, dtype=torch.float64), jacobian.double(), rtol=1e-4,
                          atol=1e-6)


# -- attention ------------------------------------------------------------------------------------------------------

def _eager_attentions(inputs):
    lm = inputs.lm
    seq = list(inputs.prepared.tokens.ids) + list(inputs.answer_ids[:-1])
    kernel = lm.model.config._attn_implementation
    lm.model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return lm.model(input_ids=torch.tensor([seq]), output_attentions=True).attentions
    finally:
        lm.model.set_attn_implementation(kernel)


@pytest.mark.parametrize(("name", "layers"), [("attention_all", [0, 1]), ("attention_last", [1])])
def test_attention_is_the_mean_over_heads_and_layers_summed_per_document(inputs, name, layers):
    res = attribute_documents(inputs, name)
    attentions = _eager_attentions(inputs)
    first = len(inputs.prepared.tokens.ids) - 1
    rows = list(range(first, first + inputs.n_answer))
    cols = list(inputs.prepared.tokens.context_positions)
    expected = torch.stack([attentions[i][0][:, rows][:, :, cols] for i in layers]).double().mean(dim=(0, 1))
    context = torch.tensor(res.context_scores, dtype=torch.float64)
    assert torch.allclose(context, expected, rtol=0, atol=1e-7)
    docs = torch.tensor(list(inputs.prepared.tokens.context_docs))
    per_doc = torch.stack([context[:, docs == d].sum(1) for d in range(3)], dim=1)
    doc = torch.tensor(res.doc_scores, dtype=torch.float64)
    assert torch.allclose(doc, per_doc, rtol=0, atol=1e-12)
    assert (doc >= 0).all() and (doc.sum(1) <= 1 + 1e-6).all()


def test_attntrace_without_subsampling_and_with_every_token_is_the_mean_attention(inputs):
    """keep=1 (every subsample is the full prompt) and top_k past every document's length: each document's mean
    attention over its tokens."""
    res = attribute_documents(inputs, "attntrace", keep=1.0, top_k=10_000, samples=2)
    context = torch.tensor(attribute_documents(inputs, "attention_all").context_scores, dtype=torch.float64)
    docs = torch.tensor(list(inputs.prepared.tokens.context_docs))
    expected = torch.stack([context[:, docs == d].mean(1) for d in range(3)], dim=1)
    assert torch.allclose(torch.tensor(res.doc_scores, dtype=torch.float64), expected, rtol=0, atol=1e-12)
    assert res.options["samples"] == 2 and res.cost.forward_passes == 2


def test_attntrace_subsamples_are_seeded_and_cover_every_document():
    drawn = subsamples(5, samples=3, keep=0.4, seed=1)
    assert drawn == subsamples(5, samples=3, keep=0.4, seed=1)
    assert all(len(s) == 2 and list(s) == sorted(set(s)) for s in drawn)
    assert set().union(*drawn) == set(range(5))
    assert subsamples(5, samples=30, keep=0.4, seed=2) != subsamples(5, samples=30, keep=0.4, seed=3)


# -- the citation rule ----------------------------------------------------------------------------------------------

def test_the_std_rule_cites_documents_past_mean_plus_k_std():
    cited = cite_documents([[2.0, 0.5, 0.25], [1.0, 0.5, 0.25]], k=1.0)
    assert cited.totals == (3.0, 1.0, 0.5) and cited.cited == (1,)
    assert cited.threshold == pytest.approx(1.5 + torch.tensor([3.0, 1.0, 0.5]).std(correction=0).item())
    assert cite_documents([[3.0, 1.0, 0.5]], k=0.0).cited == (1,)  # past the mean
    assert cite_documents([[1.0, 1.0]], k=1.0).cited == (1, 2)  # ties are kept


def test_the_rule_sums_over_the_given_tokens_only():
    scores = [[0.0, 5.0], [2.0, 0.0]]
    assert cite_documents(scores).cited == (2,)
    chosen = cite_documents(scores, tokens=[1])
    assert chosen.totals == (2.0, 0.0) and chosen.cited == (1,)
    assert math.isnan(cite_documents(scores, tokens=[]).threshold) and cite_documents(scores, tokens=[]).cited == ()


def test_the_threshold_rule_cites_positive_documents_past_the_calibrated_threshold(inputs):
    assert cite_documents([[0.2, 0.9, 0.5]], rule="threshold", threshold=0.4).cited == (2, 3)
    assert cite_documents([[-1.0, -2.0]], rule="threshold", threshold=-5.0).cited == ()
    res = attribute_documents(inputs, "leave_one_out")
    totals = torch.tensor(res.doc_scores, dtype=torch.float64).sum(0)
    assert cite_documents(res, rule="threshold", threshold=-1e9).cited == tuple(
        d + 1 for d in sorted(range(3), key=lambda d: -totals[d]) if totals[d] > 0)


@pytest.mark.parametrize(("kwargs", "field"), [({"rule": "top"}, "rule="), ({"rule": "threshold"}, "threshold"),
                                              ({"tokens": [7]}, "tokens"), ({"k": -1.0}, "k=")])
def test_bad_citation_settings_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        cite_documents([[1.0, 2.0]], **kwargs)


# -- registering ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Uniform(DocumentMethod):
    name: str = "uniform"
    value: float = 1.0
    rows: int | None = None

    def compute(self, inputs, meter):
        return MethodScores(doc=torch.full((self.rows or inputs.n_answer, inputs.n_docs), self.value))


def test_a_registered_method_runs_by_name(inputs, registries):
    register_document_method(_Uniform())
    with pytest.raises(ValueError, match="already registered"):
        register_document_method(_Uniform())
    res = attribute_documents(inputs, "uniform", value=2.0)
    assert res.options == {"value": 2.0, "rows": None} and {v for row in res.doc_scores for v in row} == {2.0}
    assert res.cost.forward_passes == 0 and res.context_scores is None
    with pytest.raises(ValueError, match="'unknown'.*'value'"):
        attribute_documents(inputs, "uniform", unknown=1)
    with pytest.raises(RuntimeError, match=r"uniform returned document scores of shape \[1, 3\]"):
        attribute_documents(inputs, "uniform", rows=1)
    with pytest.raises(RuntimeError, match="not finite"):
        attribute_documents(inputs, "uniform", value=float("nan"))
    with pytest.raises(ValueError, match="unknown document attribution method 'nope'"):
        attribute_documents(inputs, "nope")


def test_inputs_need_an_answer_and_documents(tiny_causal):
    m = Mirage(tiny_causal)
    with pytest.raises(ValueError, match="answer is missing"):
        document_inputs(m, {"question": QUESTION, "docs": DOCS})
    with pytest.raises(ValueError, match="answer_ids is empty"):
        document_inputs(m, {"question": QUESTION, "docs": DOCS}, [])
    prepared = m.prepare({"question": QUESTION, "docs": DOCS, "output": ANSWER})
    assert document_inputs(m, prepared).prepared is prepared  # a prepared item is taken as it is


# -- attention rollout ---------------------------------------------------------------------------------------------

def test_rollout_is_the_product_of_the_layers_mixed_with_the_identity():
    from mirage.attribution.methods import rollout

    g = torch.Generator().manual_seed(0)
    layers = [torch.softmax(torch.randn(1, 3, 5, 5, generator=g), dim=-1) for _ in range(2)]
    flow = rollout(layers, residual=0.5)
    mixed = [0.5 * torch.eye(5, dtype=torch.float64) + 0.5 * a[0].double().mean(0) for a in layers]
    torch.testing.assert_close(flow, mixed[1] @ mixed[0])
    torch.testing.assert_close(flow.sum(-1), torch.ones(5, dtype=torch.float64))  # still a distribution per row
    torch.testing.assert_close(rollout(layers[:1], residual=0.0), layers[0][0].double().mean(0))


def test_rollout_reads_the_rows_predicting_each_answer_token(inputs):
    """The method's context scores are the rolled-out flow from the position predicting each answer token, over
    the context tokens (the model's own attention pass, rolled out here)."""
    from mirage.attribution.forward import model_inputs
    from mirage.attribution.methods import attention_pass, rollout

    ids = list(inputs.prepared.tokens.ids)
    flow = rollout(attention_pass(inputs, ids, method="rollout"))
    _seq, rows = model_inputs(inputs.lm, ids, inputs.answer_ids)
    expected = flow[rows][:, list(inputs.prepared.tokens.context_positions)]
    got = attribute_documents(inputs, "rollout", residual=0.5)
    torch.testing.assert_close(torch.tensor(got.context_scores, dtype=torch.float64), expected)


# -- SelfCite's reward ---------------------------------------------------------------------------------------------

def test_the_citation_reward_is_only_the_cited_minus_without_them_on_plain_passes(inputs):
    from mirage.attribution.methods import citation_rewards

    got = citation_rewards(inputs, [[1], [2, 3], [1, 2, 3]])
    expected = [float(_plain_logprobs(inputs, [0]).mean() - _plain_logprobs(inputs, [1, 2]).mean()),
                float(_plain_logprobs(inputs, [1, 2]).mean() - _plain_logprobs(inputs, [0]).mean()),
                float(_plain_logprobs(inputs, [0, 1, 2]).mean() - _plain_logprobs(inputs, []).mean())]
    assert got == pytest.approx(expected, abs=1e-4)


def test_best_of_n_ranks_every_small_set_by_its_reward(inputs):
    from mirage.attribution.methods import best_citation, candidate_sets, citation_rewards

    assert candidate_sets(3, 2) == [(1,), (2,), (3,), (1, 2), (1, 3), (2, 3)]
    ranked = best_citation(inputs, max_size=2)
    assert sorted(ranked.sets) == sorted(candidate_sets(3, 2)) and list(ranked.rewards) == sorted(ranked.rewards,
                                                                                                  reverse=True)
    assert ranked.rewards[0] == pytest.approx(citation_rewards(inputs, [ranked.best])[0])
    with pytest.raises(ValueError, match="numbered 1..3"):
        citation_rewards(inputs, [[4]])


def test_the_selfcite_method_averages_to_each_documents_reward(inputs):
    from mirage.attribution.methods import citation_rewards

    res = attribute_documents(inputs, "selfcite")
    means = torch.tensor(res.doc_scores, dtype=torch.float64).mean(dim=0)
    assert means.tolist() == pytest.approx(citation_rewards(inputs, [[1], [2], [3]]), abs=1e-6)
    assert res.cost.forward_passes == 1 + 2 * inputs.n_docs


# -- value zeroing --------------------------------------------------------------------------------------------------

def _plain_zeroed_output(inputs, layer, rows):
    """Block ``layer``'s output at the rows predicting the answer, in one whole pass of the model (no block run
    again) with that block's value projections zero at positions ``rows`` (None: the plain pass)."""
    from mirage.attribution.forward import model_inputs

    lm = inputs.lm
    seq, predicting = model_inputs(lm, inputs.prepared.tokens.ids, inputs.answer_ids)
    block = model_blocks(lm.model)[layer]
    seen = {}

    def zero(_m, _a, out):
        if rows is not None:
            out = out.clone()
            out[:, rows] = 0
        return out

    handles = [p.register_forward_hook(zero) for p in value_projections(block)]
    handles.append(block.register_forward_hook(
        lambda _m, _a, out: seen.setdefault("h", out[0] if isinstance(out, tuple) else out)))
    try:
        with torch.no_grad():
            lm.model(input_ids=torch.tensor([seq]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return seen["h"][0, predicting].double()


@pytest.mark.parametrize("model", ["tiny_causal", "tiny_sliding"])
def test_value_zeroing_is_the_distance_of_a_whole_pass_with_one_layers_values_zeroed(model, request):
    """Each (layer, document) distance equals the one from a whole pass of the model with that layer's values zero
    at the document's tokens, against the plain pass: the block run again inside the pass gets the same input and
    keyword arguments (masks, rotary tables; sliding-window layers on Gemma 3) as the pass gives it."""
    inputs = _inputs(request.getfixturevalue(model))
    distances = zeroed_layer_distances(inputs)
    tokens = inputs.prepared.tokens
    assert distances.shape == (len(model_blocks(inputs.lm.model)), inputs.n_answer, inputs.n_docs)
    for layer in range(distances.shape[0]):
        plain = _plain_zeroed_output(inputs, layer, None)
        for d in range(inputs.n_docs):
            rows = torch.tensor([p for p, doc in zip(tokens.context_positions, tokens.context_docs) if doc == d])
            moved = _plain_zeroed_output(inputs, layer, rows)
            expected = 1 - torch.nn.functional.cosine_similarity(plain, moved, dim=-1)
            torch.testing.assert_close(distances[layer, :, d], expected, rtol=1e-4, atol=1e-6)
    assert (distances > 0).any()  # zeroing a document moves something
    result = attribute_documents(inputs, "value_zeroing", layers="last_quarter")
    torch.testing.assert_close(torch.tensor(result.doc_scores, dtype=torch.float64), distances[-1:].mean(dim=0))
    assert result.cost.forward_passes == 1 + inputs.n_docs


def test_value_zeroing_names_what_it_cannot_run_on(tiny_seq2seq):
    with pytest.raises(ValueError, match="value_zeroing.*encoder-decoder"):
        attribute_documents(_inputs(tiny_seq2seq), "value_zeroing")


def _inseq_value_zeroing():
    """inseq's value zeroing (its ``ValueZeroing`` attribution), with the one part transformers 5 broke stood in for:
    inseq 0.7.1's hook that stores a block's output and passes the clean one on expects the block to return a tuple,
    and transformers 5's blocks return the hidden states alone. The stand-in does the same for both shapes."""
    from mirage.peers.inseq import import_inseq

    import_inseq()
    from inseq.attr.feat.ops.value_zeroing import ValueZeroing

    def states_hook(self, block_idx, hidden_state_idx=0):
        def hook(_module, _args, output):
            states = output[hidden_state_idx] if isinstance(output, tuple) else output
            self.corrupted_block_output_states[block_idx] = states.clone().float().detach().cpu()
            clean = self.clean_block_output_states[block_idx].to(states.device)
            if isinstance(output, tuple):
                return (*output[:hidden_state_idx], clean, *output[hidden_state_idx + 1:])
            return clean
        return hook

    return ValueZeroing, states_hook


def test_value_zeroing_matches_inseqs_token_level_value_zeroing(tiny_causal):
    """The pass under ``value_zeroing``, with one group per input position, against inseq's value zeroing of the
    same model and tokens: each layer's distances of the row predicting the answer, normalised to sum 1 over the
    positions and floored at 1e-5 as inseq does. inseq reads its last layer after the model's final norm, so the
    last layer is left out; every other one must agree."""
    import inseq

    value_zeroing, states_hook = _inseq_value_zeroing()
    lm = tiny_causal
    prompt = f"{DOCS[0]['text']} {QUESTION}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(value_zeroing, "get_states_extract_and_patch_hook", states_hook)
        model = inseq.load_model(lm.model, "value_zeroing", tokenizer=lm.tokenizer, device="cpu")
        out = model.attribute(prompt, f"{prompt} Paris", show_progress=False).sequence_attributions[0]
    ids = [t.id for t in out.target]
    theirs = out.target_attributions[:-1, 0, :].double().T  # [n_layers, positions before the answer]
    seq = ids[:-1]
    ours = zeroed_distances(lm, seq, [len(seq) - 1], [[p] for p in range(len(seq))])[:, 0, :]  # [n_layers, seq]
    ours = torch.where(ours < 1e-5, torch.zeros_like(ours), ours)
    ours = ours / ours.sum(dim=-1, keepdim=True)
    assert ours.shape == theirs.shape and len(seq) > 5
    torch.testing.assert_close(ours[:-1], theirs[:-1], rtol=1e-3, atol=1e-5)
