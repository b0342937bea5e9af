"""Per-passage scores beyond CTI/CCI (leave-one-out drops, attention shares), the passage features, the learned
classifier's fit/apply round trip, and the XOR-AttriQA scorer computing only the CCI rows its settings need."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mirage import Mirage
from mirage.attribution.forward import answer_logits, token_probabilities
from mirage.attribution.tokenization import tokenize_answer
from mirage.likelihood.classifier import LearnedModel, fit_learned, load_learned
from mirage.likelihood.features import FEATURES, matrix
from mirage.likelihood.signals import passage_signals
from mirage.scoring.xor_attriqa import ItemScores, scores_from_records
from mirage.scoring.xor_classifier import passage_features
from mirage.scoring.xor_eval import SETTINGS

DATA = Path(__file__).parents[1] / "data" / "xor_attriqa_match"
QUESTION = "When was the Ikhwan party formed?"
DOCS = [
    {"title": "", "text": "The Ikhwan was a Wahhabi militia formed in 1913 by Ibn Saud to settle the tribes."},
    {"title": "", "text": "Rain fell in the north of the country during the spring of that year."},
    {"title": "", "text": "The party was banned in 1930 after a revolt against the king."},
]
ANSWER = "It was formed in 1913."


def _brute_force_loo(m: Mirage, prep, answer_ids) -> list[list[float]]:
    docs = [{"title": d.title, "text": d.text} for d in prep.item.docs]
    out = []
    for j in range(len(docs)):
        rest = m.prepare({"question": QUESTION, "docs": [d for i, d in enumerate(docs) if i != j]},
                         reserve_tokens=len(answer_ids) + 1)
        out.append(token_probabilities(answer_logits(m.lm, rest.tokens.ids, answer_ids), answer_ids, log=True))
    return out


@pytest.mark.parametrize("fixture", ["tiny_causal", "tiny_seq2seq", "tiny_sliding"])
def test_leave_one_out_reuses_the_cache_exactly(fixture, request):
    """The cached leave-one-out passes give what recomputing each prompt whole gives; drops are their sums; the
    attention shares (causal models) sum to 1. A sliding-window model (tiny_sliding: Gemma 3 layers, a window shorter
    than the prompt) cannot cut its cache back past the window: each prompt then runs from a copy of the shared
    prefix's cache, with the same results (before: transformers' RuntimeError from ``crop``)."""
    m = Mirage(request.getfixturevalue(fixture))
    attention_before = m.lm.model.config._attn_implementation
    prep = m.prepare({"question": QUESTION, "docs": DOCS})
    answer = tokenize_answer(m.lm.tokenizer, ANSWER)
    sig = passage_signals(m.lm, prep, answer.ids, prepare=m.prepare)
    expected = _brute_force_loo(m, prep, answer.ids)
    assert len(sig.loo_logprob) == len(DOCS)
    for got, want in zip(sig.loo_logprob, expected):
        assert got == pytest.approx(want, abs=1e-4)
    full = token_probabilities(answer_logits(m.lm, prep.tokens.ids, answer.ids), answer.ids, log=True)
    assert sig.logprob == pytest.approx(full, abs=1e-4)
    assert sig.drop == pytest.approx([sum(full) - sum(row) for row in expected], abs=1e-3)
    # each document alone, and none (the contextless prompt)
    for j, got in enumerate(sig.only_logprob):
        alone = m.prepare({"question": QUESTION, "docs": [DOCS[j]]}, reserve_tokens=len(answer.ids) + 1)
        want = token_probabilities(answer_logits(m.lm, alone.tokens.ids, answer.ids), answer.ids, log=True)
        assert got == pytest.approx(want, abs=1e-4)
    none = token_probabilities(answer_logits(m.lm, prep.tokens.contextless_ids, answer.ids), answer.ids, log=True)
    assert sig.none_logprob == pytest.approx(none, abs=1e-4)
    if not m.lm.is_encoder_decoder:
        assert len(sig.attention) == len(DOCS) and sum(sig.attention) == pytest.approx(1.0)
    assert m.lm.model.config._attn_implementation == attention_before  # restored after the pass
    # the scorer's path: CTI's two passes give the with-documents and no-document log-probabilities, which are not
    # run again (a causal model runs only the prompt's part before the first document, for the cache)
    cti = m.score_tokens(prep, answer, targets="none").cti
    assert cti.logprobs == pytest.approx(full, abs=1e-4) and cti.contextless_logprobs == pytest.approx(none, abs=1e-4)
    calls = []
    hook = m.lm.model.register_forward_pre_hook(lambda _mod, args, kwargs: calls.append(kwargs["input_ids"].shape[1]),
                                                with_kwargs=True)
    try:
        lite = passage_signals(m.lm, prep, answer.ids, prepare=m.prepare, attention=False, leave_one_out=False,
                               logprob=cti.logprobs, none_logprob=cti.contextless_logprobs)
    finally:
        hook.remove()
    assert lite.logprob == list(cti.logprobs) and lite.none_logprob == list(cti.contextless_logprobs)
    for got, want in zip(lite.only_logprob, sig.only_logprob):
        assert got == pytest.approx(want, abs=1e-4)
    assert lite.loo_logprob == [] and lite.attention == []
    if not m.lm.is_encoder_decoder:  # one prefix pass (shorter than the prompt), then one pass per document
        assert len(calls) == 1 + len(DOCS) and calls[0] < len(prep.tokens.ids)


def test_score_item_adds_the_leave_one_out_signals_only_when_asked(tiny_causal):
    """The scorer's signals leave the leave-one-out passes out (the learned features do not use them);
    ``leave_one_out=True`` adds them (what benchmarks/learned_features.py needs), equal to passage_signals' own, and
    the ``loo_*`` features appear; the other signals are unchanged."""
    from mirage.scoring.xor_attriqa import score_item
    from mirage.scoring.xor_data import load_xor_attriqa

    m = Mirage(tiny_causal)
    item = next(i for i in load_xor_attriqa(DATA / "val.jsonl").items if len(i.passages) > 1)
    plain = score_item(m, item, targets="none", signals=True)
    loo = score_item(m, item, targets="none", signals=True, leave_one_out=True)
    assert plain.signals["loo_logprob"] == [] and "loo_drop" not in passage_features(plain)[0]
    assert len(loo.signals["loo_logprob"]) == len(item.passages)
    assert all("loo_drop" in f for f in passage_features(loo))
    for name in ("logprob", "none_logprob", "only_logprob"):
        assert np.allclose(np.asarray(loo.signals[name], dtype=float), np.asarray(plain.signals[name], dtype=float),
                           atol=1e-5), name
    assert loo.cti == plain.cti


def _hand_scores() -> ItemScores:
    # 2 passages of 2 context tokens each, then 1 scaffolding token of passage 1; 3 answer tokens, the last selected
    return ItemScores(key="k", tokens=["a", "b", "c"], cti=[0.1, 0.1, 2.0],
                      cci={2: [1.0, 1.0, 4.0, 2.0, 2.0]}, context_docs=[[0, 2], [1, 3]], n_docs=2,
                      signals={"logprob": [-1.0, -1.0, -1.0], "loo_logprob": [[-1.0, -2.0, -1.0], [-1.0, -1.0, -1.5]],
                               "drop": [1.0, 0.5], "attention": [0.25, 0.75],
                               "only_logprob": [[-0.5, -0.5, -1.0], [-2.0, -1.0, -1.0]],
                               "none_logprob": [-2.0, -1.0, -1.0]},
                      context_content=[[1, 4], [0, 1]])


def test_passage_features_by_hand():
    feats = passage_features(_hand_scores())
    assert len(feats) == 2 and all(set(FEATURES) <= set(f) for f in feats)
    a, b = feats
    # saliency sums: passage 0 = 2, passage 1 = 8 of 10; largest 1 vs 4
    assert (a["ex_mass"], b["ex_mass"]) == pytest.approx((0.2, 0.8))
    assert (a["ex_cti_mass"], b["ex_cti_mass"]) == pytest.approx((0.4, 1.6))
    assert (a["ex_share_max"], b["ex_share_max"]) == pytest.approx((0.25, 1.0))
    # density: mean per token (1 and 8/3) over the context's mean (2)
    assert (a["ex_density"], b["ex_density"]) == pytest.approx((0.5, 4 / 3))
    # content only: the scaffolding token (saliency 2) of passage 1 is left out -> 2 vs 6
    assert (a["content_mass"], b["content_mass"]) == pytest.approx((0.25, 0.75))
    assert (a["loo_drop"], b["loo_drop"]) == (1.0, 0.5)
    assert (a["loo_drop_token_max"], b["loo_drop_token_max"]) == (1.0, 0.5)
    assert (a["loo_drop_rank"], b["loo_drop_rank"]) == (1.0, 0.0)
    assert (a["attention"], b["attention"]) == (0.5, 1.5)
    # alone, passage 0 raises the answer from -4 to -2 nats; passage 1 leaves it at -4
    assert (a["only_gain"], b["only_gain"]) == (2.0, 0.0)
    assert (a["only_gain_token_max"], b["only_gain_token_max"]) == (1.5, 0.0)
    assert (a["only_vs_full"], b["only_vs_full"]) == (1.0, -1.0)
    assert (a["only_gain_rank"], b["only_gain_rank"]) == (1.0, 0.0)
    assert a["cti_max"] == 2.0 and a["inv_docs"] == 0.5 and (a["length_frac"], b["length_frac"]) == (0.4, 0.6)
    assert "all_mass" not in a  # not every token has its row
    with pytest.raises(KeyError, match="all-tokens"):
        matrix(feats, ["all_mass"])


def test_learned_setting_on_too_few_calibration_items_is_a_config_error():
    """One calibration item cannot be cross-validated (before: sklearn's GroupKFold ValueError from deep inside);
    calibration passages of one class cannot train a classifier. Both name the fix."""
    from dataclasses import replace

    from mirage.config import ConfigError, CTIConfig
    from mirage.scoring.xor_classifier import fit_learned_model
    from mirage.scoring.xor_data import XorItem

    def item(q: str, labels: tuple[bool, ...]) -> XorItem:
        return XorItem(file="cal.jsonl", line=1, lang="fi", question=q, passages=("a", "b"), answer="x",
                       labels=labels, idxs=(0, 1))

    one = item("q", (True, False))
    with pytest.raises(ConfigError, match=r"1 scored item.*2 items or more.*--calibrate-on"):
        fit_learned_model([one], {one.key: replace(_hand_scores(), key=one.key)}, cti=CTIConfig(selector="std"))
    same = [item("q1", (False, False)), item("q2", (False, False))]
    with pytest.raises(ConfigError, match="both supporting and unsupporting.*--settings ex cal"):
        fit_learned_model(same, {i.key: replace(_hand_scores(), key=i.key) for i in same},
                          cti=CTIConfig(selector="std"))


def test_learned_model_round_trips_with_identical_predictions(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] - 0.5 * X[:, 1] + rng.normal(scale=0.5, size=120)) > 0.8
    groups = [i // 4 for i in range(120)]
    model = fit_learned(X.tolist(), y.tolist(), groups=groups, names=["a", "b", "c"])
    assert model.C in (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0) and 0 < model.threshold < 1
    assert model.coef[0] > 0 > model.coef[1] and abs(model.coef[2]) < abs(model.coef[0])
    assert next(iter(model.coefficients())) == "a"
    path = tmp_path / "learned.json"
    path.write_text(json.dumps(model.to_dict()))
    again = LearnedModel.from_dict(json.loads(path.read_text()))
    assert again.predict_proba(X.tolist()) == model.predict_proba(X.tolist())
    assert again.predict(X.tolist()) == model.predict(X.tolist())
    # the same as scikit-learn's own fit at that C on the standardised rows
    from sklearn.linear_model import LogisticRegression

    z = (X - np.asarray(model.mean)) / np.asarray(model.scale)
    ref = LogisticRegression(C=model.C, class_weight="balanced", max_iter=5000).fit(z, y)
    assert model.predict_proba(X.tolist()) == pytest.approx(ref.predict_proba(z)[:, 1].tolist(), abs=1e-6)
    # 80 % accuracy or better on this separable-with-noise data
    assert np.mean(np.asarray(model.predict(X.tolist())) == y) > 0.8
    with pytest.raises(ValueError, match="both supporting and unsupporting"):
        fit_learned(X.tolist(), [True] * 120, groups=groups, names=["a", "b", "c"])


def test_the_agreement_operating_point_is_chosen_out_of_fold():
    """``cv["agreement_threshold"]`` maximises agreement of the out-of-fold probabilities (refitting the folds by
    hand), as ``threshold`` maximises their F1; on rare positives it cites no more passages than the F1 point."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    from mirage.likelihood.classifier import best_threshold

    rng = np.random.default_rng(1)
    X = rng.normal(size=(160, 2))
    y = (X[:, 0] + rng.normal(scale=0.8, size=160)) > 1.0  # about a fifth positive, like XOR-AttriQA's passages
    groups = [i // 4 for i in range(160)]
    model = fit_learned(X.tolist(), y.tolist(), groups=groups, names=["a", "b"])
    z = (X - np.asarray(model.mean)) / np.asarray(model.scale)
    oof = np.zeros(len(y))
    group_ids = np.unique([str(g) for g in groups], return_inverse=True)[1]  # the folds fit_learned draws
    for train, test in GroupKFold(n_splits=model.cv["folds"]).split(z, y, group_ids):
        oof[test] = LogisticRegression(C=model.C, class_weight="balanced", max_iter=5000,
                                       random_state=0).fit(z[train], y[train]).predict_proba(z[test])[:, 1]
    t_agree, agree = best_threshold(oof.tolist(), y.tolist(), "agreement")
    t_f1, f1 = best_threshold(oof.tolist(), y.tolist(), "f1")
    assert model.cv["agreement_threshold"] == pytest.approx(t_agree) and model.threshold == pytest.approx(t_f1)
    assert model.cv["oof_agreement_at_threshold"] == pytest.approx(agree) and agree > 1 - y.mean()
    assert model.cv["oof_f1_at_threshold"] == pytest.approx(f1)
    assert model.cv["agreement_threshold"] >= model.threshold


@pytest.mark.slow
def test_xor_scorer_computes_only_needed_rows_with_identical_results(embedded_mirage, tmp_path, monkeypatch):
    """The default run (CCI rows of the tokens the settings select) and ``--all-tokens`` (every row, the behaviour
    before) give identical results for every setting; the default stores fewer rows; a re-run computes nothing, and
    a lost row is computed again alone."""
    from mirage.runs.experiment import ExperimentConfig
    from mirage.runs.store import read_records
    from mirage.scoring.benchmarks import XorAttriQAOptions, run_xor_attriqa

    experiment = ExperimentConfig.from_dict({"model": "smollm2-135m-instruct", "limit": 2, "data": {
        "eval": [str(DATA / "val.jsonl")], "calibrate_on": [str(DATA / "train.jsonl")]}}, command="xor-attriqa")

    def run(out, **kw):
        return run_xor_attriqa(experiment, XorAttriQAOptions(output=str(out), **kw), mirage=embedded_mirage)

    every = run(tmp_path / "all", all_tokens=True)
    needed = run(tmp_path / "needed")
    a, b = every.to_dict(), needed.to_dict()
    for metric in ("agreement", "precision", "recall", "f1", "balanced_accuracy", "roc_auc"):
        for setting in (*SETTINGS, "learned", "learned_agreement"):
            assert a[metric][setting] == b[metric][setting], (metric, setting)
    assert a["roc_auc"]["passage_score"] == b["roc_auc"]["passage_score"]
    assert a["sweep"] == b["sweep"] and a["calibration"] == b["calibration"]
    assert a["features"]["learned"] == b["features"]["learned"]
    # mirage_raw needs every row: always there with all_tokens; by default only when the needed rows happen to be all
    assert "mirage_raw" in a["roc_auc"] and b["roc_auc"].get("mirage_raw", a["roc_auc"]["mirage_raw"]) == \
        a["roc_auc"]["mirage_raw"]
    # the CTI passes of new items batched (the GPU default): the same tables
    c = run(tmp_path / "batched", batch_items=3).to_dict()
    def flat(tree, prefix=""):
        if isinstance(tree, dict):
            return {k: v for key, sub in tree.items() for k, v in flat(sub, f"{prefix}/{key}").items()}
        return {prefix: tree}

    for part in ("agreement", "f1", "balanced_accuracy", "roc_auc", "calibration"):
        got, want = flat(c[part]), flat(b[part])
        assert got.keys() == want.keys(), part
        for key, value in want.items():  # numbers within rounding; undefined scores (None) and names the same
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert got[key] == pytest.approx(value, rel=1e-4), (part, key)
            else:
                assert got[key] == value, (part, key)

    def rows(out):
        return [r for r in read_records(out / "scores.jsonl") if "token" in r]

    n_tokens = sum(len(s.cti) for s in scores_from_records(read_records(tmp_path / "all" / "scores.jsonl")).values()
                   if s.n_docs > 1)
    assert len(rows(tmp_path / "all")) == n_tokens >= len(rows(tmp_path / "needed"))

    # a re-run finds everything stored: no model pass at all
    import mirage.scoring.xor_attriqa as xa

    def refuse(*args, **kwargs):
        raise AssertionError("a stored row was computed again")

    with monkeypatch.context() as patch:
        patch.setattr(xa, "score_item", refuse)
        assert run(tmp_path / "needed").to_dict()["f1"] == b["f1"]
    # lose the last stored row (a killed run's torn record is cut; here the whole line goes): only it is recomputed
    path = tmp_path / "needed" / "scores.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    last_row = max(i for i, line in enumerate(lines) if '"token"' in line)
    lost = json.loads(lines[last_row])
    path.write_text("".join(lines[:last_row] + lines[last_row + 1:]))
    calls = []
    real = xa.score_item

    def spy(*args, **kwargs):
        calls.append(kwargs.get("targets"))
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(xa, "score_item", spy)
        assert run(tmp_path / "needed").to_dict()["f1"] == b["f1"]
    assert calls == [[lost["token"]]]


def test_a_run_starts_from_another_runs_stored_outputs(embedded_mirage, tmp_path, monkeypatch, capsys):
    """``--reuse-from``: a run that changes only how the stored rows are aggregated starts from the other run's store
    and runs no model pass, with the results of the same run from scratch; a store of other settings (another CCI
    target) is refused, naming what differs; a store that already holds records is left as it is."""
    import dataclasses

    import mirage.scoring.xor_attriqa as xa
    from mirage.config import ConfigError
    from mirage.runs.experiment import ExperimentConfig
    from mirage.runs.store import read_records
    from mirage.scoring.benchmarks import XorAttriQAOptions, run_xor_attriqa

    experiment = ExperimentConfig.from_dict({"model": "smollm2-135m-instruct", "limit": 2, "data": {
        "eval": [str(DATA / "val.jsonl")], "calibrate_on": [str(DATA / "train.jsonl")]}}, command="xor-attriqa")
    content = dataclasses.replace(experiment, pipeline=experiment.pipeline.replace(aggregation={"context": "content"}))

    def run(exp, out, **kw):
        return run_xor_attriqa(exp, XorAttriQAOptions(output=str(out), groups=("ex",), **kw),
                               mirage=embedded_mirage)

    run(experiment, tmp_path / "first")
    fresh = run(content, tmp_path / "fresh").to_dict()

    def refuse(*args, **kwargs):
        raise AssertionError("a stored row was computed again")

    with monkeypatch.context() as patch:
        patch.setattr(xa, "score_item", refuse)
        patch.setattr(xa, "score_item_batch", refuse)
        reused = run(content, tmp_path / "reused", reuse_from=str(tmp_path / "first"))
    for part in ("agreement", "f1", "balanced_accuracy", "roc_auc", "calibration"):
        assert reused.to_dict()[part] == fresh[part], part
    assert reused.settings["reuse_from"] == str(tmp_path / "first")
    assert read_records(tmp_path / "reused" / "scores.jsonl") == read_records(tmp_path / "first" / "scores.jsonl")
    # resumed: its own store is kept, whatever --reuse-from names
    before = (tmp_path / "reused" / "scores.jsonl").read_bytes()
    run(content, tmp_path / "reused", reuse_from=str(tmp_path / "fresh"))
    assert (tmp_path / "reused" / "scores.jsonl").read_bytes() == before
    logprob = dataclasses.replace(experiment, pipeline=experiment.pipeline.replace(cci={"target": "logprob"}))
    with pytest.raises(ConfigError, match="cci_target"):
        run(logprob, tmp_path / "other", reuse_from=str(tmp_path / "first"))
    with pytest.raises(ConfigError, match="no run.json"):
        run(experiment, tmp_path / "third", reuse_from=str(tmp_path))
    # a run folder shared without its store: nothing to start from, so the rows are computed here, with a note
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "run.json").write_bytes((tmp_path / "first" / "run.json").read_bytes())
    calls = []
    real = xa.score_item

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(xa, "score_item", spy)
        alone = run(content, tmp_path / "alone", reuse_from=str(shared))
    assert calls and alone.to_dict()["f1"] == fresh["f1"]
    assert "holds no scores.jsonl" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="self-match"):
        XorAttriQAOptions(output="o", reuse_from="x", self_match=True)


def _only_gain_model(path: Path) -> Path:
    """A classifier that cites a document when, alone, it makes the sentence more likely than no document does."""
    model = LearnedModel(features=["only_gain"], mean=[0.0], scale=[1.0], coef=[5.0], intercept=0.0, threshold=0.5,
                         C=1.0, n_rows=0, n_items=0)
    path.write_text(json.dumps(model.to_dict()))
    return path


@pytest.mark.slow
def test_learned_citation_rule_in_attribute(embedded_mirage, tmp_path):
    """``aggregation.rule: learned`` cites, per sentence, what the classifier says; here: the documents that alone
    raise the sentence's log-probability over no document, checked by force-decoding each prompt."""
    from mirage.config import ConfigError

    docs = [{"title": "Ikhwan", "text": DOCS[0]["text"]}, {"title": "Weather", "text": DOCS[1]["text"]}]
    cfg = embedded_mirage.config.replace(aggregation={"rule": "learned",
                                                      "learned_model": str(_only_gain_model(tmp_path / "m.json"))})
    res = embedded_mirage.attribute(QUESTION, docs, answer=ANSWER, config=cfg)
    m = embedded_mirage
    answer = tokenize_answer(m.lm.tokenizer, res.answer)
    prep = m.prepare({"question": QUESTION, "docs": docs}, reserve_tokens=len(answer.ids) + 1)
    none = sum(token_probabilities(answer_logits(m.lm, prep.tokens.contextless_ids, answer.ids), answer.ids, log=True))
    gains = []
    for d in docs:
        alone = m.prepare({"question": QUESTION, "docs": [d]}, reserve_tokens=len(answer.ids) + 1)
        gains.append(sum(token_probabilities(answer_logits(m.lm, alone.tokens.ids, answer.ids), answer.ids,
                                             log=True)) - none)
    (sentence,) = res.sentences
    assert sentence.mirage_citations == sorted((d + 1 for d in range(2) if gains[d] > 0), key=lambda d: -gains[d - 1])
    assert 1 in sentence.mirage_citations  # the document that says 1913
    assert len(sentence.doc_scores) == 2 and res.timings["learned"] > 0
    # no classifier for a model without a shipped one: the error says how to fit one
    with pytest.raises(ConfigError, match="--calibrate-on"):
        load_learned(None, "no-such-model")
    with pytest.raises(ConfigError, match="not a learned classifier file"):
        load_learned(str(tmp_path / "absent.json"), "no-such-model")
    # shipped:MODEL names a shipped classifier whatever folder mirage is installed in
    assert load_learned("shipped:smollm2-135m-instruct", "another-model") == load_learned(None, "smollm2-135m-instruct")
    with pytest.raises(ConfigError, match="no classifier ships for 'no-such-model'"):
        load_learned("shipped:no-such-model", "smollm2-135m-instruct")


@pytest.mark.slow
def test_group_passages_calibrates_on_answers_rebuilt_from_the_per_passage_release(embedded_mirage, tmp_path):
    """``--group-passages``: the learned classifier is fitted on the per-passage release's rows grouped by answer (7
    rows, 5 answers in the slice), not on each row alone; both runs share one store, and the setting is recorded."""
    from mirage.runs.experiment import ExperimentConfig
    from mirage.scoring.benchmarks import XorAttriQAOptions, run_xor_attriqa

    experiment = ExperimentConfig.from_dict({"model": "smollm2-135m-instruct", "data": {
        "eval": [str(DATA / "val.jsonl")], "calibrate_on": [str(DATA.parent / "xor_attriqa_full" / "train.jsonl")]}},
        command="xor-attriqa")

    def run(group):
        options = XorAttriQAOptions(output=str(tmp_path), groups=("learned",), group_passages=group)
        return run_xor_attriqa(experiment, options, mirage=embedded_mirage)

    grouped, single = run(True), run(False)
    assert grouped.settings["group_passages"] is True and single.settings["group_passages"] is False
    assert (grouped.features["learned"]["n_items"], grouped.features["learned"]["n_rows"]) == (5, 7)
    assert (single.features["learned"]["n_items"], single.features["learned"]["n_rows"]) == (7, 7)
