"""The bias study's significance tests and the mixed grid, against hand-computed values: CAS's p-value tests the mean
absolute change (its signed test kept as ``shift_p_value``), bootstrap intervals, mode-vs-mode paired tests,
attribution confidence relevant vs non-relevant (Welch), and the 2 x 2 grid of (relevant, non-relevant) label sides
with its contrasts. Records are built by hand (the metrics are pure functions of them); no model runs here."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from mirage.bias.cli import register
from mirage.bias.metrics import (
    abs_change_p_value,
    bootstrap_ci,
    cas_effect,
    mode_tests,
    no_test_reason,
    paired_p_value,
    summarize_mode,
    welch_p_value,
)
from mirage.bias.protocol import GRID_MODES, BiasConfig, doc_labels, grid_modes, load_metadata, mode_sides
from mirage.bias.records import BiasRecord
from mirage.bias.results import BiasStudyResult, summarize
from mirage.bias.tables import render_markdown
from mirage.config import ConfigError


def rec(item: str, mode: str, cited: list[int], *, relevant=(1,), n_docs=4, probs=()) -> BiasRecord:
    return BiasRecord(key=f"{item}:{mode}", item_id=item, mode=mode, labels=[None] * n_docs, relevant=list(relevant),
                      n_docs=n_docs, answers=["x"], raw_answer="x", answer="x", self_citations=[cited],
                      mirage_citations=[cited], self_citation_probs=[list(p) for p in probs])


def _t_sf_df3(t: float) -> float:
    """Student's t survival function with 3 degrees of freedom, in closed form."""
    x = t / math.sqrt(3)
    return 0.5 - (x / (1 + x * x) + math.atan(x)) / math.pi


def test_cas_p_value_tests_the_mean_absolute_change():
    # precision per query, mode vs vanilla: changes +.5, 0, -1, 0 -> |d| = .5, 0, 1, 0: CAS .375
    mode, vanilla = [1, 0.5, 0, 1], [0.5, 0.5, 1, 1]
    d = np.array([0.5, 0, 1, 0])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(4))
    assert abs_change_p_value(mode, vanilla) == pytest.approx(_t_sf_df3(t), rel=1e-9)
    # the signed test sees +.5 and -1 cancel: a different, larger p-value
    assert paired_p_value(mode, vanilla) > abs_change_p_value(mode, vanilla)
    assert abs_change_p_value([1, 0, 1], [1, 0, 1]) is None  # nothing changed
    # every query changed by the same amount: zero variance, no p-value (it used to be 0.0, an infinite t), and why
    assert abs_change_p_value([1, 0], [0, 1]) is None
    assert no_test_reason([1, 0], [0, 1], absolute=True) == ("zero variance over 2 query pairs (every query pair "
                                                             "differs by the same amount)")
    assert abs_change_p_value([1], [0]) is None
    assert no_test_reason([1], [0]) == "1 query pair(s); a t-test needs at least 2"
    assert no_test_reason(mode, vanilla, absolute=True) is None


def test_cas_effect_carries_both_tests_and_an_interval():
    # vanilla cites [1] everywhere (P = 1); the mode cites [1, 2] on two queries of four (P = .5)
    vanilla = [rec(f"q{i}", "vanilla", [1]) for i in range(4)]
    mode = [rec(f"q{i}", "informed", [1, 2] if i < 2 else [1]) for i in range(4)]
    e = cas_effect(mode, vanilla, "self")
    a, b = [0.5, 0.5, 1, 1], [1, 1, 1, 1]
    assert e.precision.value == pytest.approx(0.25)
    assert e.precision.p_value == pytest.approx(abs_change_p_value(a, b))
    assert e.precision.shift_p_value == pytest.approx(paired_p_value(a, b))
    lo, hi = e.precision.ci
    assert 0 <= lo <= 0.25 <= hi <= 0.5
    assert e.recall.value == 0 and e.recall.p_value is None and e.recall.ci == [0.0, 0.0]


def test_bootstrap_interval_shrinks_with_more_queries():
    rng = np.random.default_rng(1)
    small, large = rng.normal(1, 1, 20), rng.normal(1, 1, 2000)
    lo_s, hi_s = bootstrap_ci(small)
    lo_l, hi_l = bootstrap_ci(large)
    assert lo_s < small.mean() < hi_s and lo_l < large.mean() < hi_l
    assert hi_l - lo_l < (hi_s - lo_s) / 5
    # the standard error of the mean, read off the interval, is about sd / sqrt(n)
    assert (hi_l - lo_l) / (2 * 1.96) == pytest.approx(large.std(ddof=1) / math.sqrt(2000), rel=0.15)
    assert bootstrap_ci([1.0]) is None


def test_mode_against_mode_tests_every_pair():
    cited = {"vanilla": [[1, 2], [1, 2], [1], [1]], "informed": [[1], [1, 2], [2], [1]],
             "counterfactual": [[2], [1, 2], [], [1, 3]]}
    aligned = {m: [rec(f"q{i}", m, c) for i, c in enumerate(cs)] for m, cs in cited.items()}
    out = mode_tests(aligned, "self")
    assert list(out) == ["vanilla vs informed", "vanilla vs counterfactual", "informed vs counterfactual"]
    # precision per query: vanilla .5 .5 1 1, counterfactual 0 .5 0 .5
    assert out["vanilla vs counterfactual"]["precision"] == pytest.approx(
        paired_p_value([0.5, 0.5, 1, 1], [0, 0.5, 0, 0.5]))
    assert out["informed vs counterfactual"]["recall"] == pytest.approx(paired_p_value([1, 1, 0, 1], [0, 1, 0, 1]))


def test_attribution_confidence_relevant_vs_nonrelevant_welch():
    recs = [rec("a", "informed", [1, 2], probs=[(1, 0.9), (2, 0.3), (1, 0.8)]),
            rec("b", "informed", [1, 3], probs=[(1, 0.7), (3, 0.4), (3, 0.2)])]
    rel, non = [0.9, 0.8, 0.7], [0.3, 0.4, 0.2]
    # Welch by hand: t = (m1 - m2) / sqrt(v1/n1 + v2/n2), Welch-Satterthwaite degrees of freedom
    v1, v2 = np.var(rel, ddof=1) / 3, np.var(non, ddof=1) / 3
    t = (np.mean(rel) - np.mean(non)) / math.sqrt(v1 + v2)
    df = (v1 + v2) ** 2 / (v1 ** 2 / 2 + v2 ** 2 / 2)
    expected = 2 * stats.t.sf(t, df)
    assert summarize_mode(recs, "self").ac_p_value == pytest.approx(expected, rel=1e-9)
    assert welch_p_value([0.5], [0.1, 0.2]) is None
    assert welch_p_value([0.5, 0.5], [0.1, 0.1]) is None


# -- the mixed grid ---------------------------------------------------------------------------------------------------

def test_grid_cells_and_their_labels():
    cfg = BiasConfig(modes=("vanilla",) + GRID_MODES)
    md = load_metadata(cfg)
    rel = (False, True, False)
    assert doc_labels("x", rel, "mixed:second-first", cfg, md) == ["Human", "LLM", "Human"]
    assert doc_labels("x", rel, "mixed:second-second", cfg, md) == ["LLM", "LLM", "LLM"]
    assert mode_sides("vanilla", cfg) is None and mode_sides("counterfactual", cfg) == ("second", "first")
    assert grid_modes(cfg) == {("first", "second"): "informed", ("second", "first"): "counterfactual",
                               ("first", "first"): "mixed:first-first", ("second", "second"): "mixed:second-second"}
    second = BiasConfig(modes=GRID_MODES, relevant_side="second")  # informed is now (second, first)
    assert grid_modes(second)[("second", "first")] == "informed"
    with pytest.raises(ConfigError, match="mixed:first-third"):
        BiasConfig(modes=("mixed:first-third",))


def _cli_modes(*argv: str) -> tuple[str, ...]:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    from mirage.bias.cli import bias_config_from_args

    return bias_config_from_args(parser.parse_args(["bias", "data", "-o", "out", *argv])).modes


def test_mixed_grid_option_adds_only_the_missing_cells():
    assert _cli_modes("--modes", "vanilla", "--mixed-grid") == ("vanilla",) + GRID_MODES
    # the default modes' mixed mode (first, first) already covers one cell
    assert _cli_modes("--mixed-grid") == ("vanilla", "informed", "counterfactual", "mixed", "mixed:second-second")
    assert _cli_modes("--modes", "mixed:second-first") == ("mixed:second-first",)


# (relevant, non-relevant) sides -> citations of four queries, relevant document 1 of 4
GRID = {
    "informed": [[1], [1], [1, 2], [1]],                 # first / second:  P 1 1 .5 1     R 1 1 1 1
    "counterfactual": [[2], [1, 2], [2], [1]],           # second / first:  P 0 .5 0 1     R 0 1 0 1
    "mixed:first-first": [[1, 2], [1], [2], [1]],        # first / first:   P .5 1 0 1     R 1 1 0 1
    "mixed:second-second": [[1], [1, 2], [1, 2], [2]],   # second / second: P 1 .5 .5 0    R 1 1 1 0
}


def test_grid_contrasts_hand_computed(tmp_path):
    cfg = BiasConfig(modes=GRID_MODES, baseline_draws=20)
    records = [rec(f"q{i}", m, c) for m, cs in GRID.items() for i, c in enumerate(cs)]
    result = summarize(records, cfg=cfg, metadata=load_metadata(cfg), model="m", data="d", mirage_config={})
    grid = result.self_citation.grid
    assert grid is not None
    assert grid.cells["first/second"] == {"mode": "informed", "precision": 0.875, "recall": 1.0, "n": 4}
    assert grid.cells["second/second"]["precision"] == pytest.approx(0.5)
    e = grid.effects
    # relevant label with non-relevant first: (first, first) - (second, first): P .5 .5 0 0 -> .25
    assert e["relevant label, non-relevant first"].precision.value == pytest.approx(0.25)
    # relevant label with non-relevant second: (first, second) - (second, second): P 0 .5 0 1 -> .375; R 0 0 0 1
    assert e["relevant label, non-relevant second"].precision.value == pytest.approx(0.375)
    assert e["relevant label, non-relevant second"].recall.value == pytest.approx(0.25)
    # non-relevant label with relevant first: (first, second) - (first, first): P .5 0 .5 0 -> .25
    assert e["non-relevant label, relevant first"].precision.value == pytest.approx(0.25)
    # same label: (first, first) - (second, second): P -.5 .5 -.5 1 -> .125; R 0 0 -1 1 -> 0
    same = e["same label (mixed CAB)"]
    assert same.precision.value == pytest.approx(0.125) and same.recall.value == pytest.approx(0.0)
    assert same.precision.p_value == pytest.approx(paired_p_value([0.5, 1, 0, 1], [1, 0.5, 0.5, 0]))
    # CAB = (first, second) - (second, first) = [(f, s) - (f, f)] + [(f, f) - (s, f)]: the sum of two contrasts
    cab = result.self_citation.cab.precision.value
    assert cab == pytest.approx(0.5)
    assert cab == pytest.approx(e["relevant label, non-relevant first"].precision.value
                                + e["non-relevant label, relevant first"].precision.value)
    # round trip and tables
    result.save(tmp_path / "results.json")
    again = BiasStudyResult.load(tmp_path / "results.json")
    assert json.loads(again.to_json()) == json.loads(result.to_json())
    md = render_markdown(again)
    assert "### Mixed grid" in md and "| same label (mixed CAB) | 12.50 |" in md
    assert "| Human / Human | mixed:first-first | 62.5 | 75.0 | 4 |" in md


def test_no_grid_without_all_four_cells_and_old_results_still_load(tmp_path):
    cfg = BiasConfig(modes=("informed", "counterfactual", "mixed:first-first"), baseline_draws=5)
    records = [rec(f"q{i}", m, c) for m, cs in GRID.items() if m in cfg.modes for i, c in enumerate(cs)]
    result = summarize(records, cfg=cfg, metadata=load_metadata(cfg), model="m", data="d", mirage_config={})
    assert result.self_citation.grid is None
    assert "run with --mixed-grid" not in render_markdown(result)  # the section only appears with a grid
    data = json.loads(result.to_json())
    for source in data["sources"].values():  # a results.json written before these fields existed
        del source["mode_tests"], source["grid"]
        for effect in [source["cab"], *source["cas"].values()]:
            for stat in (effect["precision"], effect["recall"]):
                del stat["ci"], stat["shift_p_value"]
        for mode in source["modes"].values():
            del mode["ac_p_value"]
    old = BiasStudyResult.from_dict(data)
    assert old.self_citation.mode_tests == {} and old.self_citation.cab.precision.ci is None
    render_markdown(old)


def test_summarize_run_recomputes_a_stored_run_without_a_model(tmp_path):
    """A slice of the shipped bias study (three queries in three modes, gzipped generations): summarized again from
    its generations alone, with the settings its results.json records."""
    import shutil
    from pathlib import Path

    from mirage.bias.records import read_generations
    from mirage.bias.study import summarize_run

    src = Path(__file__).parents[1] / "data" / "bias_run_small"
    run = tmp_path / "run"
    shutil.copytree(src, run)
    (run / "tables.md").unlink()
    result = summarize_run(run)
    assert result.n_items == 3 and list(result.sources) == ["self", "mirage"]
    assert set(result.self_citation.modes) == {"vanilla", "informed", "counterfactual"}
    assert (run / "tables.md").exists() and (run / "cab.png").exists()
    assert BiasStudyResult.load(run / "results.json") == result
    cfg = BiasConfig.from_dict(result.config)
    again = summarize(read_generations(run), cfg=cfg, metadata=load_metadata(cfg), model=result.model,
                      data=result.data, mirage_config=result.mirage_config)
    assert json.loads(again.to_json())["sources"] == json.loads(result.to_json())["sources"]
    with pytest.raises(Exception, match="no results.json"):
        summarize_run(tmp_path)


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
#: the published protocol runs: the embedded model's, and the tuned model's
PUBLISHED = ("bias_smollm2_protocol", "bias_smollm2_cite_protocol")


@pytest.mark.parametrize("study", sorted(str(p.parent.relative_to(RESULTS)) for name in PUBLISHED
                                         for p in (RESULTS / name).glob("**/generations.jsonl.gz")))
def test_every_published_protocol_study_recomputes_from_its_generations(tmp_path, study):
    """Each study of the published protocol runs (docs/bias.md and its results pages) gives its shipped tables
    again when summarized from its shipped generations alone (no model; the settings from its results.json)."""
    import shutil

    from mirage.bias.study import summarize_run

    run = tmp_path / "run"
    shutil.copytree(RESULTS / study, run)
    shipped = json.loads((run / "results.json").read_text())
    result = summarize_run(run)
    assert json.loads(result.to_json())["sources"] == shipped["sources"]
    assert result.n_items == shipped["n_items"]
