"""``mirage score xor-attriqa --methods``: registered document attribution methods scored beside MIRAGE on the same
answers and prompts, end to end on the embedded smollm2 model and the val slice of tests/data (see
tests/data/README.md): their rows in results.json and pairs.jsonl, their cost, resumption, and the stored scores
equal to the method's own on the same item."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirage import cli
from mirage.attribution.methods import attribute_documents, cite_documents, document_inputs
from mirage.scoring.xor_attriqa import prepare_item, xor_attriqa_pipeline
from mirage.scoring.xor_data import load_xor_attriqa

pytestmark = pytest.mark.slow

XOR_VAL = Path(__file__).parents[1] / "data" / "xor_attriqa_match" / "val.jsonl"
METHODS = ["leave_one_out", "attention_last", "mirage_cci"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def methods_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("xor-methods")
    args = ["score", "xor-attriqa", str(XOR_VAL), "--calibrate-on", str(XOR_VAL), "--limit", "3",
            "--settings", "likelihood", "--methods", *METHODS, "-o", str(out)]
    assert cli.main(args) == 0
    return out, args


def test_each_method_has_its_rows_its_thresholds_and_its_cost(methods_run):
    out, _ = methods_run
    res = json.loads((out / "results.json").read_text())
    items = load_xor_attriqa(XOR_VAL, text="en", limit=3).items
    assert res["settings"]["methods"] == METHODS
    for name in METHODS:
        for rule in ("ex", "cal", "cal_agreement"):
            setting = f"{name}@{rule}"
            for metric in ("agreement", "f1", "balanced_accuracy", "roc_auc"):
                assert set(res[metric][setting]) == {item.lang for item in items} | {"avg"}, (setting, metric)
        entry = res["methods"][name]
        assert entry["cost"]["answers"] == len(items) and entry["cost"]["seconds"] > 0
        assert entry["calibration"]["pairs"] == sum(len(i.labels) for i in items)
        assert 0 <= entry["calibration"]["cal"]["f1"] <= 100
    # leave-one-out: n + 1 forward passes per answer (the full prompt, then each passage left out)
    n_docs = [len(i.passages) for i in items]
    assert res["methods"]["leave_one_out"]["cost"]["forward_passes"] == pytest.approx(
        sum(n + 1 for n in n_docs) / len(n_docs))
    assert res["methods"]["attention_last"]["cost"]["backward_passes"] == 0
    assert res["methods"]["mirage_cci"]["cost"]["backward_passes"] > 0


def test_stored_scores_are_the_methods_own_and_the_rows_follow_from_them(methods_run, embedded_mirage):
    """Each pair's score in pairs.jsonl is the method's document score averaged over the answer's tokens, as the
    method gives it on the item prepared with the scorer's prompt; its per-answer citation is the std rule's."""
    out, _ = methods_run
    item = load_xor_attriqa(XOR_VAL, text="en", limit=3).items[0]
    cfg = xor_attriqa_pipeline()
    text, prep = prepare_item(embedded_mirage, item, config=cfg)
    direct = attribute_documents(document_inputs(embedded_mirage, prep, text, config=cfg), "leave_one_out")
    means = [sum(row[d] for row in direct.doc_scores) / direct.n_answer for d in range(direct.n_docs)]
    cited = set(cite_documents(direct, rule="std", k=1.0).cited)
    pairs = [p for p in _lines(out / "pairs.jsonl") if p["key"] == item.key]
    assert [p["passage"] for p in pairs] == list(range(len(item.passages)))
    for p in pairs:
        got = p["settings"]["leave_one_out@ex"]
        assert got["score"] == pytest.approx(means[p["passage"]], rel=1e-4, abs=1e-6)
        assert got["cited"] == (p["passage"] + 1 in cited)
        assert p["settings"]["leave_one_out@cal"]["score"] == got["score"]


def test_a_rerun_resumes_without_the_model_and_the_table_shows_the_methods(methods_run, monkeypatch, capsys):
    from mirage.pipeline import Mirage

    out, args = methods_run
    stored = (out / "methods.jsonl").read_text()
    before = json.loads((out / "results.json").read_text())

    def refuse(*a, **k):
        raise AssertionError("the model was loaded although every method had scored every item")

    monkeypatch.setattr(Mirage, "from_pretrained", classmethod(refuse))
    capsys.readouterr()
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert (out / "methods.jsonl").read_text() == stored  # one record per (method, item): nothing added
    assert len(_lines(out / "methods.jsonl")) == 3 * len(METHODS)
    after = json.loads((out / "results.json").read_text())
    assert after["agreement"] == before["agreement"] and after["methods"].keys() == before["methods"].keys()
    assert "Document attribution methods" in printed and "leave_one_out, threshold for F1" in printed


def test_reuse_from_starts_the_methods_store_too(methods_run, monkeypatch, tmp_path, capsys):
    """``--reuse-from`` a run that scored the methods starts a new run's ``methods.jsonl`` from that run's as well as
    its ``scores.jsonl``: the same command into another folder computes nothing and gives the same table."""
    from mirage.pipeline import Mirage

    out, args = methods_run

    def refuse(*a, **k):
        raise AssertionError("the model was loaded although the reused run had every score")

    monkeypatch.setattr(Mirage, "from_pretrained", classmethod(refuse))
    again = tmp_path / "again"
    assert cli.main([*args[:-1], str(again), "--reuse-from", str(out)]) == 0
    assert _lines(again / "methods.jsonl") == _lines(out / "methods.jsonl")
    # --settings likelihood has no sweep: the run names the files it wrote, no sweep.png
    assert f"wrote {again / 'results.json'} (0 bad rows" in capsys.readouterr().err
    assert not (again / "sweep.png").exists()
    first, second = (json.loads((d / "results.json").read_text()) for d in (out, again))
    assert second["agreement"] == first["agreement"] and second["roc_auc"] == first["roc_auc"]


def test_a_run_shipped_compressed_resumes_from_its_own_stores_not_from_reuse_from(methods_run, monkeypatch, tmp_path):
    """A run folder shipped with its stores gzipped (scores.jsonl.gz, methods.jsonl.gz), rerun with its own command's
    ``--reuse-from`` naming a run that lacks some of its records: it resumes from its own stores (no model loaded,
    nothing computed), never from the other run's (which would compute its rows again)."""
    import gzip
    import shutil

    from mirage.pipeline import Mirage

    out, args = methods_run
    shipped, partial = tmp_path / "shipped", tmp_path / "partial"
    shutil.copytree(out, shipped)
    shutil.copytree(out, partial)
    for name in ("scores.jsonl", "methods.jsonl"):
        (shipped / f"{name}.gz").write_bytes(gzip.compress((shipped / name).read_bytes()))
        (shipped / name).unlink()
    first = [line for line in (partial / "methods.jsonl").read_text().splitlines(keepends=True)
             if json.loads(line)["method"] == METHODS[0]]
    (partial / "methods.jsonl").write_text("".join(first))

    def refuse(*a, **k):
        raise AssertionError("the model was loaded although the run's own compressed stores had every score")

    monkeypatch.setattr(Mirage, "from_pretrained", classmethod(refuse))
    assert cli.main([*args[:-1], str(shipped), "--reuse-from", str(partial)]) == 0
    assert _lines(shipped / "methods.jsonl") == _lines(out / "methods.jsonl")
    again, before = (json.loads((d / "results.json").read_text()) for d in (shipped, out))
    assert again["agreement"] == before["agreement"] and again["methods"].keys() == before["methods"].keys()


def test_the_classifier_takes_the_methods_scores_as_features(methods_run, monkeypatch, capsys):
    """``--classifier-methods``: the passage-likelihood classifier fitted again with the named methods' passage
    scores among its features, from the stored scores (nothing computed again), one row per feature set."""
    from mirage.pipeline import Mirage
    from mirage.scoring.xor_classifier import method_feature

    out, args = methods_run
    sets = ["leave_one_out", "leave_one_out+attention_last"]

    def refuse(*a, **k):
        raise AssertionError("the model was loaded although every score was stored")

    monkeypatch.setattr(Mirage, "from_pretrained", classmethod(refuse))
    assert cli.main([*args, "--classifier-methods", *sets]) == 0
    printed = capsys.readouterr().out
    res = json.loads((out / "results.json").read_text())
    langs = {item.lang for item in load_xor_attriqa(XOR_VAL, text="en", limit=3).items}
    assert res["settings"]["classifier_methods"] == sets
    base = res["features"]["learned"]["features"]
    for feature_set in sets:
        row = f"learned+{feature_set}"
        assert set(res["agreement"][row]) == langs | {"avg"} and set(res["roc_auc"][row]) == langs | {"avg"}
        model = res["features"]["with_methods"][row]["model"]
        assert model["features"] == [*base, *(method_feature(m) for m in feature_set.split("+"))]
        assert row in printed
    pairs = _lines(out / "pairs.jsonl")
    assert all(0 <= p["settings"]["learned+leave_one_out"]["score"] <= 1 for p in pairs)
    # a method the run does not score, and a classifier without its calibration files: one line each
    assert cli.main([*args, "--classifier-methods", "shapley"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mirage: error: classifier_methods: 'shapley'") and "add it to --methods" in err[-1]


def test_faithfulness_follows_from_the_stored_scores(methods_run):
    """Each method's faithfulness in results.json, recomputed by hand from pairs.jsonl (each pair's score is the
    method's passage score): over the answers with 2+ passages, the leave-one-out drop of the method's top passage
    beside a random passage's, and its top-1 agreement with leave-one-out; leave-one-out agrees with itself."""
    out, _ = methods_run
    res = json.loads((out / "results.json").read_text())
    by_item: dict[str, dict[str, list[float]]] = {}
    for p in _lines(out / "pairs.jsonl"):
        for setting, got in p["settings"].items():
            if setting.endswith("@ex"):  # the method's passage score (the same under its three rules)
                by_item.setdefault(p["key"], {}).setdefault(setting[:-3], []).append(got["score"])
    multi = [scores for scores in by_item.values() if len(scores["leave_one_out"]) >= 2]
    assert multi, "the slice has no answer with two passages: the check would test nothing"
    loo_self = res["methods"]["leave_one_out"]["faithfulness"]
    assert loo_self["answers"] == len(multi) and loo_self["top1"]["leave_one_out"] == 100.0
    assert loo_self["drop_top1"] >= loo_self["drop_random"]
    assert "shapley" not in loo_self["top1"] and "keep_top1" not in loo_self  # not scored by this run
    for name in METHODS:
        faith = res["methods"][name]["faithfulness"]
        drops, randoms, top1 = [], [], []
        for scores in multi:
            own, loo = scores[name], scores["leave_one_out"]
            top = [d for d, v in enumerate(own) if v == max(own)]
            drops.append(sum(loo[d] for d in top) / len(top))
            randoms.append(sum(loo) / len(loo))
            top1.append(sum(loo[d] == max(loo) for d in top) / len(top))
        assert faith["drop_top1"] == pytest.approx(sum(drops) / len(drops), abs=1e-5), name
        assert faith["drop_random"] == pytest.approx(sum(randoms) / len(randoms), abs=1e-5), name
        assert faith["top1"]["leave_one_out"] == pytest.approx(100 * sum(top1) / len(top1)), name


def test_method_faithfulness_by_hand():
    """Spearman with average ranks, a tie at the top as a random pick, and keep = SelfCite's reward minus the
    leave-one-out drop, on records made by hand; a run without a reference has none."""
    from mirage.scoring.xor_methods import MethodRecord, method_faithfulness

    items = load_xor_attriqa(XOR_VAL, text="en", limit=3).items
    three = [i for i in items if len(i.labels) >= 2][:1]
    assert three
    item = three[0]
    n = len(item.labels)

    def rec(name, doc):
        return MethodRecord(method=name, item=item.key, doc=tuple(doc), doc_scores=(tuple(doc),), cost={})

    loo = [float(d) for d in range(n)]                       # passage n-1 matters most
    kept = [2.0 * d for d in range(n)]                       # keep = kept - loo = d
    tied = [1.0] * n                                          # no ranking at all
    scores = {"leave_one_out": {item.key: rec("leave_one_out", loo)},
              "selfcite": {item.key: rec("selfcite", kept)},
              "shapley": {item.key: rec("shapley", list(reversed(loo)))}}
    f = method_faithfulness([(item, rec("m", loo))], scores)
    assert f["spearman"] == {"shapley": pytest.approx(-1.0), "leave_one_out": pytest.approx(1.0)}
    assert f["top1"] == {"shapley": 0.0, "leave_one_out": 100.0}
    assert f["drop_top1"] == n - 1 and f["drop_random"] == pytest.approx((n - 1) / 2)
    assert f["keep_top1"] == n - 1 and f["keep_random"] == pytest.approx((n - 1) / 2)
    t = method_faithfulness([(item, rec("t", tied))], scores)
    assert t["spearman"] == {} or all(v is None for v in t["spearman"].values())
    assert t["top1"]["leave_one_out"] == pytest.approx(100 / n)   # a random pick among n tied passages
    assert t["drop_top1"] == pytest.approx(t["drop_random"])
    assert method_faithfulness([(item, rec("m", loo))], {"attention_last": {}}) is None


def test_method_features_are_added_per_passage_and_items_without_them_are_left_out():
    from mirage.scoring.xor_classifier import method_feature, with_method_features

    items = load_xor_attriqa(XOR_VAL, text="en", limit=2).items
    rows = [(item, [{"f": float(d)} for d in range(len(item.labels))]) for item in items]
    scores = {"m": {items[0].key: [0.5 + d for d in range(len(items[0].labels))]}}
    got = with_method_features(rows, ["m"], scores)
    assert [item.key for item, _ in got] == [items[0].key]
    assert got[0][1] == [{"f": float(d), method_feature("m"): 0.5 + d} for d in range(len(items[0].labels))]


def test_an_unknown_method_is_named_in_one_line(tmp_path, capsys):
    code = cli.main(["score", "xor-attriqa", str(XOR_VAL), "--limit", "1", "--methods", "attention_lats",
                     "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code != 0 and "--methods" in err and "'attention_lats' is not a registered document method" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_all_names_every_registered_method_in_a_fresh_process():
    """The scorer registers the built-in methods itself: ``--methods all`` in a process that imported nothing else
    names each of them (a registry left empty would score nothing and say nothing)."""
    import subprocess
    import sys

    from mirage.registry import DOCUMENT_METHODS

    code = ("from mirage.scoring.xor_methods import resolve_methods; "
            "print(' '.join(m.name for m in resolve_methods(['all'])))")
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == sorted(DOCUMENT_METHODS)
