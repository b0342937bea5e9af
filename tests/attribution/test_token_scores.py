"""The token-scoring stage (Mirage.score_tokens) on the embedded model: target modes, reuse of generation's logits,
and a custom CTI metric and CCI method registered by name, end to end."""

from __future__ import annotations

import pytest
import torch

from mirage import MirageConfig
from mirage.attribution.cci import register_cci_method
from mirage.attribution.cti import register_cti_metric
from mirage.attribution.forward import answer_logits, token_probabilities
from mirage.attribution.tokenization import tokenize_answer
from mirage.config import ConfigError

QUESTION = "When was the Ikhwan party formed?"
DOCS = [
    {"title": "Ikhwan", "text": "The Ikhwan was a Wahhabi militia formed in 1913 by Ibn Saud to settle the tribes."},
    {"title": "Weather", "text": "Rain fell in the north of the country during the spring of that year."},
]
ANSWER = "The Ikhwan was formed in 1913 by Ibn Saud."


@pytest.fixture(scope="module")
def prepared(embedded_mirage):
    m = embedded_mirage
    prep = m.prepare({"question": QUESTION, "docs": DOCS, "output": ANSWER})
    return prep, tokenize_answer(m.lm.tokenizer, ANSWER)


@pytest.fixture(scope="module")
def selected_scores(embedded_mirage, prepared):
    prep, answer = prepared
    return embedded_mirage.score_tokens(prep, answer)


def test_selected_targets_are_what_attribute_item_reports(embedded_mirage, prepared, selected_scores):
    prep, answer = prepared
    scores = selected_scores
    res = embedded_mirage.attribute_item({"question": QUESTION, "docs": DOCS, "output": ANSWER})
    assert [t.cti for t in res.tokens] == list(scores.cti.scores)
    assert [t.index for t in res.tokens if t.context_sensitive] == list(scores.cti.selected)
    assert res.cti_threshold == scores.cti.threshold
    assert scores.cci.selected == scores.cti.selected and scores.cti.selected
    assert all(len(row) == len(prep.tokens.context_positions) for row in scores.cci.scores)
    assert set(scores.timings) == {"cti", "cci"} and res.timings["cti"] >= 0
    # CTI's with-documents probabilities and contextless top tokens come from the two teacher-forced passes
    with_docs = answer_logits(embedded_mirage.lm, prep.tokens.ids, answer.ids)
    assert scores.cti.probs == pytest.approx(token_probabilities(with_docs, answer.ids), rel=1e-4, abs=1e-6)
    no_docs = answer_logits(embedded_mirage.lm, prep.tokens.contextless_ids, answer.ids)
    assert list(scores.cti.contextless_top) == no_docs.argmax(-1).tolist()


def test_all_and_none_targets(embedded_mirage, prepared, selected_scores):
    """``all`` attributes every answer token (the selected ones as ``selected`` does), ``none`` runs CTI only;
    CTI is the same in every mode."""
    prep, answer = prepared
    every = embedded_mirage.score_tokens(prep, ANSWER, targets="all")
    assert every.cci.selected == tuple(range(len(answer.ids))) and len(every.cci.scores) == len(answer.ids)
    assert every.cti == selected_scores.cti
    for k, i in enumerate(selected_scores.cci.selected):
        assert every.cci.scores[i] == pytest.approx(selected_scores.cci.scores[k], rel=1e-4, abs=1e-7)
    none = embedded_mirage.score_tokens(prep, answer, targets="none")
    assert none.cti == selected_scores.cti and none.cci.scores == ()
    with pytest.raises(ValueError, match="targets='some'"):
        embedded_mirage.score_tokens(prep, answer, targets="some")
    # explicit indices, or a function of the CTI scores, attribute exactly those tokens (ascending)
    picked = embedded_mirage.score_tokens(prep, answer, targets=[3, 0])
    assert picked.cci.selected == (0, 3)
    for k, i in enumerate(picked.cci.selected):
        assert picked.cci.scores[k] == pytest.approx(every.cci.scores[i], rel=1e-4, abs=1e-7)
    chosen = embedded_mirage.score_tokens(prep, answer, targets=lambda cti: set(cti.selected) | {1})
    assert chosen.cci.selected == tuple(sorted(set(selected_scores.cti.selected) | {1}))
    with pytest.raises(ValueError, match="must be answer indices"):
        embedded_mirage.score_tokens(prep, answer, targets=[len(answer.ids)])


def test_generation_logits_are_reused(embedded_mirage, monkeypatch):
    """A just-generated answer is scored from generation's logits: no with-documents pass is run again."""
    import mirage.attribution.token_scores as stage
    from mirage.attribution.generation import generate_answer

    m = embedded_mirage
    cfg = m.config.replace(generation={"max_new_tokens": 8})
    prep = m.prepare({"question": QUESTION, "docs": DOCS}, config=cfg)
    gen = generate_answer(m.lm, prep.tokens.ids, cfg=cfg.generation)
    answer = tokenize_answer(m.lm.tokenizer, gen.text)
    assert list(answer.ids) == gen.ids

    def no_pass(*args, **kwargs):
        raise AssertionError("the with-documents pass ran again")

    monkeypatch.setattr(stage, "with_documents_logits", no_pass)
    scores = m.score_tokens(prep, answer, generated=gen, config=cfg)
    assert list(scores.cti.probs) == token_probabilities(gen.logits, gen.ids)


def _abs_logprob_diff(logp_ctx: torch.Tensor, logp_noctx: torch.Tensor, answer_ids: torch.Tensor) -> torch.Tensor:
    idx = answer_ids.unsqueeze(-1)
    return (logp_ctx.gather(-1, idx) - logp_noctx.gather(-1, idx)).squeeze(-1).abs()


def test_custom_cti_metric_end_to_end(embedded_mirage, prepared, registries):
    prep, answer = prepared
    with pytest.raises(ConfigError, match="cti.metric='test_abs_logprob_diff' is not valid; choose one of .*'js'"):
        MirageConfig().replace(cti={"metric": "test_abs_logprob_diff"})
    register_cti_metric("test_abs_logprob_diff", _abs_logprob_diff)
    with pytest.raises(ValueError, match="already registered"):
        register_cti_metric("test_abs_logprob_diff", _abs_logprob_diff)
    cfg = MirageConfig().replace(cti={"metric": "test_abs_logprob_diff"})
    scores = embedded_mirage.score_tokens(prep, answer, config=cfg)
    lm = embedded_mirage.lm
    with_docs = token_probabilities(answer_logits(lm, prep.tokens.ids, answer.ids), answer.ids, log=True)
    no_docs = token_probabilities(answer_logits(lm, prep.tokens.contextless_ids, answer.ids), answer.ids, log=True)
    manual = [abs(a - b) for a, b in zip(with_docs, no_docs)]
    assert list(scores.cti.scores) == pytest.approx(manual, rel=1e-4, abs=1e-5)
    assert scores.cci.selected == scores.cti.selected
    res = embedded_mirage.attribute(QUESTION, DOCS, answer=ANSWER, config=cfg)
    assert [t.cti for t in res.tokens] == list(scores.cti.scores)


def _doubled_saliency(forward, inputs: torch.Tensor, cfg) -> torch.Tensor:
    from captum.attr import Saliency

    return 2 * Saliency(forward).attribute(inputs, abs=True)


@pytest.mark.parametrize("shared", [True, False], ids=["one-graph", "repeated-input"])
def test_custom_cci_method_end_to_end(embedded_mirage, prepared, selected_scores, registries, shared):
    """A registered method runs through the shared-graph path (with ``from_gradient``) or the repeated-input path
    (without), and the pipeline cites from it."""
    prep, answer = prepared
    register_cci_method("test_doubled", _doubled_saliency,
                        from_gradient=(lambda grad, inputs: 2 * grad) if shared else None)
    cfg = MirageConfig().replace(cci={"method": "test_doubled"})
    scores = embedded_mirage.score_tokens(prep, answer, config=cfg)
    assert scores.cci.selected == selected_scores.cci.selected
    expected = [[2 * v for v in row] for row in selected_scores.cci.scores]
    for got, want in zip(scores.cci.scores, expected):
        assert list(got) == pytest.approx(want, rel=1e-4 if not shared else 1e-6, abs=1e-7)
    assert embedded_mirage.lm.batched_backward is not False
    res = embedded_mirage.attribute(QUESTION, DOCS, answer=ANSWER, config=cfg)
    base = embedded_mirage.attribute(QUESTION, DOCS, answer=ANSWER)
    assert [s.mirage_citations for s in res.sentences] == [s.mirage_citations for s in base.sentences]


ITEMS = [  # prompts and answers of different lengths, so the batch pads
    ({"question": QUESTION, "docs": DOCS}, ANSWER),
    ({"question": "What fell in the north?", "docs": DOCS[1:]}, "Rain."),
    ({"question": "Who founded the Ikhwan?", "docs": [DOCS[0], DOCS[1], DOCS[0]]}, "Ibn Saud founded it in 1913."),
]


def _batched_equals_one_by_one(m, **batch_kwargs):
    prepared = [m.prepare(item) for item, _a in ITEMS]
    answers = [a for _i, a in ITEMS]
    batch = m.score_batch(prepared, answers, item_targets=["selected", "all", [0, 2]], **batch_kwargs)
    for prep, answer, got, spec in zip(prepared, answers, batch, ["selected", "all", [0, 2]]):
        want = m.score_tokens(prep, answer, targets=spec)
        assert got.cti.scores == pytest.approx(want.cti.scores, abs=1e-3, rel=1e-3)
        assert got.cti.contextless_top == want.cti.contextless_top
        assert got.cti.selected == want.cti.selected and got.cci.selected == want.cci.selected
        assert got.cti.logprobs == pytest.approx(want.cti.logprobs, abs=1e-3)
        for row, ref in zip(got.cci.scores, want.cci.scores):
            assert row == pytest.approx(ref, rel=1e-3, abs=1e-5)
    return batch


def test_batched_scoring_equals_one_item_at_a_time(embedded_mirage):
    """Mirage.score_batch (left-padded CTI passes with position ids, then CCI per item) gives each item's
    score_tokens result, in one batch and in batches of one row (a budget smaller than any prompt)."""
    _batched_equals_one_by_one(embedded_mirage)
    _batched_equals_one_by_one(embedded_mirage, max_batch_tokens=1)
    with pytest.raises(ValueError, match="targets='some' is not valid"):
        embedded_mirage.score_batch([embedded_mirage.prepare(ITEMS[0][0])], ["x"], targets="some")


@pytest.mark.parametrize("free_bytes", [1 << 40, 0], ids=["room-for-all-targets", "no-free-memory"])
def test_batched_scoring_takes_every_gradient_from_one_batched_graph(embedded_mirage, monkeypatch, free_bytes):
    """In one batch, CTI's with-documents logits and every item's CCI come from one padded differentiable pass: no
    CCI item by item, and one vmapped backward pass per target rank (the most targets of one item), not per target.
    The free memory the chunking reads is pinned (a CI machine's varies): with room, every rank in one vmapped pass;
    with none, one rank per pass, never fewer than one."""
    import mirage.attribution.token_scores as ts
    from mirage.attribution import cci

    monkeypatch.setattr(cci, "free_memory", lambda device: free_bytes)

    calls = []  # (targets, items) of each vmapped backward pass; unbatched ones as (None, None)
    real = torch.autograd.grad

    def spy(outputs, inputs, *args, **kwargs):
        batched = kwargs.get("is_grads_batched")
        calls.append((kwargs["grad_outputs"].shape[0], inputs.shape[0]) if batched else (None, None))
        return real(outputs, inputs, *args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", spy)
    monkeypatch.setattr(ts, "compute_cci", lambda *a, **k: pytest.fail("CCI ran item by item"))
    prepared = [embedded_mirage.prepare(item) for item, _a in ITEMS]
    batch = embedded_mirage.score_batch(prepared, [a for _i, a in ITEMS], item_targets=["selected", "all", [0, 2]])
    n_targets = [len(b.cci.selected) for b in batch]
    assert n_targets[1] == len(batch[1].cti.scores) and n_targets[2] == 2
    if free_bytes:
        assert calls == [(max(n_targets), len(ITEMS))]
    else:
        assert calls == [(1, len(ITEMS))] * max(n_targets)
    assert sum(n_targets) > max(n_targets)  # fewer backward passes than targets


def test_batched_scoring_mixes_items_without_cci_and_items_whose_targets_come_out_empty(embedded_mirage):
    """An item that wants no CCI runs in the inference batch, an item whose target function picks nothing gets an
    empty CCI from the differentiable batch, and both equal their one-at-a-time scores."""
    prepared = [embedded_mirage.prepare(item) for item, _a in ITEMS]
    answers = [a for _i, a in ITEMS]
    specs = ["none", lambda cti: [], "selected"]
    batch = embedded_mirage.score_batch(prepared, answers, item_targets=specs)
    for prep, answer, got, spec in zip(prepared, answers, batch, specs):
        want = embedded_mirage.score_tokens(prep, answer, targets=spec)
        assert got.cti.scores == pytest.approx(want.cti.scores, abs=1e-3, rel=1e-3)
        assert got.cci.selected == want.cci.selected
        for row, ref in zip(got.cci.scores, want.cci.scores):
            assert row == pytest.approx(ref, rel=1e-3, abs=1e-5)
    assert batch[0].cci.selected == () and batch[1].cci.selected == () and batch[2].cci.selected


def test_batched_scoring_on_an_encoder_decoder(tiny_seq2seq):
    """Right padding of the encoder and decoder inputs, both masked (tiny random model, the real tokenizer)."""
    from mirage import Mirage

    _batched_equals_one_by_one(Mirage(tiny_seq2seq))
