"""``mirage.scoring.xor_attriqa.method_rows`` (what benchmarks/cci_methods.py compares) on the real embedded model:
each CCI method's rows of the MIRAGE-EX tokens, stored per method, resumable; saliency's are the scorer's own rows."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parents[1] / "data" / "xor_attriqa_match"


def test_each_method_scores_the_ex_tokens_and_a_rerun_computes_nothing(embedded_mirage, tmp_path, monkeypatch):
    import dataclasses

    from mirage import Mirage
    from mirage.attribution.cti import select_tokens
    from mirage.config import CTIConfig
    from mirage.scoring.xor_attriqa import method_rows, score_item, xor_attriqa_pipeline
    from mirage.scoring.xor_classifier import passage_features
    from mirage.scoring.xor_data import load_xor_attriqa

    items = [it for it in load_xor_attriqa(DATA / "val.jsonl", text="en").items if len(it.passages) > 1][:2]
    assert len(items) == 2
    store = tmp_path / "rows.jsonl"
    cfg = xor_attriqa_pipeline()  # what `mirage score xor-attriqa` runs; the embedded Mirage's own prompt differs
    assert embedded_mirage.config.prompt != cfg.prompt
    got = {m: method_rows(items, store, model="smollm2-135m-instruct", text="en", config=cfg, method=m, ig_steps=2,
                          mirage=embedded_mirage)
           for m in ("saliency", "input_x_gradient", "integrated_gradients")}
    for item in items:
        own = score_item(embedded_mirage, item, config=cfg, targets="selected")  # what the scorer stores
        ex = set(select_tokens(own.cti, CTIConfig(selector="std"))[0])
        assert ex and set(own.cci) == ex
        for method, rows in got.items():
            assert set(rows[item.key]["rows"]) == ex, method
            assert rows[item.key]["n_rows"] == len(ex) and rows[item.key]["seconds"] > 0
            assert all(len(r) == len(own.cci[t]) for t, r in rows[item.key]["rows"].items())
        for t in ex:  # saliency: the scorer's rows (rounded as stored); the other methods differ from them
            assert got["saliency"][item.key]["rows"][t] == pytest.approx(own.cci[t], rel=1e-4, abs=1e-7)
            for method in ("input_x_gradient", "integrated_gradients"):
                assert got[method][item.key]["rows"][t] != pytest.approx(own.cci[t], rel=1e-2)
        feats = passage_features(dataclasses.replace(own, cci=dict(got["input_x_gradient"][item.key]["rows"])))
        assert len(feats) == len(item.passages) and all("ex_mass" in f for f in feats)
        assert sum(f["ex_mass"] for f in feats) == pytest.approx(1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rows.input_x_gradient.jsonl", "rows.integrated_gradients.jsonl", "rows.saliency.jsonl"]

    def no_model(*_a, **_k):
        raise AssertionError("a re-run must not load the model")

    monkeypatch.setattr(Mirage, "from_pretrained", no_model)
    again = method_rows(items, store, model="smollm2-135m-instruct", text="en", config=cfg,
                        method="integrated_gradients", ig_steps=2)
    assert again == got["integrated_gradients"]


def test_a_document_method_as_the_cci_step_scores_the_same_ex_tokens(embedded_mirage, tmp_path):
    """``benchmarks/cci_methods.py --methods attention_last`` (a document method as the CCI step): rows of exactly the
    MIRAGE-EX tokens, one per context token, and not saliency's."""
    from mirage.scoring.xor_attriqa import method_rows, xor_attriqa_pipeline
    from mirage.scoring.xor_data import load_xor_attriqa

    items = [it for it in load_xor_attriqa(DATA / "val.jsonl", text="en").items if len(it.passages) > 1][:1]
    cfg = xor_attriqa_pipeline()
    store = tmp_path / "rows.jsonl"
    got = {m: method_rows(items, store, model="smollm2-135m-instruct", text="en", config=cfg, method=m, ig_steps=2,
                          mirage=embedded_mirage)[items[0].key]
           for m in ("saliency", "attention_last")}
    assert set(got["attention_last"]["rows"]) == set(got["saliency"]["rows"]) and got["saliency"]["rows"]
    for t, row in got["attention_last"]["rows"].items():
        assert len(row) == len(got["saliency"]["rows"][t]) and row != got["saliency"]["rows"][t]
        assert all(v >= 0 for v in row) and sum(row) <= 1 + 1e-6  # attention weights: a share of one row's mass
