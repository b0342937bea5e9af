"""``cci.precision``: CCI's passes under bfloat16/float16 autocast, CTI and the selected tokens left exact; and the
field's place in configs, record keys and run fingerprints (left out at its default, so existing runs resume)."""

import json
import math
import warnings

import numpy
import pytest
import torch

from mirage import Mirage, MirageConfig
from mirage.attribution.cci import autocast_dtype, compute_cci, shares_cti_graph
from mirage.attribution.forward import model_inputs
from mirage.attribution.graphs import attribution_graph
from mirage.cli import build_parser
from mirage.config import CCIConfig, ConfigError
from mirage.runs.experiment import ExperimentConfig
from mirage.scoring.benchmarks import stored_xor_pipeline
from mirage.scoring.xor_attriqa import xor_attriqa_pipeline


def _short(doc: dict, words: int = 60) -> dict:
    return {"title": doc["title"], "text": " ".join(doc["text"].split()[:words])}


def test_precision_is_left_out_of_config_dicts_at_its_default_and_round_trips():
    default = MirageConfig()
    assert "precision" not in default.to_dict()["cci"]  # record keys of runs written before the field stay valid
    assert set(default.to_dict()) == {"prompt", "generation", "cti", "cci", "aggregation"}
    bf16 = default.replace(cci={"precision": "bfloat16"})
    assert bf16.to_dict()["cci"]["precision"] == "bfloat16"
    assert MirageConfig.from_dict(bf16.to_dict()) == bf16
    assert MirageConfig.from_dict(default.to_dict()) == default
    with pytest.raises(ConfigError, match=r"cci\.precision='fp8' is not valid; choose one of 'model', 'bfloat16'"):
        CCIConfig(precision="fp8")
    args = build_parser().parse_args(["attribute", "in.json", "-o", "o.jsonl", "--cci-precision", "float16"])
    assert ExperimentConfig.from_args(args, command="attribute").pipeline.cci.precision == "float16"


def test_fingerprints_name_the_precision_only_when_set(tmp_path):
    """A store of the model's precision keeps its fingerprint; an autocast one is another run (refused on resume)
    and its pipeline is read back from its run.json."""
    base = xor_attriqa_pipeline()
    bf16 = base.replace(cci={"precision": "bfloat16"})
    for command in ("xor-attriqa", "eli5", "attribute", "bias"):
        plain = ExperimentConfig(command, pipeline=base).fingerprint()
        assert "precision" not in json.dumps(plain)
        assert ExperimentConfig(command, pipeline=bf16).fingerprint() != plain
    run = tmp_path / "run.json"
    run.write_text(json.dumps(ExperimentConfig("xor-attriqa", model="smollm2-135m-instruct",
                                               pipeline=bf16).fingerprint()))
    assert stored_xor_pipeline(tmp_path / "scores.jsonl", "smollm2-135m-instruct").cci.precision == "bfloat16"


def test_bfloat16_cci_keeps_cti_and_the_selected_tokens_and_approximates_saliency(embedded_mirage, example_items):
    """Real model and item: the with-documents pass of CTI stays float32 (no shared graph), so the scores and the
    selection equal the default's; the saliency rows differ (autocast ran) but rank the context alike."""
    lm = embedded_mirage.lm
    xor = {it["id"]: it for it in example_items}["xor-val-1"]
    item = {"question": xor["question"], "docs": [_short(d) for d in xor["docs"]], "output": xor["output"]}
    keep = {"aggregation": {"keep_saliency": True}}
    exact = embedded_mirage.attribute_item(item, config=MirageConfig().replace(**keep))
    cfg = MirageConfig().replace(cci={"precision": "bfloat16"}, **keep)
    assert autocast_dtype(lm, cfg.cci) == torch.bfloat16 and not shares_cti_graph(lm, cfg.cci)
    fast = embedded_mirage.attribute_item(item, config=cfg)
    assert [t.context_sensitive for t in fast.tokens] == [t.context_sensitive for t in exact.tokens]
    assert any(t.context_sensitive for t in exact.tokens)
    assert torch.allclose(torch.tensor([t.cti for t in fast.tokens]), torch.tensor([t.cti for t in exact.tokens]),
                          atol=1e-4)
    a, b = exact.saliency.to_numpy(), fast.saliency.to_numpy()
    assert a.shape == b.shape and (a != b).any()
    for row_a, row_b in zip(a, b):
        assert numpy.corrcoef(row_a.argsort().argsort(), row_b.argsort().argsort())[0, 1] > 0.9
    assert all(p.grad is None for p in lm.model.parameters())


@pytest.mark.parametrize("fixture,method", [("tiny_causal", "integrated_gradients"), ("tiny_seq2seq", "saliency")])
def test_autocast_runs_every_cci_path(fixture, method, request):
    """The repeated-rows path (IG) and encoder-decoders run under autocast too, with finite non-negative scores."""
    lm = request.getfixturevalue(fixture)
    m = Mirage(lm)
    prep = m.prepare({"question": "When was the Ikhwan formed?",
                      "docs": [{"title": "Ikhwan", "text": "The Ikhwan was formed in 1913 by Ibn Saud."}]})
    from mirage.attribution.tokenization import tokenize_answer

    ans = tokenize_answer(lm.tokenizer, "It was formed in 1913.")
    input_ids, positions = model_inputs(lm, prep.tokens.ids, ans.ids)
    cfg = CCIConfig(method=method, ig_steps=2, precision="bfloat16")
    out = compute_cci(lm, input_ids, ans.ids, positions, [1, 3], [0] * len(ans.ids), prep.tokens.context_positions,
                      cfg=cfg)
    assert len(out.scores) == 2 and all(len(r) == len(prep.tokens.context_positions) for r in out.scores)
    assert all(math.isfinite(v) and v >= 0 for r in out.scores for v in r)
    with pytest.raises(ValueError, match="build no graph"):
        compute_cci(lm, input_ids, ans.ids, positions, [1], [0] * len(ans.ids), prep.tokens.context_positions,
                    cfg=cfg, graph=attribution_graph(lm, input_ids, ans.ids, positions))


def test_emulated_16_bit_arithmetic_warns(tiny_causal, monkeypatch):
    """A CPU without AMX/AVX512 bf16 runs autocast emulated, slower than float32: the user is told. Faked: this
    machine's CPU may have the flags, so the CPU's flags cci reads are replaced by a set without them."""
    from mirage.attribution import cci

    monkeypatch.setattr(cci, "cpu_flags", lambda: {"avx2", "avx512f"})
    m = Mirage(tiny_causal)
    prep = m.prepare({"question": "Q?", "docs": [{"title": "T", "text": "Some text here."}]})
    from mirage.attribution.tokenization import tokenize_answer

    ans = tokenize_answer(tiny_causal.tokenizer, "An answer.")
    input_ids, positions = model_inputs(tiny_causal, prep.tokens.ids, ans.ids)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compute_cci(tiny_causal, input_ids, ans.ids, positions, [0], [0] * len(ans.ids),
                    prep.tokens.context_positions, cfg=CCIConfig(precision="bfloat16"))
    assert any("no native bfloat16" in str(w.message) for w in caught)
