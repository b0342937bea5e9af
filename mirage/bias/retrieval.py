"""Retrieval: rank a BEIR corpus for each query, so that the study's non-relevant documents come from a retriever.

Two retrievers, by name (:data:`mirage.registry.RETRIEVERS`; :func:`register_retriever` adds one):

- ``bm25``: Okapi BM25 (``bm25s``, its Lucene variant, k1 = 1.5, b = 0.75) over lower-cased words of two or more
  characters, English stop words removed, no stemming;
- ``dense``: cosine similarity of all-MiniLM-L6-v2 sentence embeddings (:class:`~mirage.bias.rage.MiniLMEmbedder`,
  the RAGE mixture's embedder), the corpus encoded in batches and cached by content hash.

A document is read as ``title text``. A ranking is written as a TREC run file (``qid Q0 docid rank score tag``,
:func:`write_run`), which :func:`~mirage.bias.items.read_run` reads back; :func:`retrieval_quality` scores it
against the qrels (recall of the relevant documents in the top k, MRR).

    ranking = retrieve(read_beir("data/nq"), "bm25", top_k=100)
    write_run(ranking, "data/nq/run.trec", tag="bm25")
"""

from __future__ import annotations

import hashlib
import io
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mirage.attribution.serialization import JSONRecord
from mirage.bias.items import BeirData, detect_format, load_beir_hub, read_beir
from mirage.config import ConfigError
from mirage.data.inputs import Document, InputError
from mirage.registry import RETRIEVERS
from mirage.runs.store import canonical_json, write_atomic

if TYPE_CHECKING:
    import numpy as np

    from mirage.bias.rage import Embedder

__all__ = ["RETRIEVERS", "DenseRetriever", "RetrievalQuality", "Retriever", "check_retrievers", "check_top_k",
           "get_retriever", "load_beir_data", "ranked_ids", "register_retriever", "retrieval_quality", "retrieve",
           "write_run"]

#: query id → its retrieved documents ``(doc id, score)``, best first.
Ranking = dict[str, list[tuple[str, float]]]


def doc_text(doc: Document) -> str:
    """What a retriever reads of a document: its title (when it has one), then its text."""
    return f"{doc.title} {doc.text}".strip() if doc.title else doc.text


def queries_to_rank(beir: BeirData, queries: Iterable[str] | None = None) -> dict[str, str]:
    """``query id → text`` of ``queries`` (default: every query with qrels, the only ones a study can use or a
    ranking be scored on). InputError for an id that is not a query of ``beir``."""
    ids = [q for q in beir.queries if q in beir.qrels] if queries is None else list(queries)
    missing = [q for q in ids if q not in beir.queries]
    if missing:
        raise InputError(f"{missing[:5]} are not query ids of the BEIR data; give ids from its queries.jsonl.",
                         field="queries")
    return {q: beir.queries[q] for q in ids}


def top_best_first(doc_ids: Sequence[str], scores: np.ndarray, top_k: int) -> list[tuple[str, float]]:
    """The ``top_k`` best ``(doc id, score)`` of a query's ``scores`` ``[n_docs]`` (one per document of the corpus,
    in its order), best first; equal scores in corpus order, at the cut too, so that a shorter list is the head of a
    longer one."""
    import numpy as np

    k = min(top_k, len(scores))
    if k <= 0:
        return []
    kth = np.partition(scores, len(scores) - k)[len(scores) - k]  # the k-th best score
    above = np.flatnonzero(scores > kth)
    found = np.concatenate([above, np.flatnonzero(scores == kth)[: k - len(above)]])
    order = found[np.lexsort((found, -scores[found]))]
    return [(doc_ids[int(j)], float(scores[j])) for j in order]


class Retriever(ABC):
    """Ranks a BEIR corpus for each query."""

    #: the name in :data:`RETRIEVERS`, written as the run file's tag
    name: str

    @abstractmethod
    def search(self, beir: BeirData, *, top_k: int, queries: Iterable[str] | None = None) -> Ranking:
        """The ``top_k`` best documents of the corpus for each query of ``queries`` (default: those with qrels)."""


class BM25Retriever(Retriever):
    """Okapi BM25 through ``bm25s`` (the corpus indexed in memory on each search)."""

    name = "bm25"

    def __init__(self, *, k1: float = 1.5, b: float = 0.75, stopwords: str = "en") -> None:
        self.k1, self.b, self.stopwords = k1, b, stopwords

    def search(self, beir: BeirData, *, top_k: int, queries: Iterable[str] | None = None) -> Ranking:
        import numpy as np

        try:
            import bm25s
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError("the bm25 retriever needs bm25s: pip install 'mirage-rag[bias]' (or bm25s)",
                                      name=err.name) from err
        doc_ids = list(beir.corpus)
        wanted = queries_to_rank(beir, queries)
        if not doc_ids or not wanted:
            return {q: [] for q in wanted}
        index = bm25s.BM25(k1=self.k1, b=self.b)
        corpus_tokens = bm25s.tokenize([doc_text(beir.corpus[d]) for d in doc_ids], stopwords=self.stopwords,
                                       show_progress=False)
        # bm25s sets its own logger to DEBUG on import: its debug lines would reach a terminal set to warnings
        logger = logging.getLogger("bm25s")
        level = logger.level
        logger.setLevel(max(level, logging.INFO))
        try:
            index.index(corpus_tokens, show_progress=False)
        finally:
            logger.setLevel(level)
        tokens = bm25s.tokenize(list(wanted.values()), stopwords=self.stopwords, return_ids=False,
                                show_progress=False)
        out: Ranking = {}
        for qid, words in zip(wanted, tokens):
            known = [w for w in words if w in index.vocab_dict]
            # a query none of whose words is indexed (or only stop words) scores 0 everywhere
            scores = index.get_scores(known) if known else np.zeros(len(doc_ids), dtype=np.float32)  # [n_docs]
            out[qid] = top_best_first(doc_ids, scores, top_k)
        return out


class DenseRetriever(Retriever):
    """Cosine similarity of sentence embeddings (L2-normalised, so a dot product), ``embed`` defaulting to
    all-MiniLM-L6-v2 (an embedder with a ``queries`` method embeds the queries with it, as in the RAGE mixture).
    With ``cache_dir`` the corpus embeddings are saved there as ``corpus-embeddings-<hash>.npy`` and reused by the
    next search of the same corpus: the hash covers every (doc id, text) and the embedder (its embedding of a fixed
    probe sentence, so another embedder never reads this one's vectors)."""

    name = "dense"

    #: embedded to tell embedders apart in the cache key
    PROBE = "A retriever ranks the documents of a corpus for a question."

    def __init__(self, embed: Embedder | None = None, *, cache_dir: str | Path | None = None,
                 query_batch: int = 256) -> None:
        self._embed = embed
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.query_batch = query_batch

    @property
    def embed(self) -> Embedder:
        """The embedder (all-MiniLM-L6-v2 loaded on first use when none was given)."""
        if self._embed is None:
            from mirage.bias.rage import MiniLMEmbedder

            self._embed = MiniLMEmbedder()
        return self._embed

    def cache_path(self, beir: BeirData) -> Path | None:
        """Where this corpus's embeddings by this embedder are cached (None without ``cache_dir``)."""
        if self.cache_dir is None:
            return None
        probe = [round(float(x), 3) for x in self.embed([self.PROBE])[0]]
        digest = hashlib.sha1(canonical_json(["dense-corpus", probe]))
        for doc_id, doc in beir.corpus.items():
            digest.update(canonical_json([doc_id, doc_text(doc)]))
        return self.cache_dir / f"corpus-embeddings-{digest.hexdigest()[:16]}.npy"

    def corpus_embeddings(self, beir: BeirData) -> np.ndarray:
        """``[n_docs, dim]`` embeddings of the corpus in its order, from the cache when it holds them."""
        import numpy as np

        path = self.cache_path(beir)
        if path is not None and path.exists():
            cached = np.load(path)
            if cached.ndim == 2 and cached.shape[0] == len(beir.corpus):
                return cached
        emb = np.asarray(self.embed([doc_text(d) for d in beir.corpus.values()]), dtype=np.float32)
        if path is not None:
            buf = io.BytesIO()
            np.save(buf, emb)
            write_atomic(path, buf.getvalue())  # whole or absent, also with several ranks writing it
        return emb

    def search(self, beir: BeirData, *, top_k: int, queries: Iterable[str] | None = None) -> Ranking:
        import numpy as np

        doc_ids = list(beir.corpus)
        wanted = queries_to_rank(beir, queries)
        if not doc_ids or not wanted:
            return {q: [] for q in wanted}
        docs = self.corpus_embeddings(beir)  # [n_docs, dim]
        qids = list(wanted)
        embed_queries = getattr(self.embed, "queries", self.embed)  # E5 embeds questions with its query: prefix
        query_emb = np.asarray(embed_queries(list(wanted.values())), dtype=np.float32)  # [n_queries, dim]
        out: Ranking = {}
        for start in range(0, len(qids), self.query_batch):
            scores = query_emb[start : start + self.query_batch] @ docs.T  # [batch, n_docs]
            for qid, row in zip(qids[start : start + self.query_batch], scores):
                out[qid] = top_best_first(doc_ids, row, top_k)
        return out


def _bm25(*, cache_dir: Path | None, embed: Embedder | None) -> Retriever:
    return BM25Retriever()


def _dense(*, cache_dir: Path | None, embed: Embedder | None) -> Retriever:
    return DenseRetriever(embed, cache_dir=cache_dir)


def register_retriever(name: str, factory: Callable[..., Retriever], *, overwrite: bool = False) -> None:
    """Make ``factory(*, cache_dir, embed) -> Retriever`` available as retriever ``name`` (:data:`RETRIEVERS`;
    ``cache_dir``: where the retriever may cache what it computes, ``embed``: an embedder already loaded, which a
    retriever that embeds may use). The retriever it builds has ``name`` as its :attr:`Retriever.name`."""
    RETRIEVERS.register(name, factory, overwrite=overwrite)


register_retriever("bm25", _bm25)
register_retriever("dense", _dense)


def get_retriever(name: str, *, cache_dir: str | Path | None = None, embed: Embedder | None = None) -> Retriever:
    """The retriever registered as ``name``; ConfigError naming the known ones otherwise."""
    check_retrievers([name])
    return RETRIEVERS[name](cache_dir=None if cache_dir is None else Path(cache_dir), embed=embed)


def check_retrievers(names: Sequence[str]) -> None:
    """ConfigError unless every name is a registered retriever (checked before anything is read or loaded)."""
    unknown = [n for n in names if n not in RETRIEVERS]
    if unknown:
        raise ConfigError(f"retriever={unknown[0]!r} is not a retriever; choose one of {', '.join(RETRIEVERS)}.")
    if not names:
        raise ConfigError(f"retriever: name at least one of {', '.join(RETRIEVERS)}.")


def check_top_k(top_k: int) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigError(f"top_k={top_k!r} must be a positive integer (documents retrieved per query).")


def retrieve(beir: BeirData, retriever: str, *, top_k: int, queries: Iterable[str] | None = None,
             cache_dir: str | Path | None = None, embed: Embedder | None = None) -> Ranking:
    """Per query (default: every query with qrels), the ``top_k`` best documents of ``beir``'s corpus by the
    retriever named ``retriever`` (:data:`RETRIEVERS`), ``(doc id, score)`` best first."""
    check_top_k(top_k)
    return get_retriever(retriever, cache_dir=cache_dir, embed=embed).search(beir, top_k=top_k, queries=queries)


def load_beir_data(data: str | Path, *, split: str = "test") -> BeirData:  # a BEIR folder, or nq from the hub
    """The BEIR data a retriever ranks: a BEIR folder, or ``nq`` (``BeIR/nq`` from the hub). InputError otherwise."""
    kind = detect_format(str(data))
    if kind == "beir":
        return read_beir(data, split=split)
    if kind == "nq":  # pragma: no cover - needs the model hub
        return load_beir_hub("nq", split=split)
    raise InputError(f"{data}: retrieval needs a BEIR folder (corpus.jsonl, queries.jsonl, qrels/) or nq, not "
                     f"{'prepared items' if kind == 'items' else kind}.")


def write_run(ranking: Mapping[str, Sequence[tuple[str, float]]], path: str | Path, *, tag: str) -> Path:
    """Write ``ranking`` as a TREC run file, ``qid Q0 docid rank score tag`` (rank from 1, best first), replacing
    ``path`` whole. InputError for an id or tag with white space (the format's separator)."""
    for what, value in [("tag", tag), *(("query id", q) for q in ranking),
                        *(("document id", d) for docs in ranking.values() for d, _ in docs)]:
        if not value or any(c.isspace() for c in value):
            raise InputError(f"{what} {value!r} is empty or holds white space, which a TREC run file cannot carry.")
    lines = [f"{qid} Q0 {doc} {rank} {score:.6f} {tag}\n"
             for qid, docs in ranking.items() for rank, (doc, score) in enumerate(docs, 1)]
    return write_atomic(path, "".join(lines))


@dataclass
class RetrievalQuality(JSONRecord):
    """How well a ranking finds the relevant documents (qrel score > 0), averaged over ``n_queries`` queries with a
    relevant document: ``recall_at_k`` (fraction of a query's relevant documents in its top ``k``, the study's
    documents per question), ``recall_at_top_k`` (in all ``top_k`` retrieved), ``mrr`` (1 / rank of the first
    relevant document, 0 when none is retrieved)."""

    k: int
    top_k: int
    recall_at_k: float
    recall_at_top_k: float
    mrr: float
    n_queries: int


def retrieval_quality(ranking: Mapping[str, Sequence[tuple[str, float]] | Sequence[str]],
                      qrels: Mapping[str, Mapping[str, int]], *, k: int, top_k: int | None = None,
                      ) -> RetrievalQuality:
    """Recall@k, recall@top_k and MRR of ``ranking`` (``(doc id, score)`` pairs or doc ids, best first) over its
    queries that have a relevant document in ``qrels``."""
    rows: list[tuple[float, float, float]] = []
    longest = 0
    for qid, docs in ranking.items():
        relevant = {d for d, score in qrels.get(qid, {}).items() if score > 0}
        if not relevant:
            continue
        ids = [d if isinstance(d, str) else d[0] for d in docs]
        longest = max(longest, len(ids))
        cut = ids if top_k is None else ids[:top_k]
        first = next((rank for rank, d in enumerate(cut, 1) if d in relevant), None)
        rows.append((len(relevant & set(cut[:k])) / len(relevant), len(relevant & set(cut)) / len(relevant),
                     1.0 / first if first else 0.0))
    n = len(rows)
    mean = (lambda i: sum(r[i] for r in rows) / n if n else 0.0)
    return RetrievalQuality(k=k, top_k=longest if top_k is None else top_k, recall_at_k=mean(0),
                            recall_at_top_k=mean(1), mrr=mean(2), n_queries=n)


def ranked_ids(ranking: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, list[str]]:
    """The document ids of a ranking, best first: what :func:`~mirage.bias.items.read_run` returns for its run file."""
    return {q: [d for d, _ in docs] for q, docs in ranking.items()}

