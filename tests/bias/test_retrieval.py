"""Retrieval for the bias study (:mod:`mirage.bias.retrieval`, ``mirage retrieve``, ``mirage bias --retriever``) on
tests/data/beir_small (ten XOR-AttriQA questions, 74 passages, see its README): BM25 and the dense all-MiniLM-L6-v2
retriever find the relevant passage far above chance, run files round-trip through read_run, the study's items take
their non-relevant documents from the ranking, and a two-retriever study on the embedded model writes each
retriever's folder and the comparison table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mirage.bias.items import BeirData, read_beir, read_run, truncate_words
from mirage.bias.protocol import BiasConfig
from mirage.bias.retrieval import (
    RETRIEVERS,
    DenseRetriever,
    RetrievalQuality,
    get_retriever,
    ranked_ids,
    retrieval_quality,
    retrieve,
    write_run,
)
from mirage.bias.study import build_items
from mirage.cli import build_parser, main
from mirage.config import ConfigError
from mirage.data.inputs import Document, InputError

ROOT = Path(__file__).resolve().parents[2]
BEIR = ROOT / "tests" / "data" / "beir_small"
XOR_ROWS = ROOT / "tests" / "data" / "xor_bias_rows.jsonl"
#: a random ranking puts the one relevant passage of 74 in the top 5 with probability 5/74 (0.07 of the queries on
#: average; 7 of 10 or more by chance: p < 1e-6)
RECALL_AT_5_BOUND = 0.7


@pytest.fixture(scope="module")
def beir() -> BeirData:
    return read_beir(BEIR)


@pytest.fixture(scope="module")
def bm25(beir):
    return retrieve(beir, "bm25", top_k=100)


def _relevant(beir: BeirData, qid: str) -> str:
    (doc,) = [d for d, s in beir.qrels[qid].items() if s > 0]
    return doc


def _check_ranking(ranking, beir: BeirData, top_k: int) -> None:
    assert set(ranking) == set(beir.queries)  # every query of the test corpus has qrels
    for docs in ranking.values():
        ids = [d for d, _ in docs]
        assert len(ids) == min(top_k, len(beir.corpus)) == len(set(ids)) and set(ids) <= set(beir.corpus)
        scores = [s for _, s in docs]
        assert scores == sorted(scores, reverse=True)


def test_bm25_ranks_the_relevant_passage_high(beir, bm25):
    _check_ranking(bm25, beir, 100)
    quality = retrieval_quality(bm25, beir.qrels, k=5)
    assert quality.n_queries == 10 and quality.recall_at_k >= RECALL_AT_5_BOUND
    assert quality.recall_at_top_k == 1.0  # all 74 passages ranked
    # a shorter list is the head of the longer one
    short = retrieve(beir, "bm25", top_k=3)
    assert all(short[q] == bm25[q][:3] for q in short)


def test_bm25_query_with_no_indexed_word_scores_zero(beir):
    data = BeirData(corpus=beir.corpus, queries={"q": "the of and zzzqx"}, qrels={"q": {"val-17-p1": 1}})
    (docs,) = retrieve(data, "bm25", top_k=4).values()
    assert [s for _, s in docs] == [0.0] * 4
    assert [d for d, _ in docs] == list(beir.corpus)[:4]  # ties keep the corpus order


def test_run_files_round_trip_through_read_run(bm25, tmp_path):
    path = write_run(bm25, tmp_path / "runs" / "bm25.trec", tag="bm25")
    lines = path.read_text().splitlines()
    assert len(lines) == sum(len(v) for v in bm25.values())
    qid, q0, doc, rank, score, tag = lines[0].split()
    assert (qid, q0, doc, rank, tag) == (next(iter(bm25)), "Q0", bm25[qid][0][0], "1", "bm25")
    assert float(score) == pytest.approx(bm25[qid][0][1], abs=1e-6)
    assert read_run(path) == ranked_ids(bm25)
    # equal scores keep their order through the file
    ties = {"q1": [("b", 1.0), ("a", 1.0), ("c", 0.5)]}
    assert read_run(write_run(ties, tmp_path / "ties.trec", tag="x")) == {"q1": ["b", "a", "c"]}
    with pytest.raises(InputError, match="white space"):
        write_run({"q1": [("doc one", 1.0)]}, tmp_path / "bad.trec", tag="x")


def test_retrieval_quality_counts_relevant_documents_by_rank():
    qrels = {"a": {"d1": 1, "d2": 0}, "b": {"d3": 1, "d4": 2}, "c": {"d9": 0}}
    ranking = {"a": [("d2", 3.0), ("d1", 2.0)], "b": [("d4", 1.0), ("d5", 0.5), ("d3", 0.1)], "c": [("d9", 1.0)]}
    q = retrieval_quality(ranking, qrels, k=1, top_k=3)
    # a: relevant at rank 2; b: one of two relevant at rank 1, the other at 3; c has no relevant document
    assert q == RetrievalQuality(k=1, top_k=3, recall_at_k=(0 + 0.5) / 2, recall_at_top_k=1.0, mrr=(0.5 + 1) / 2,
                                 n_queries=2)
    assert RetrievalQuality.from_dict(json.loads(json.dumps(q.to_dict()))) == q


def test_unknown_retriever_and_bad_top_k_are_config_errors(beir, tmp_path, capsys):
    with pytest.raises(ConfigError, match="'splade' is not a retriever; choose one of bm25, dense"):
        retrieve(beir, "splade", top_k=5)
    with pytest.raises(ConfigError, match="top_k=0 must be a positive integer"):
        retrieve(beir, "bm25", top_k=0)
    # the command line says so before reading data or loading a model
    assert main(["retrieve", str(BEIR), "--retriever", "splade", "-o", str(tmp_path / "run.trec")]) == 2
    assert "'splade' is not a retriever" in capsys.readouterr().err
    assert main(["bias", str(BEIR), "-o", str(tmp_path / "out"), "--retriever", "bm25", "splade"]) == 2
    assert "'splade' is not a retriever" in capsys.readouterr().err
    assert main(["bias", str(BEIR), "-o", str(tmp_path / "out"), "--retriever", "bm25", "--top-k", "2"]) == 2
    assert "top_k=2 is below k=5" in capsys.readouterr().err
    assert main(["bias", str(BEIR), "-o", str(tmp_path / "out"), "--retriever", "bm25", "--docs", "rage"]) == 2
    assert "replaces the non-relevant documents that the retrievers choose" in capsys.readouterr().err
    assert main(["bias", str(BEIR), "-o", str(tmp_path / "out"), "--top-k", "20"]) == 2
    assert "give --retriever too" in capsys.readouterr().err
    assert main(["bias", str(XOR_ROWS), "-o", str(tmp_path / "out"), "--retriever", "bm25"]) == 2
    assert "retrieval needs a BEIR folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_help_names_every_retriever_and_imports_no_torch():
    for command in ("bias", "retrieve"):
        parser = build_parser([command])
        sub = next(a for a in parser._actions if a.dest == "command")
        (action,) = [a for a in sub.choices[command]._actions if a.dest == "retriever"]
        assert all(name in action.help for name in RETRIEVERS)
    code = ("import sys\nfrom mirage.cli import main\ntry:\n    main(['retrieve', '--help'])\nexcept SystemExit:\n"
            "    pass\nprint(sorted({'torch', 'numpy', 'bm25s', 'transformers'} & set(sys.modules)))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert run.stdout.strip().splitlines()[-1] == "[]"


def test_mirage_retrieve_writes_the_run_the_study_reads(beir, bm25, tmp_path, capsys):
    out = tmp_path / "bm25.trec"
    assert main(["retrieve", str(BEIR), "--retriever", "bm25", "-o", str(out), "--top-k", "10"]) == 0
    assert read_run(out) == {q: ids[:10] for q, ids in ranked_ids(bm25).items()}
    assert "over the 10 with a relevant document: recall@5" in capsys.readouterr().err
    assert main(["retrieve", str(BEIR), "--retriever", "bm25", "-o", str(tmp_path)]) == 2  # a folder, not a file


def test_build_items_takes_the_non_relevant_documents_from_the_run(beir, bm25, tmp_path):
    cfg = BiasConfig(k=4)
    items = build_items(str(BEIR), cfg, run=ranked_ids(bm25))
    assert [it.id for it in items] == list(beir.queries)
    for item in items:
        others = [d for d, _ in bm25[item.id] if beir.qrels[item.id].get(d, 0) <= 0][:3]
        (rel,) = item.relevant
        assert item.docs[rel - 1].text == beir.corpus[_relevant(beir, item.id)].text
        assert [d.text for i, d in enumerate(item.docs, 1) if i != rel] == [beir.corpus[d].text for d in others]
    # the run file gives the same items; without a run the non-relevant documents are drawn at random
    assert build_items(str(BEIR), cfg, run=write_run(bm25, tmp_path / "run.trec", tag="bm25")) == items
    assert build_items(str(BEIR), cfg) != items
    with pytest.raises(InputError, match="a retriever's run gives the documents of BEIR data"):
        build_items(str(XOR_ROWS), cfg, run=ranked_ids(bm25))


# -- the real all-MiniLM-L6-v2 embedder and the embedded language model -----------------------------------------------

@pytest.fixture(scope="module")
def minilm(one_thread):
    from mirage.bias.rage import MiniLMEmbedder

    return MiniLMEmbedder()


class Counting:
    """The real embedder, counting the texts it embeds."""

    def __init__(self, embed):
        self.embed, self.texts = embed, 0

    def __call__(self, texts):
        self.texts += len(texts)
        return self.embed(texts)


@pytest.mark.slow
def test_dense_retriever_finds_the_relevant_passage_and_caches_the_corpus(beir, bm25, minilm, tmp_path):
    counting = Counting(minilm)
    dense = retrieve(beir, "dense", top_k=100, cache_dir=tmp_path, embed=counting)
    _check_ranking(dense, beir, 100)
    assert retrieval_quality(dense, beir.qrels, k=5).recall_at_k >= RECALL_AT_5_BOUND
    assert all(-1.0 <= s <= 1.0 for docs in dense.values() for _, s in docs)  # cosine similarities
    # no shared word: "Does Catholicism ban birth control?" vs "... the Catholic Church ... contraception"
    rank = {name: [d for d, _ in r["val-48"]].index(_relevant(beir, "val-48")) + 1
            for name, r in (("bm25", bm25), ("dense", dense))}
    assert rank["dense"] == 1 < rank["bm25"]
    (cached,) = tmp_path.glob("corpus-embeddings-*.npy")
    assert counting.texts == 1 + len(beir.corpus) + len(beir.queries)  # the probe, the corpus, the queries
    # a second search reads the corpus from the cache: it embeds only the probe and the queries
    counting.texts = 0
    assert retrieve(beir, "dense", top_k=100, cache_dir=tmp_path, embed=counting) == dense
    assert counting.texts == 1 + len(beir.queries)
    # another corpus gets another cache file
    changed = dict(beir.corpus, **{"val-17-p0": Document(title="", text="A passage about something else.")})
    other = DenseRetriever(minilm, cache_dir=tmp_path).cache_path(BeirData(changed, beir.queries, beir.qrels))
    assert other != cached and not other.exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RETRIEVERS))
def test_every_registered_retriever_ranks_best_first_and_finds_the_relevant_passage(name, beir, tmp_path):
    """The registry's conformance test: registering a retriever is enough to get it run here. Its retriever carries
    its name, ranks every query's top k best first without repeating a document, a shorter list is the head of a
    longer one, and it finds the one relevant passage far above chance."""
    retriever = get_retriever(name, cache_dir=tmp_path)
    assert retriever.name == name
    ranking = retriever.search(beir, top_k=5)
    _check_ranking(ranking, beir, 5)
    assert retriever.search(beir, top_k=2) == {q: docs[:2] for q, docs in ranking.items()}
    assert retrieval_quality(ranking, beir.qrels, k=5).recall_at_k >= RECALL_AT_5_BOUND


@pytest.mark.slow
def test_bias_study_per_retriever_and_comparison(tmp_path, one_thread):
    from mirage.bias.results import BiasStudyResult
    from mirage.bias.retrievers_study import RetrieverComparison

    out = tmp_path / "study"
    argv = ["bias", str(BEIR), "-o", str(out), "--retriever", "bm25", "dense", "--top-k", "20", "--limit", "2",
            "--ndocs", "3", "--modes", "vanilla", "informed", "--max-doc-words", "25", "--max-new-tokens", "8",
            "--quiet"]
    assert main(argv) == 0
    beir = read_beir(BEIR)
    comparison = RetrieverComparison.load(out / "retrievers.json")
    assert list(comparison.runs) == ["bm25", "dense"] and comparison.top_k == 20 and comparison.k == 3
    assert RetrieverComparison.from_dict(json.loads(json.dumps(comparison.to_dict()))) == comparison
    table = (out / "retrievers.md").read_text()
    for name, run in comparison.runs.items():
        folder = out / name
        ranked = read_run(out / run.run)
        assert run.run == f"{name}/run.trec" and all(len(v) == 20 for v in ranked.values())
        assert run.quality == retrieval_quality(ranked, beir.qrels, k=3, top_k=20)
        # the study's items: the relevant passage and the run's two best-ranked non-relevant ones
        items = [json.loads(line) for line in (folder / "items.jsonl").read_text().splitlines()]
        assert len(items) == 2
        for item in items:
            others = [d for d in ranked[item["id"]] if beir.qrels[item["id"]].get(d, 0) <= 0][:2]
            texts = [d["text"] for i, d in enumerate(item["docs"], 1) if i not in item["relevant"]]
            assert texts == [truncate_words(beir.corpus[d].text, 25) for d in others]
        records = [json.loads(line) for line in (folder / "generations.jsonl").read_text().splitlines()]
        assert sorted((r["item_id"], r["mode"]) for r in records) == sorted(
            (it["id"], m) for it in items for m in ("vanilla", "informed"))
        result = BiasStudyResult.load(folder / "results.json")
        assert run.result == result and result.n_items == 2 and (folder / "tables.md").exists()
        # the table's row per citation set shows that folder's CAS (informed vs vanilla); no CAB without the
        # counterfactual mode
        for key, label in (("self", "self-citation"), ("mirage", "MIRAGE")):
            cas = result.sources[key].cas["informed"]
            row = next(line for line in table.splitlines() if line.startswith(f"| {name} | {label} |"))
            shown = "–" if cas.precision.value is None else f"{100 * cas.precision.value:.2f}"  # None: no pair
            assert row.split(" | ")[2].startswith(shown)
            assert row.rstrip(" |").endswith("– | –")
        assert f"| {name} | {100 * run.quality.recall_at_k:.1f} |" in table
    # a re-run finds every generation done and the corpus embeddings cached
    (cache,) = (out / "dense").glob("corpus-embeddings-*.npy")
    stamp, before = cache.stat().st_mtime_ns, (out / "dense" / "generations.jsonl").read_text()
    assert main(argv) == 0
    assert cache.stat().st_mtime_ns == stamp and (out / "dense" / "generations.jsonl").read_text() == before
