"""Study items: a question, k documents of which the relevant ones hold the answer, and the gold answers.

Builders: XOR-AttriQA-match rows (human relevance labels, runs offline), BEIR-format folders (queries, corpus, qrels;
Natural Questions through ``BeIR/nq``), and MS MARCO through ``datasets``. Every random choice is seeded per item,
so an item does not change when others are added or ``limit`` cuts the list.
"""

from __future__ import annotations

import csv
import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..inputs import Document, InputError

#: XOR-AttriQA's English queries sometimes end in a stray " [b]" or " [" left by the translation join.
_STRAY_MARK = re.compile(r"\s*\[[A-Za-z]?\]?\s*$")


@dataclass(frozen=True)
class BiasItem:
    """One question with k documents; ``relevant`` are 1-based document ids; ``authors[i]`` is document i's actual
    authorship (``human`` for the original text, ``llm`` for a rewrite)."""

    id: str
    question: str
    docs: tuple[Document, ...]
    relevant: tuple[int, ...]
    answers: tuple[str, ...] = ()
    source: str = ""
    authors: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.docs:
            raise InputError("has no documents.", item=self.id, field="docs")
        bad = [r for r in self.relevant if not 1 <= r <= len(self.docs)]
        if not self.relevant or bad:
            raise InputError(f"relevant ids {list(self.relevant)} must name documents 1..{len(self.docs)}.",
                             item=self.id, field="relevant")
        if not self.authors:
            object.__setattr__(self, "authors", ("human",) * len(self.docs))

    @property
    def is_relevant(self) -> tuple[bool, ...]:
        return tuple(i + 1 in self.relevant for i in range(len(self.docs)))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question,
                "docs": [{"title": d.title, "text": d.text} for d in self.docs], "relevant": list(self.relevant),
                "answers": list(self.answers), "source": self.source, "authors": list(self.authors)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BiasItem:
        return cls(id=str(data["id"]), question=data["question"],
                   docs=tuple(Document(title=d.get("title") or "", text=d["text"]) for d in data["docs"]),
                   relevant=tuple(int(r) for r in data["relevant"]), answers=tuple(data.get("answers") or ()),
                   source=data.get("source", ""), authors=tuple(data.get("authors") or ()))


def clean_query(query: str) -> str:
    """Strip XOR-AttriQA's stray trailing " [b]" / " [" from an English query."""
    return _STRAY_MARK.sub("", query).strip()


def truncate_words(text: str, max_words: int | None) -> str:
    """The first ``max_words`` words of ``text`` (all of it when None)."""
    if max_words is None:
        return text
    words = text.split()
    return text if len(words) <= max_words else " ".join(words[:max_words])


def place_relevant(relevant: Sequence[Document], others: Sequence[Document], rng: random.Random,
                   ) -> tuple[tuple[Document, ...], tuple[int, ...]]:
    """Insert each relevant document at a random position among ``others`` (kept in order); 1-based ids back."""
    tagged = [(False, d) for d in others]
    for doc in relevant:
        tagged.insert(rng.randint(0, len(tagged)), (True, doc))
    return tuple(d for _, d in tagged), tuple(i + 1 for i, (rel, _) in enumerate(tagged) if rel)


def _doc(text: str, max_words: int | None, title: str = "") -> Document:
    return Document(title=title, text=truncate_words(text.strip(), max_words))


# -- XOR-AttriQA ----------------------------------------------------------------------------------------------------

def read_xor_rows(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """``(row id, row)`` of an XOR-AttriQA-match JSONL file, or of every ``*.jsonl`` in a folder (sorted by name);
    the id is ``<file stem>-<line number>``."""
    path = Path(path)
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files or not all(f.exists() for f in files):
        raise InputError(f"{path}: no XOR-AttriQA JSONL file(s) found.")
    rows = []
    for f in files:
        for lineno, line in enumerate(f.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                rows.append((f"{f.stem}-{lineno}", json.loads(line)))
    return rows


def _xor_passages(row: dict[str, Any], where: str) -> tuple[list[str], list[bool]]:
    passages, ais = row.get("split_passages_en"), row.get("ais")
    if not isinstance(passages, list) or not isinstance(ais, list) or len(passages) != len(ais):
        raise InputError("needs split_passages_en and ais lists of the same length.", item=where)
    return [str(p) for p in passages], [bool(a) for a in ais]


def xor_items(rows: Sequence[tuple[str, dict[str, Any]]], *, k: int, seed: int,
              max_doc_words: int | None = None) -> list[BiasItem]:
    """Items from XOR-AttriQA-match rows (English view) with exactly one passage labelled as supporting.

    The supporting passage is the relevant document; up to k-1 of the row's other passages (in retrieval order) are
    the non-relevant ones; a row with fewer passages is padded with non-supporting passages of other rows (seeded);
    the relevant document's position is drawn at random (seeded per row).
    """
    pool: list[tuple[str, str]] = []
    for row_id, row in rows:
        passages, ais = _xor_passages(row, row_id)
        pool.extend((row_id, p) for p, a in zip(passages, ais) if not a)
    items = []
    for row_id, row in rows:
        passages, ais = _xor_passages(row, row_id)
        if sum(ais) != 1 or not row.get("query_en"):
            continue
        rng = random.Random(f"{seed}:{row_id}")
        relevant = _doc(passages[ais.index(True)], max_doc_words)
        others = [p for p, a in zip(passages, ais) if not a][: k - 1]
        if len(others) < k - 1:
            seen = set(passages)
            candidates = [p for rid, p in pool if rid != row_id and p not in seen]
            candidates = list(dict.fromkeys(candidates))
            others += rng.sample(candidates, min(k - 1 - len(others), len(candidates)))
        docs, ids = place_relevant([relevant], [_doc(p, max_doc_words) for p in others], rng)
        answers = tuple(a for a in [row.get("prediction_en")] if a)
        items.append(BiasItem(id=row_id, question=clean_query(row["query_en"]), docs=docs, relevant=ids,
                              answers=answers, source="xor-attriqa"))
    return items


def xor_distractor_pool(rows: Sequence[tuple[str, dict[str, Any]]], max_doc_words: int | None = None,
                        ) -> list[Document]:
    """Every passage no annotator judged supporting, deduplicated: the candidates for RAGE's non-relevant documents."""
    texts = []
    for row_id, row in rows:
        passages, ais = _xor_passages(row, row_id)
        texts.extend(p for p, a in zip(passages, ais) if not a)
    return [_doc(t, max_doc_words) for t in dict.fromkeys(texts)]


# -- BEIR-format folders (queries.jsonl, corpus.jsonl, qrels/<split>.tsv) ---------------------------------------------

@dataclass(frozen=True)
class BeirData:
    """A BEIR dataset: ``corpus[doc id]``, ``queries[query id]``, ``qrels[query id][doc id] = relevance``."""

    corpus: Mapping[str, Document]
    queries: Mapping[str, str]
    qrels: Mapping[str, Mapping[str, int]]


def _jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"{path} line {n} is not JSON ({e.msg}); write one JSON object per line.") from None


def _beir_rows(path: Path, needed: tuple[str, ...]) -> Iterable[dict[str, Any]]:
    """The rows of a BEIR JSONL file, each checked to carry the ``needed`` fields."""
    for n, row in enumerate(_jsonl(path), 1):
        missing = [k for k in needed if row.get(k) is None]
        if missing:
            raise InputError(f"{path} row {n} lacks {missing}; BEIR rows carry {list(needed)}.", field=missing[0])
        yield row


def read_beir(path: str | Path, *, split: str = "test") -> BeirData:
    """Read a BEIR-format folder: ``corpus.jsonl`` ({_id, title, text}), ``queries.jsonl`` ({_id, text}) and
    ``qrels/<split>.tsv`` (query-id, corpus-id, score; with a header line)."""
    path = Path(path)
    qrels_path = path / "qrels" / f"{split}.tsv"
    for needed in (path / "corpus.jsonl", path / "queries.jsonl", qrels_path):
        if not needed.exists():
            raise InputError(f"{needed} is missing; a BEIR folder has corpus.jsonl, queries.jsonl, qrels/{split}.tsv.")
    corpus = {str(d["_id"]): Document(title=d.get("title") or "", text=d["text"])
              for d in _beir_rows(path / "corpus.jsonl", ("_id", "text"))}
    queries = {str(q["_id"]): q["text"] for q in _beir_rows(path / "queries.jsonl", ("_id", "text"))}
    qrels: dict[str, dict[str, int]] = {}
    with qrels_path.open(encoding="utf-8") as f:
        for n, row in enumerate(csv.reader(f, delimiter="\t"), 1):
            if not row or not "".join(row).strip():
                continue
            if n == 1 and row[0].strip().lower().replace("_", "-") in ("query-id", "qid", "query"):
                continue  # the header BEIR writes: query-id, corpus-id, score
            if len(row) < 3 or not row[2].strip().lstrip("-").isdigit():
                raise InputError(f"{qrels_path} line {n} is {row!r}; qrels lines are tab-separated "
                                 "query-id, corpus-id, integer score.")
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return BeirData(corpus=corpus, queries=queries, qrels=qrels)


def load_beir_hub(name: str, *, split: str = "test") -> BeirData:  # pragma: no cover - needs the model hub
    """A BEIR dataset from the hub (``BeIR/<name>`` corpus and queries, ``BeIR/<name>-qrels``) through ``datasets``."""
    import datasets

    corpus_ds = datasets.load_dataset(f"BeIR/{name}", "corpus", split="corpus")
    queries_ds = datasets.load_dataset(f"BeIR/{name}", "queries", split="queries")
    qrels_ds = datasets.load_dataset(f"BeIR/{name}-qrels", split=split)
    corpus = {str(d["_id"]): Document(title=d.get("title") or "", text=d["text"]) for d in corpus_ds}
    queries = {str(q["_id"]): q["text"] for q in queries_ds}
    qrels: dict[str, dict[str, int]] = {}
    for row in qrels_ds:
        qrels.setdefault(str(row["query-id"]), {})[str(row["corpus-id"])] = int(row["score"])
    return BeirData(corpus=corpus, queries=queries, qrels=qrels)


def read_answers(path: str | Path) -> dict[str, list[str]]:
    """Gold answers for a BEIR folder's ``answers.jsonl``: rows ``{"_id", "answers"}`` keyed by query id, or
    ``{"question", "answers"}`` keyed by the normalised question."""
    from .metrics import normalize_answer

    out = {}
    for n, row in enumerate(_jsonl(Path(path)), 1):
        if not isinstance(row.get("answers"), list) or ("_id" not in row and "question" not in row):
            raise InputError(f"{path} row {n} needs 'answers' (a list) and '_id' or 'question'.", field="answers")
        out[str(row["_id"]) if "_id" in row else normalize_answer(row["question"])] = [str(a) for a in row["answers"]]
    return out


def read_run(path: str | Path) -> dict[str, list[str]]:
    """A TREC run file (``qid Q0 docid rank score tag``): per query, its documents best first."""
    ranked: dict[str, list[tuple[float, str]]] = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            ranked.setdefault(parts[0], []).append((float(parts[4]), parts[2]))
        except (IndexError, ValueError):
            raise InputError(f"{path} line {n} is {line!r}; a TREC run line is 'qid Q0 docid rank score tag'.") from None
    return {q: [d for _, d in sorted(docs, key=lambda t: -t[0])] for q, docs in ranked.items()}


def beir_items(data: BeirData, *, k: int, seed: int, answers: Mapping[str, Sequence[str]] | None = None,
               run: Mapping[str, Sequence[str]] | None = None, max_doc_words: int | None = None,
               source: str = "beir") -> list[BiasItem]:
    """Items from the queries with exactly one relevant document (qrel score > 0).

    Non-relevant documents: the best-ranked non-relevant ones of ``run`` (a retriever's ranking) when given, else
    drawn at random from the corpus (seeded). ``answers`` maps a query id, or a normalised question, to gold answers
    (BEIR has none; for NQ join them from NQ-open with :func:`load_nq_answers`).
    """
    from .metrics import normalize_answer

    doc_ids = sorted(data.corpus)
    items = []
    for qid, question in data.queries.items():
        positives = [d for d, score in data.qrels.get(qid, {}).items() if score > 0 and d in data.corpus]
        if len(positives) != 1:
            continue
        rng = random.Random(f"{seed}:{qid}")
        judged = set(data.qrels.get(qid, {}))
        if run is not None and qid in run:
            others = [d for d in run[qid] if d not in judged or data.qrels[qid][d] <= 0][: k - 1]
        else:
            others = []
            while len(others) < min(k - 1, len(doc_ids) - 1):
                d = doc_ids[rng.randrange(len(doc_ids))]
                if d != positives[0] and d not in others and data.qrels.get(qid, {}).get(d, 0) <= 0:
                    others.append(d)
        pos = data.corpus[positives[0]]
        relevant = _doc(pos.text, max_doc_words, pos.title)
        docs, ids = place_relevant([relevant], [_doc(data.corpus[d].text, max_doc_words, data.corpus[d].title)
                                                for d in others if d in data.corpus], rng)
        gold: Sequence[str] = ()
        if answers is not None:
            gold = answers.get(qid) or answers.get(normalize_answer(question)) or ()
        items.append(BiasItem(id=qid, question=question, docs=docs, relevant=ids, answers=tuple(gold), source=source))
    return items


def load_nq_answers(split: str = "validation") -> dict[str, list[str]]:  # pragma: no cover - needs the model hub
    """NQ-open gold answers keyed by normalised question, to join with BEIR's NQ queries (from NQ's dev set)."""
    import datasets

    from .metrics import normalize_answer

    rows = datasets.load_dataset("google-research-datasets/nq_open", split=split)
    return {normalize_answer(r["question"]): list(r["answer"]) for r in rows}


# -- MS MARCO (passages with is_selected labels) --------------------------------------------------------------------

def msmarco_items(rows: Iterable[dict[str, Any]], *, k: int, seed: int, max_doc_words: int | None = None,
                  ) -> list[BiasItem]:
    """Items from MS MARCO v2.1 rows (``query``, ``answers``, ``passages: {is_selected, passage_text}``) with exactly
    one selected passage and a real answer; the other passages, in their order, are the non-relevant ones."""
    items = []
    for n, row in enumerate(rows):
        passages = row["passages"]
        selected, texts = list(passages["is_selected"]), list(passages["passage_text"])
        answers = [a for a in row.get("answers") or [] if a and a != "No Answer Present."]
        if sum(1 for s in selected if s) != 1 or not answers:
            continue
        qid = str(row.get("query_id", n))
        rng = random.Random(f"{seed}:{qid}")
        rel = selected.index(next(s for s in selected if s))
        others = [_doc(t, max_doc_words) for i, t in enumerate(texts) if i != rel][: k - 1]
        docs, ids = place_relevant([_doc(texts[rel], max_doc_words)], others, rng)
        items.append(BiasItem(id=qid, question=row["query"], docs=docs, relevant=ids, answers=tuple(answers),
                              source="msmarco"))
    return items


def load_msmarco(split: str = "validation") -> list[dict[str, Any]]:  # pragma: no cover - needs the model hub
    """MS MARCO v2.1 rows from the hub through ``datasets``."""
    import datasets

    return list(datasets.load_dataset("microsoft/ms_marco", "v2.1", split=split))


# -- prepared items and the dispatcher ---------------------------------------------------------------------------------

def read_items(path: str | Path) -> list[BiasItem]:
    """Items written by :func:`write_items` (one :meth:`BiasItem.to_dict` per line)."""
    return [BiasItem.from_dict(d) for d in _jsonl(Path(path))]


def write_items(items: Iterable[BiasItem], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(i.to_dict(), ensure_ascii=False) + "\n" for i in items), encoding="utf-8")


def detect_format(spec: str) -> str:
    """``xor``, ``beir``, ``items``, or a hub dataset (``nq``, ``msmarco``) for a DATA argument."""
    if spec in ("nq", "msmarco"):
        return spec
    path = Path(spec)
    if path.is_dir():
        if (path / "corpus.jsonl").exists():
            return "beir"
        if any(path.glob("*.jsonl")):
            return "xor"
    elif path.exists():
        with path.open(encoding="utf-8") as f:
            first = json.loads(next((line for line in f if line.strip()), "{}"))
        if "split_passages_en" in first:
            return "xor"
        if "relevant" in first and "docs" in first:
            return "items"
    raise InputError(f"{spec}: not an XOR-AttriQA file or folder, a BEIR folder (corpus.jsonl, queries.jsonl, "
                     "qrels/), a JSONL of prepared items, nor 'nq' / 'msmarco'.")
