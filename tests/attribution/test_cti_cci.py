"""CTI and CCI invariants on tiny seeded models built in memory (real code paths, real tokenizer). The conformance
tests of the CTI metrics (:data:`~mirage.registry.CTI_METRICS`) and of the CCI methods of this module's own passes
(:data:`~mirage.registry.CCI_METHODS`; those backed by a document method are tests/attribution/test_methods_as_cci.py's)
are parametrised over the registries: registering one is enough to get it tested."""

import math

import pytest
import torch

from mirage import Mirage, MirageConfig
from mirage.attribution.cci import compute_cci, select_context
from mirage.attribution.cti import compute_cti, contrast_scores, select_tokens
from mirage.attribution.forward import answer_logits, model_inputs
from mirage.attribution.graphs import attribution_graph
from mirage.config import CCIConfig, CTIConfig
from mirage.registry import CCI_METHODS, CTI_METRICS

QUESTION = "When was the Ikhwan party formed?"
DOCS = [
    {"title": "Ikhwan", "text": "The Ikhwan was a Wahhabi militia formed in 1913 by Ibn Saud."},
    {"title": "Weather", "text": "Rain fell in the north of the country during the spring."},
]
ANSWER = "It was formed in 1913 by Ibn Saud."
#: The CCI methods of this module's passes: those that share the with-documents graph (``from_gradient``), and those
#: run on the input repeated per target (``attribute``, every method of the module's own passes).
SHARED_GRAPH = sorted(name for name, spec in CCI_METHODS.items() if spec.from_gradient is not None)
OWN_PASSES = sorted(name for name, spec in CCI_METHODS.items() if spec.attribute is not None)


def test_kl_directions_js_and_prob_diff_against_torch():
    torch.manual_seed(0)
    a, b = torch.randn(6, 50), torch.randn(6, 50)
    ids = list(range(6))
    la, lb = a.log_softmax(-1), b.log_softmax(-1)
    kl_b_a = torch.nn.functional.kl_div(la, lb, reduction="none", log_target=True).sum(-1)  # KL(P_b || P_a)
    assert torch.allclose(contrast_scores(a, b, ids, "kl_noctx_ctx"), kl_b_a, atol=1e-5)
    kl_a_b = torch.nn.functional.kl_div(lb, la, reduction="none", log_target=True).sum(-1)
    assert torch.allclose(contrast_scores(a, b, ids, "kl_ctx_noctx"), kl_a_b, atol=1e-5)
    js = contrast_scores(a, b, ids, "js")
    assert torch.allclose(js, contrast_scores(b, a, ids, "js"), atol=1e-6) and (js <= math.log(2) + 1e-6).all()
    pd = contrast_scores(a, b, ids, "prob_diff")
    assert torch.allclose(pd, la.exp()[range(6), ids] - lb.exp()[range(6), ids], atol=1e-6)


@pytest.mark.parametrize("metric", sorted(CTI_METRICS))
def test_every_cti_metric_is_finite_with_masked_logits(metric):
    a = torch.tensor([[0.0, -float("inf"), 1.0]])
    b = torch.tensor([[0.0, 2.0, -float("inf")]])
    assert torch.isfinite(contrast_scores(a, b, [0], metric)).all()


@pytest.mark.parametrize("metric", sorted(CTI_METRICS))
def test_every_cti_metric_gives_one_score_per_answer_token(metric):
    """The metric's contract (:data:`mirage.attribution.cti.CTIMetricFn`): one finite fp32 score per answer token,
    whatever the logits' dtype, selectable by name in the config and through :func:`compute_cti`."""
    torch.manual_seed(0)
    a, b = torch.randn(6, 50), torch.randn(6, 50)
    ids = [3, 1, 4, 1, 5, 9]
    for dtype in (torch.float32, torch.bfloat16):
        scores = contrast_scores(a.to(dtype), b.to(dtype), ids, metric)
        assert scores.shape == (6,) and scores.dtype == torch.float32 and torch.isfinite(scores).all()
    same = contrast_scores(a, a, ids, metric)  # no context effect: no token scores more than one that has one
    assert same.abs().max() <= contrast_scores(a, b, ids, metric).abs().max() + 1e-6
    cti = compute_cti(a, b, ids, cfg=CTIConfig(metric=metric, std_k=0))
    assert len(cti.scores) == 6 and cti.selected and CTIConfig(metric=metric).metric == metric


def test_std_selector_hand_case():
    scores = [0.1, 0.2, 0.3, 2.0]
    mean = sum(scores) / 4
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / 3)
    selected, threshold = select_tokens(scores, CTIConfig(std_k=1.0))
    assert threshold == pytest.approx(mean + std) and selected == (3,)
    assert select_tokens(scores, CTIConfig(std_k=0))[0] == (3,)
    assert select_tokens([0.7], CTIConfig())[0] == (0,)  # a one-token answer is compared with itself
    assert select_tokens(scores, CTIConfig(selector="threshold", threshold=0.25))[0] == (2, 3)


def test_std_selector_short_answers_bound():
    """The short-answer limit of MIRAGE-EX (docs/method.md, "CTI selector"): with the sample std no score lies more
    than (n - 1) / sqrt(n) std above the mean, so at k = 1 a two-token answer never keeps a token, and a three-token one
    only when one token stands out; a calibrated threshold does not depend on the length. (0.373, 1.633, 1.472) are the
    CTI scores of the tuned model's answer "165" in its hai study, which got no MIRAGE citation."""
    gen = torch.Generator().manual_seed(0)
    for n in (2, 3, 4, 8):
        bound = (n - 1) / math.sqrt(n)
        for _ in range(200):
            scores = (torch.rand(n, generator=gen) * 3).tolist()
            assert select_tokens(scores, CTIConfig(std_k=bound + 1e-6))[0] == ()
            if n == 2:
                assert select_tokens(scores, CTIConfig(std_k=1.0))[0] == ()
        # the bound is tight: one token standing out from n - 1 equal ones lies exactly `bound` std above the mean
        standing_out = [0.5] * (n - 1) + [2.0]
        assert select_tokens(standing_out, CTIConfig(std_k=bound - 1e-6))[0] == (n - 1,)
    assert select_tokens([0.373, 1.633, 1.472], CTIConfig(std_k=1.0))[0] == ()
    assert select_tokens([0.2, 0.3, 1.9], CTIConfig(std_k=1.0))[0] == (2,)
    assert select_tokens([0.373, 1.633, 1.472], CTIConfig(selector="threshold", threshold=1.0))[0] == (1, 2)


def test_cci_selectors_hand_cases():
    scores = [0.0, 1.0, 2.0, 10.0, 9.6, 3.0]
    assert select_context(scores, CCIConfig(top_k=2, top_percent=None)) == [3, 4]
    # range rule: >= 10 - 0.05 * (10 - 0) = 9.5
    assert select_context(scores, CCIConfig(top_percent=5)) == [3, 4]
    # percentile rule: >= the 95th percentile (interpolated: 9.8)
    assert select_context(scores, CCIConfig(top_percent=5, percent_rule="percentile")) == [3]
    assert select_context(scores, CCIConfig(top_percent=100)) == list(range(6))


def _prepared(lm):
    m = Mirage(lm)
    prep = m.prepare({"question": QUESTION, "docs": DOCS})
    from mirage.attribution.tokenization import tokenize_answer

    return prep, tokenize_answer(lm.tokenizer, ANSWER)


@pytest.mark.parametrize("fixture", ["tiny_causal", "tiny_seq2seq"])
def test_teacher_forced_cti_equals_step_by_step_passes(fixture, request):
    """Two teacher-forced passes give the same distributions as one pass per answer prefix (the reference loop)."""
    lm = request.getfixturevalue(fixture)
    prep, ans = _prepared(lm)
    full = answer_logits(lm, prep.tokens.ids, ans.ids)
    for i in (0, 3, len(ans.ids) - 1):
        step = answer_logits(lm, prep.tokens.ids, ans.ids[: i + 1])[-1]
        assert torch.allclose(full[i], step, atol=1e-4)


def _manual_saliency(lm, input_ids, position, target, contrast, ctx_positions):
    emb = lm.model.get_input_embeddings()(torch.tensor([input_ids])).detach().requires_grad_(True)
    logp = lm.model(inputs_embeds=emb).logits[0, position].log_softmax(-1)
    value = logp[target] - (logp[contrast] if contrast is not None else 0)
    (grad,) = torch.autograd.grad(value, emb)
    return grad[0, ctx_positions].norm(dim=-1)


def test_batched_cci_matches_one_backward_per_token(tiny_causal):
    lm = tiny_causal
    prep, ans = _prepared(lm)
    input_ids, positions = model_inputs(lm, prep.tokens.ids, ans.ids)
    ctx_top = answer_logits(lm, prep.tokens.contextless_ids, ans.ids).argmax(-1).tolist()
    ctx_top[2] = ans.ids[2]  # force the "same token" case: contrast scored without context, gradient of log p(y)
    selected = [0, 2, 5, len(ans.ids) - 1]
    one = compute_cci(lm, input_ids, ans.ids, positions, selected, ctx_top, prep.tokens.context_positions,
                      cfg=CCIConfig(batch_size=1))
    batched = compute_cci(lm, input_ids, ans.ids, positions, selected, ctx_top, prep.tokens.context_positions,
                          cfg=CCIConfig(batch_size=3))
    assert batched.contrast_ids[1] is None
    for k, i in enumerate(selected):
        manual = _manual_saliency(lm, input_ids, positions[i], ans.ids[i], batched.contrast_ids[k],
                                  list(prep.tokens.context_positions))
        assert torch.allclose(torch.tensor(one.scores[k]), manual, rtol=1e-4, atol=1e-7)
        assert torch.allclose(torch.tensor(batched.scores[k]), manual, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("method", SHARED_GRAPH)
def test_shared_forward_matches_repeated_rows_and_leaves_parameters_alone(tiny_causal, monkeypatch, method):
    """The vmapped-backward path (one forward) and the fallback (input repeated per target) give the same scores;
    parameters that required grad still do afterwards."""
    lm = tiny_causal
    prep, ans = _prepared(lm)
    input_ids, positions = model_inputs(lm, prep.tokens.ids, ans.ids)
    ctx_top = answer_logits(lm, prep.tokens.contextless_ids, ans.ids).argmax(-1).tolist()
    selected = [1, 3, len(ans.ids) - 1]
    flags = [p.requires_grad for p in lm.model.parameters()]
    cfg = CCIConfig(method=method, batch_size=2)
    shared = compute_cci(lm, input_ids, ans.ids, positions, selected, ctx_top, prep.tokens.context_positions, cfg=cfg)
    monkeypatch.setattr(lm, "batched_backward", False)
    repeated = compute_cci(lm, input_ids, ans.ids, positions, selected, ctx_top, prep.tokens.context_positions,
                           cfg=cfg)
    assert torch.allclose(torch.tensor(shared.scores), torch.tensor(repeated.scores), rtol=1e-4, atol=1e-7)
    assert [p.requires_grad for p in lm.model.parameters()] == flags
    if method == "input_x_gradient":
        emb = lm.model.get_input_embeddings()(torch.tensor([input_ids])).detach().requires_grad_(True)
        i, y_nc = selected[0], shared.contrast_ids[0]
        logp = lm.model(inputs_embeds=emb).logits[0, positions[i]].log_softmax(-1)
        (grad,) = torch.autograd.grad(logp[ans.ids[i]] - (logp[y_nc] if y_nc is not None else 0), emb)
        manual = (grad * emb)[0, list(prep.tokens.context_positions)].norm(dim=-1)
        assert torch.allclose(torch.tensor(shared.scores[0]), manual, rtol=1e-4, atol=1e-7)


def test_one_graph_serves_cti_and_cci(tiny_causal):
    """The pipeline's shared forward pass gives CTI the same logits as the inference pass, and CCI the same scores
    as a run that builds its own (cut) graph."""
    lm = tiny_causal
    prep, ans = _prepared(lm)
    input_ids, positions = model_inputs(lm, prep.tokens.ids, ans.ids)
    graph = attribution_graph(lm, input_ids, ans.ids, positions)
    assert torch.allclose(graph.answer_logits(), answer_logits(lm, prep.tokens.ids, ans.ids), atol=1e-5)
    top = answer_logits(lm, prep.tokens.contextless_ids, ans.ids).argmax(-1).tolist()
    selected = [4, 1]
    own = compute_cci(lm, input_ids, ans.ids, positions, selected, top, prep.tokens.context_positions,
                      cfg=CCIConfig())
    shared = compute_cci(lm, input_ids, ans.ids, positions, selected, top, prep.tokens.context_positions,
                         cfg=CCIConfig(batch_size=1), graph=graph)
    assert torch.allclose(torch.tensor(shared.scores), torch.tensor(own.scores), rtol=1e-4, atol=1e-7)
    assert all(p.grad is None for p in lm.model.parameters())


def test_vmap_failure_falls_back_to_repeated_rows(tiny_causal, monkeypatch, refuse_batched_grad):
    """A model whose backward vmap cannot batch is remembered (on the loaded model) and attributed by the fallback
    path."""
    lm = tiny_causal
    prep, ans = _prepared(lm)
    input_ids, positions = model_inputs(lm, prep.tokens.ids, ans.ids)
    top = [0] * len(ans.ids)
    expected = compute_cci(lm, input_ids, ans.ids, positions, [2], top, prep.tokens.context_positions,
                           cfg=CCIConfig())
    monkeypatch.setattr(lm, "batched_backward", None)
    refuse_batched_grad()
    out = compute_cci(lm, input_ids, ans.ids, positions, [2], top, prep.tokens.context_positions, cfg=CCIConfig())
    assert lm.batched_backward is False
    assert torch.allclose(torch.tensor(out.scores), torch.tensor(expected.scores), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("method", OWN_PASSES)
def test_every_cci_method_gives_one_score_per_context_token(tiny_causal, method):
    lm = tiny_causal
    prep, ans = _prepared(lm)
    input_ids, positions = model_inputs(lm, prep.tokens.ids, ans.ids)
    top = [0] * len(ans.ids)
    out = compute_cci(lm, input_ids, ans.ids, positions, [1, 4], top, prep.tokens.context_positions,
                      cfg=CCIConfig(method=method, ig_steps=4))
    assert len(out.scores) == 2
    assert all(len(row) == len(prep.tokens.context_positions) for row in out.scores)
    assert all(math.isfinite(v) and v >= 0 for row in out.scores for v in row)


def test_cti_selected_tokens_feed_cci(tiny_causal):
    lm = tiny_causal
    prep, ans = _prepared(lm)
    cti = compute_cti(answer_logits(lm, prep.tokens.ids, ans.ids),
                      answer_logits(lm, prep.tokens.contextless_ids, ans.ids), ans.ids, cfg=CTIConfig(std_k=0))
    assert cti.selected and all(cti.scores[i] >= cti.threshold for i in cti.selected)
    assert len(cti.contextless_top) == len(ans.ids)


@pytest.mark.parametrize("fixture", ["tiny_causal", "tiny_seq2seq"])
def test_pipeline_on_tiny_models_gives_a_well_formed_result(fixture, request):
    lm = request.getfixturevalue(fixture)
    cfg = MirageConfig().replace(cti={"std_k": 0.0}, cci={"top_k": 3, "top_percent": None})
    res = Mirage(lm, config=cfg).attribute(QUESTION, DOCS, answer=ANSWER + " [1]")
    assert res.answer == ANSWER and res.sentences[0].self_citations == [1]
    assert any(t.context_sensitive for t in res.tokens)
    for tok in res.tokens:
        assert res.answer[tok.start:tok.end] == tok.text or tok.end <= tok.start
        if tok.context_sensitive:
            assert 1 <= len(tok.cited_docs) <= 2 and len(tok.top_context) == 5
    assert all(set(s.mirage_citations) <= {1, 2} for s in res.sentences)


def test_cti_keeps_each_answer_tokens_probability_with_documents(tiny_causal):
    """CTIScores.probs (and AnswerToken.prob, which the bias study's attribution confidence reads) are the
    with-documents softmax probabilities of the answer tokens."""
    lm = tiny_causal
    prep, ans = _prepared(lm)
    logits = answer_logits(lm, prep.tokens.ids, ans.ids)
    cti = compute_cti(logits, answer_logits(lm, prep.tokens.contextless_ids, ans.ids), ans.ids, cfg=CTIConfig())
    manual = torch.softmax(logits, -1)[torch.arange(len(ans.ids)), torch.tensor(ans.ids)]
    assert torch.allclose(torch.tensor(cti.probs), manual, atol=1e-6)
