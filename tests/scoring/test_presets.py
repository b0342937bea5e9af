"""The fidelity switches (docs/fidelity.md) and the presets that set them: each field changes what it should, presets
set every field, mirage's defaults stay inseq's, and the learned rule's new name with its warning alias."""

from __future__ import annotations

import argparse
import json
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from mirage import Mirage, MirageConfig
from mirage.attribution.aggregation import cite_token, rank_documents
from mirage.attribution.cci import compute_cci
from mirage.attribution.cti import select_tokens
from mirage.attribution.forward import answer_logits, model_inputs
from mirage.attribution.tokenization import tokenize_answer
from mirage.config import PRESETS, AggregationConfig, CCIConfig, ConfigError, CTIConfig, preset_option
from mirage.runs.experiment import ExperimentConfig, add_experiment_args, pipeline_changes

ROOT = Path(__file__).resolve().parents[2]
#: Every pipeline field where the authors' scripts, inseq and mirage can differ (docs/fidelity.md).
FIDELITY_FIELDS = {("cti", "metric"), ("cti", "std_k"), ("cti", "std_kind"), ("cti", "threshold_floor"),
                   ("cci", "method"), ("cci", "target"),
                   ("cci", "top_k"), ("cci", "top_percent"), ("cci", "percent_rule"), ("aggregation", "context"),
                   ("aggregation", "ranking"), ("aggregation", "max_citations"), ("aggregation", "rule")}


# -- CTI: the std of mean + k·std -------------------------------------------------------------------------------------


def test_population_std_selects_the_larger_token_of_a_two_token_answer():
    scores = [0.2, 0.8]
    # with n = 2 the larger score is exactly mean + population std: the authors' `score >= np.mean + np.std` keeps it
    assert np.mean(scores) + np.std(scores) == pytest.approx(0.8)
    assert select_tokens(scores, CTIConfig(std_kind="population"))[0] == (1,)
    assert select_tokens(scores, CTIConfig())[0] == ()  # the sample std (inseq): mean + 0.42 > 0.8
    many = [0.1, 0.5, 0.2, 0.9, 0.3, 0.05]
    ours, threshold = select_tokens(many, CTIConfig(std_kind="population"))
    assert threshold == pytest.approx(float(np.mean(many) + np.std(many)))
    assert ours == tuple(i for i, s in enumerate(many) if s >= np.mean(many) + np.std(many))
    with pytest.raises(ConfigError, match=r"cti\.std_kind='n' is not valid"):
        CTIConfig(std_kind="n")


def test_threshold_floor_keeps_a_calibrated_threshold_above_the_answers_mean():
    """The authors' MIRAGE-CAL reads CCI from an inseq run at mean + 0·std: a token above the calibrated threshold
    but below its answer's mean is never attributed."""
    scores = [0.1, 0.2, 0.9]  # mean 0.4
    assert select_tokens(scores, CTIConfig(threshold=0.15))[0] == (1, 2)
    assert select_tokens(scores, CTIConfig(threshold=0.15, threshold_floor="mean")) == ((2,), pytest.approx(0.4))
    assert select_tokens(scores, CTIConfig(threshold=0.5, threshold_floor="mean"))[0] == (2,)


def test_calibration_never_selects_below_the_mean_under_the_floor():
    """The exact calibration search and the calibrated setting agree on what the floor leaves out."""
    from mirage.scoring.xor_eval import TokenView, XorItemView, calibrate_threshold, predict, selected_tokens

    def view(ctis, kept, labels, floor):
        item_tokens = tuple(TokenView(cti=c, kept={"s": frozenset(k)}, share=(0.0,) * len(labels))
                            for c, k in zip(ctis, kept))
        return XorItemView(item=_item(labels), tokens=item_tokens, floor=floor)

    # the low token (0.2, below its answer's mean 0.5) is the only one citing the supporting passage
    ctis, kept, labels = [0.2, 0.4, 0.9], [{0}, set(), {1}], (True, False)
    free, _ = calibrate_threshold([view(ctis, kept, labels, 0.0)], "s")
    floored, _ = calibrate_threshold([view(ctis, kept, labels, 0.5)], "s")
    assert free <= 0.2 < floored  # without the floor the search reaches down to the low token
    v = view(ctis, kept, labels, 0.5)
    sel = selected_tokens(v, CTIConfig(threshold=free, threshold_floor="mean"))
    assert predict(v, sel, "s") == [False, True]


def _item(labels):
    from mirage.scoring.xor_data import XorItem

    return XorItem(file="t", line=1, lang="en", question="q?", passages=tuple("p" for _ in labels), answer="a",
                   labels=labels, idxs=tuple(range(len(labels))))


# -- CCI: the attributed quantity -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_case(tiny_causal):
    m = Mirage(tiny_causal)
    item = {"question": "Why is the sky blue?",
            "docs": [{"title": "Light", "text": "Air scatters blue light more than red light."},
                     {"title": "Sea", "text": "The sea reflects the sky."}]}
    prep = m.prepare(item)
    ans = tokenize_answer(tiny_causal.tokenizer, "Blue light scatters more.")
    ids, positions = model_inputs(tiny_causal, prep.tokens.ids, ans.ids)
    return tiny_causal, prep, ans, ids, positions


def _cci(case, selected, contrast, target):
    lm, prep, ans, ids, positions = case
    return compute_cci(lm, ids, ans.ids, positions, selected, contrast, prep.tokens.context_positions,
                       cfg=CCIConfig(target=target))


def test_prob_target_is_the_probability_difference(tiny_case):
    """Analytic: with no contrast token (the contextless top token is the answer's), grad p(y) = p(y) grad log p(y),
    so each saliency under ``prob`` is p(y) times the one under ``logprob``."""
    lm, _prep, ans, _ids, _positions = tiny_case
    selected = [0, 2]
    same = list(ans.ids)  # contrast None at every step
    probs = torch.softmax(answer_logits(lm, _prep.tokens.ids, ans.ids), -1)
    logp = _cci(tiny_case, selected, same, "logprob")
    p = _cci(tiny_case, selected, same, "prob")
    for k, i in enumerate(selected):
        expected = [float(probs[i, ans.ids[i]]) * v for v in logp.scores[k]]
        assert p.scores[k] == pytest.approx(expected, rel=1e-4, abs=1e-9)
        assert max(p.scores[k]) < max(logp.scores[k])  # a probability's gradient is the smaller here


def test_prob_target_with_a_contrast_token_matches_finite_differences(tiny_case):
    """With a contrast token y_nc the target is p(y | ctx) - p(y_nc | ctx): an independent autograd gradient of
    that difference, checked by central finite differences, has the L2 norms compute_cci reports."""
    lm, prep, ans, ids, positions = tiny_case
    i = 1
    contrast = list(ans.ids)
    contrast[i] = (ans.ids[i] + 7) % len(lm.tokenizer)
    got = _cci(tiny_case, [i], contrast, "prob").scores[0]
    table = lm.model.get_input_embeddings()
    base = table(torch.tensor([ids])).detach().double()
    model = lm.model.double()
    try:
        def f(embeds):
            logits = model(inputs_embeds=embeds).logits[0, positions[i]]
            probs = torch.softmax(logits, -1)
            return probs[ans.ids[i]] - probs[contrast[i]]

        leaf = base.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(f(leaf), leaf)
        direction = torch.randn(base.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        h = 1e-5
        with torch.no_grad():
            numeric = (f(base + h * direction) - f(base - h * direction)) / (2 * h)
        assert float(numeric) == pytest.approx(float((grad * direction).sum()), rel=1e-4)
    finally:
        model.float()
    expected = grad[0].norm(dim=-1)[list(prep.tokens.context_positions)].tolist()
    assert got == pytest.approx(expected, rel=1e-3, abs=1e-9)


# -- aggregation: passage markers and document ranking ----------------------------------------------------------------


def test_content_view_gives_marker_tokens_no_score(tiny_causal):
    """``aggregation.context: content`` leaves the prompt's scaffolding out before the top-% rule: a passage whose only
    salient token is its marker (``Document [2]:``) is cited under ``all`` and not under ``content``."""
    from mirage.scoring.xor_attriqa import score_item
    from mirage.scoring.xor_data import XorItem
    from mirage.scoring.xor_eval import build_views, predict

    item = XorItem(file="t", line=1, lang="en", question="Who wrote it?", passages=("Anna wrote it.", "Bob read it."),
                   answer="Anna", labels=(True, False), idxs=(0, 1))
    m = Mirage(tiny_causal, config=MirageConfig().replace(prompt={"name": "standard"}))
    sc = score_item(m, item, targets="all")
    docs, content = sc.docs_per_context_token(), sc.content_per_context_token()
    marker = next(j for j, (d, c) in enumerate(zip(docs, content)) if d == 1 and not c)
    for t in sc.cci:  # all saliency on passage 2's marker token, a little on passage 1's text
        sc.cci[t] = [5.0 if j == marker else (0.1 if content[j] and docs[j] == 0 else 0.0) for j in range(len(docs))]
    sel = {"top5pct": CCIConfig()}
    every = build_views([item], {item.key: sc}, sel, context="all")[0]
    text_only = build_views([item], {item.key: sc}, sel, context="content")[0]
    tokens = tuple(sc.cci)
    assert predict(every, tokens, "top5pct") == [False, True]
    assert predict(text_only, tokens, "top5pct") == [True, False]


def test_saliency_ranking_orders_documents_by_summed_raw_saliency():
    """Shares and raw saliency disagree here: a strong token on document 1, two weak ones on document 2."""
    docs = [0, 0, 1, 1]
    everything = CCIConfig(top_percent=100.0)
    strong = cite_token([10.0, 0.5, 0.0, 0.0], docs, everything)
    weak = cite_token([0.0, 0.0, 1.0, 0.0], docs, everything)
    mixed = cite_token([0.5, 0.0, 1.0, 0.0], docs, everything)
    cits = [strong, weak, mixed]
    assert rank_documents(cits, 3) == [2, 1]  # shares: doc 2 has 1 + 2/3, doc 1 has 1 + 1/3
    assert rank_documents(cits, 3, "saliency") == [1, 2]  # raw: doc 1 has 11, doc 2 has 2
    assert rank_documents(cits, 1, "saliency") == [1]


# -- presets ----------------------------------------------------------------------------------------------------------


def _set_by(preset: str, benchmark: str | None) -> set[tuple[str, str]]:
    variants = PRESETS[preset]
    return {(s, f) for s, fields in variants.get(benchmark, variants[None]).items() for f in fields}


@pytest.mark.parametrize("task", [None, "xor-attriqa", "eli5"])
@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_set_every_fidelity_field(preset, task):
    assert _set_by(preset, task) >= FIDELITY_FIELDS
    cfg = MirageConfig.from_preset(preset, benchmark=task)
    assert cfg.preset == preset and cfg.to_dict()["preset"] == preset


def test_the_authors_preset_per_benchmark():
    xor = MirageConfig.from_preset("authors", benchmark="xor-attriqa")
    eli5 = MirageConfig.from_preset("authors", benchmark="eli5")
    assert (xor.cti.std_kind, xor.cci.target, xor.aggregation.context) == ("population", "prob", "content")
    assert (eli5.cti.std_kind, eli5.cci.target, eli5.aggregation.context) == ("population", "logprob", "all")
    assert eli5.aggregation.ranking == "saliency" and eli5.cci.percent_rule == "range"
    assert MirageConfig.from_preset("authors") == eli5  # general use: the ELI5 script
    assert preset_option("authors", "xor-attriqa", "calibrate_by", "global") == "language"
    assert preset_option(None, "xor-attriqa", "calibrate_by", "global") == "global"
    with pytest.raises(ConfigError, match="preset='paper' is not valid"):
        MirageConfig.from_preset("paper")


def test_defaults_are_unchanged_and_the_inseq_preset():
    default, inseq = MirageConfig(), MirageConfig.from_preset("inseq")
    assert asdict(default.cti) == asdict(inseq.cti) and asdict(default.cci) == asdict(inseq.cci)
    assert asdict(default.aggregation) == asdict(inseq.aggregation)
    assert (default.cti.std_kind, default.cci.target, default.aggregation.ranking) == ("sample", "logprob", "shares")
    assert "preset" not in default.to_dict()
    assert "std_kind" not in default.to_dict()["cti"] and "target" not in default.to_dict()["cci"]


def test_xor_attriqa_attributes_the_probability_by_default(tmp_path):
    """``mirage score xor-attriqa``'s own default is the paper's Eq. 2 (p(y) - p(y_nc)); every other use keeps
    log p(y) - log p(y_nc); a file, a flag or a preset still sets it; a run recorded under the old default gets the
    flag that reproduces it."""
    from mirage.config import flags_for_changed_defaults

    assert ExperimentConfig.from_dict({}, command="xor-attriqa").pipeline.cci.target == "prob"
    assert ExperimentConfig.from_dict({}, command="eli5").pipeline.cci.target == "logprob"
    assert ExperimentConfig.from_dict({}, command="bias").pipeline.cci.target == "logprob"
    assert MirageConfig.from_dict({"cci": {"top_k": 3}}, benchmark="xor-attriqa").cci.target == "prob"
    assert MirageConfig.from_dict({"cci": {"target": "logprob"}}, benchmark="xor-attriqa").cci.target == "logprob"
    assert MirageConfig.from_dict({"preset": "inseq"}, benchmark="xor-attriqa").cci.target == "logprob"
    with pytest.raises(ConfigError, match="cci"):
        MirageConfig.from_dict({"cci": 3}, benchmark="xor-attriqa")
    parser = argparse.ArgumentParser()
    add_experiment_args(parser)
    args = parser.parse_args(["--cci-target", "logprob"])
    assert ExperimentConfig.from_args(args, command="xor-attriqa").pipeline.cci.target == "logprob"
    # the stores of the two targets are kept apart, so a re-run never mixes them
    prob = ExperimentConfig.from_dict({}, command="xor-attriqa").fingerprint()
    logprob = ExperimentConfig.from_args(args, command="xor-attriqa").fingerprint()
    assert prob["cci_target"] == "prob" and "cci_target" not in logprob
    old = "mirage score xor-attriqa xor-attriqa-match:val -o DIR"
    assert flags_for_changed_defaults("xor-attriqa", {"cci": {}}, old) == ["--cci-target", "logprob"]
    assert flags_for_changed_defaults("xor-attriqa", {"cci": {"target": "logprob"}}) == ["--cci-target", "logprob"]
    assert flags_for_changed_defaults("xor-attriqa", {"cci": {"target": "prob"}}, old) == []
    assert flags_for_changed_defaults("xor-attriqa", {"cci": {}}, old + " --cci-target logprob") == []
    assert flags_for_changed_defaults("xor-attriqa", {"cci": {}}, old + " --preset inseq") == []
    assert flags_for_changed_defaults("eli5", {"cci": {}}, old) == []


def test_preset_in_yaml_and_on_the_command_line(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("preset: authors\ncci:\n  target: logprob\n")
    exp = ExperimentConfig.from_yaml(path, command="xor-attriqa")
    cfg = exp.pipeline
    assert cfg.preset == "authors" and cfg.cci.target == "logprob"  # the file's own field overrides the preset
    assert (cfg.cti.std_kind, cfg.aggregation.context) == ("population", "content")
    assert cfg.prompt.name == "standard"  # the command's own prompt: presets leave prompts alone
    parser = argparse.ArgumentParser()
    add_experiment_args(parser)
    plain = tmp_path / "plain.yaml"
    plain.write_text("cti:\n  std_k: 2.0\n")
    args = parser.parse_args(["--preset", "authors", "--config", str(plain), "--doc-ranking", "shares"])
    cli = ExperimentConfig.from_args(args, command="eli5").pipeline
    assert (cli.preset, cli.cti.std_kind, cli.cti.std_k, cli.aggregation.ranking) == ("authors", "population", 2.0,
                                                                                     "shares")
    # what stored outputs depend on is the fields, not the preset's name
    same = MirageConfig.from_preset("inseq")
    fp = ExperimentConfig("attribute", pipeline=same).fingerprint()
    assert fp == ExperimentConfig("attribute", pipeline=MirageConfig()).fingerprint()
    xor_fp = ExperimentConfig("xor-attriqa", pipeline=MirageConfig.from_preset("authors", benchmark="xor-attriqa"))
    assert xor_fp.fingerprint()["cci_target"] == "prob"  # the stored CCI rows depend on it


@pytest.mark.slow
def test_parity_with_inseq_holds_under_the_inseq_preset_and_the_authors_selector(smollm2, xor_item):
    """The inseq preset selects the tokens inseq's attribute_context selects, with its threshold; the authors
    preset selects what their script's ``score >= np.mean + np.std`` selects on inseq's own CTI scores."""
    from mirage.peers.inseq import run_reference

    item = {"question": xor_item["question"], "output": xor_item["output"],
            "docs": [{"title": d["title"], "text": " ".join(d["text"].split()[:40])} for d in xor_item["docs"][:2]]}
    m = Mirage(smollm2, config=MirageConfig.from_preset("inseq"))
    res = m.attribute_item(item)
    ref = run_reference(smollm2.model, smollm2.tokenizer, prompt=res.prompt, contextless_prompt=res.contextless_prompt,
                        context=res.context, answer=res.answer, std_k=1.0)
    assert [t.index for t in res.tokens if t.context_sensitive] == ref.selected
    assert res.cti_threshold == pytest.approx(float(ref.cti_threshold), rel=1e-4, abs=1e-6)
    authors = MirageConfig.from_preset("authors")
    scores = np.array(ref.cti_scores)
    theirs = [i for i, s in enumerate(scores) if s >= np.mean(scores) + np.std(scores)]
    ours = select_tokens([t.cti for t in res.tokens], authors.cti)[0]
    assert list(ours) == theirs


# -- the passage-likelihood classifier's name -------------------------------------------------------------------------


def test_the_learned_rule_is_now_likelihood_and_the_old_name_warns(capsys):
    with pytest.warns(DeprecationWarning, match="now called 'likelihood'"):
        cfg = AggregationConfig(rule="learned")
    assert cfg.rule == "likelihood"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert AggregationConfig(rule="likelihood").rule == "likelihood"
    parser = argparse.ArgumentParser()
    add_experiment_args(parser)
    with pytest.warns(DeprecationWarning):
        changes = pipeline_changes(parser.parse_args(["--citation-rule", "learned"]))
    assert changes["aggregation"]["rule"] == "likelihood"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--citation-rule learned is now --citation-rule likelihood" in err
    # stores written under the old name still resume: the fingerprint keeps it
    fp = ExperimentConfig("attribute", pipeline=MirageConfig().replace(aggregation={"rule": "likelihood"}))
    assert fp.fingerprint()["config"]["aggregation"]["rule"] == "learned"


def test_setting_group_alias_and_stored_results_with_the_old_names_still_read():
    from mirage.runs.benchmark_options import setting_groups
    from mirage.scoring.tables import xor_table
    from mirage.scoring.xor_report import XorAttriQAReport

    with pytest.warns(DeprecationWarning, match="now called 'likelihood'"):
        assert setting_groups(["ex", "learned"]) == ("ex", "likelihood")
    with pytest.raises(ValueError, match="unknown setting groups"):
        setting_groups(["nope"])
    stored = json.loads((ROOT / "benchmarks/results/xor_attriqa_smollm2_en/results.json").read_text())
    assert "learned" in stored["f1"]  # written before the rename
    table = xor_table(XorAttriQAReport.from_dict(stored))
    assert "passage-likelihood classifier" in table and "MIRAGE learned" not in table
