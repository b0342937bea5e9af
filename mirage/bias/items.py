"""Study items: a question, k documents of which the relevant ones hold the answer, and the gold answers.

Each builder keeps the questions with exactly ``n_relevant`` relevant documents (one by default; the questions with
another number are left out, and :func:`relevant_counts_note` says how many there were of each), shows all of them
at random positions, and fills the other ``k - n_relevant`` places with non-relevant documents.

Builders: XOR-AttriQA-match rows (human relevance labels, runs offline), BEIR-format folders (queries, corpus, qrels;
Natural Questions through ``BeIR/nq``), and MS MARCO through ``datasets``. Every random choice is seeded per item,
so an item does not change when others are added or ``limit`` cuts the list.
"""

from __future__ import annotations

import csv
import json
import random
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirage.data.inputs import Document, InputError, json_kind
from mirage.data.readers import BadRow, RawRow, read_jsonl, read_rows, read_text, text_lines
from mirage.runs.store import write_atomic
from mirage.scoring.rows import RowError
from mirage.scoring.xor_data import XorRow, clean_query, parse_xor_row

__all__ = ["BeirData", "BiasItem", "beir_items", "beir_relevant_counts", "clean_query", "detect_format",
           "load_beir_hub", "load_msmarco", "load_nq_answers", "load_xor_rows", "msmarco_items", "parse_match_rows",
           "place_relevant", "read_answers", "read_beir", "read_bias_items", "read_run", "read_xor_rows",
           "relevant_counts_note", "truncate_words", "write_items", "xor_distractor_pool", "xor_items",
           "xor_relevant_counts"]


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


def relevant_counts_note(counts: Iterable[int], n_relevant: int) -> str:
    """How many questions have ``n_relevant`` relevant documents and how many have each number, for the message that
    says why questions were left out: ``"141 of 332 questions have exactly 1 relevant document(s) (questions by
    relevant documents: 0: 139, 1: 141, 2: 35, 3: 12, 4: 4, 5: 1)"``."""
    tally = Counter(counts)
    kept = tally.get(n_relevant, 0)
    by_count = ", ".join(f"{n}: {tally[n]}" for n in sorted(tally))
    return (f"{kept} of {sum(tally.values())} questions have exactly {n_relevant} relevant document(s) "
            f"(questions by relevant documents: {by_count or 'none'})")


# -- XOR-AttriQA ----------------------------------------------------------------------------------------------------

XorRows = list[tuple[str, dict[str, Any]]]


def load_xor_rows(path: str | Path) -> tuple[XorRows, list[BadRow]]:
    """``(row id, row)`` of an XOR-AttriQA-match JSONL file, or of every ``*.jsonl`` in a folder (sorted by name),
    and the rows skipped: lines that are not JSON, and rows that :func:`~mirage.scoring.xor_data.parse_xor_row`
    (the scorer's reading of a row) rejects or that are not match rows (each a BadRow with its file and line,
    ``str()`` gives ``FILE:LINE: reason``). The id is ``<file stem>-<line number>``. InputError when there is no such
    file, or one is not UTF-8."""
    path = Path(path)
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files or not all(f.exists() for f in files):
        raise InputError(f"{path}: no XOR-AttriQA JSONL file(s) found.")
    rows: XorRows = []
    bad: list[BadRow] = []
    for f in files:
        for raw in read_rows(f, what="XOR-AttriQA JSONL file"):
            if isinstance(raw, BadRow):
                bad.append(raw)
                continue
            try:
                _match_row(raw.data)
            except RowError as err:
                bad.append(BadRow(file=str(f), line=raw.line, error=str(err)))
            else:
                rows.append((f"{f.stem}-{raw.line}", raw.data))
    return rows, bad


def read_xor_rows(path: str | Path) -> XorRows:
    """The rows of :func:`load_xor_rows`; each skipped row is reported as a warning ``skipped FILE:LINE: reason``
    (call :func:`load_xor_rows` to report them otherwise)."""
    rows, bad = load_xor_rows(path)
    for row in bad:
        warnings.warn(f"skipped {row}", stacklevel=2)
    return rows


def _match_row(data: Any) -> XorRow:
    """A row of the match release in the English view, as the study reads it: :func:`parse_xor_row`, the query's
    stray mark removed even when cut short. RowError when the row cannot be used."""
    row = parse_xor_row(data, text="en")
    if row.per_passage:
        raise RowError("is a row of the per-passage release ('ais' one label); the bias study reads the match release "
                       "('split_passages_en' with a list of 'ais' labels)")
    return row


def parse_match_rows(rows: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, XorRow]]:
    """``(row id, XorRow)`` for each ``(row id, raw row)`` of the XOR-AttriQA match release; InputError naming
    the row that does not parse."""
    out = []
    for row_id, data in rows:
        try:
            out.append((row_id, _match_row(data)))
        except RowError as err:
            raise InputError(f"{err}.", item=row_id) from None
    return out


def xor_relevant_counts(rows: Sequence[tuple[str, dict[str, Any]]]) -> list[int]:
    """Per row, the number of passages labelled as supporting (its relevant documents)."""
    return [sum(row.labels) for _row_id, row in parse_match_rows(rows)]


def xor_items(rows: Sequence[tuple[str, dict[str, Any]]], *, k: int, seed: int,
              max_doc_words: int | None = None, n_relevant: int = 1) -> list[BiasItem]:
    """Items from XOR-AttriQA-match rows (English view, read by :func:`~mirage.scoring.xor_data.parse_xor_row`;
    InputError naming the row id for a row it rejects) with exactly ``n_relevant`` passages labelled as supporting.

    The supporting passages are the relevant documents; up to ``k - n_relevant`` of the row's other passages (in
    retrieval order) are the non-relevant ones; a row with fewer passages is padded with non-supporting passages of
    other rows (seeded); the relevant documents' positions are drawn at random (seeded per row).
    """
    parsed = parse_match_rows(rows)
    pool: list[tuple[str, str]] = []
    for row_id, row in parsed:
        pool.extend((row_id, p) for p, a in zip(row.passages, row.labels) if not a)
    n_other = k - n_relevant
    items = []
    for row_id, row in parsed:
        passages, ais = row.passages, row.labels
        if sum(ais) != n_relevant:
            continue
        rng = random.Random(f"{seed}:{row_id}")
        relevant = [_doc(p, max_doc_words) for p, a in zip(passages, ais) if a]
        others = [p for p, a in zip(passages, ais) if not a][:n_other]
        if len(others) < n_other:
            seen = set(passages)
            candidates = [p for rid, p in pool if rid != row_id and p not in seen]
            candidates = list(dict.fromkeys(candidates))
            others += rng.sample(candidates, min(n_other - len(others), len(candidates)))
        docs, ids = place_relevant(relevant, [_doc(p, max_doc_words) for p in others], rng)
        items.append(BiasItem(id=row_id, question=row.question, docs=docs, relevant=ids, answers=(row.answer,),
                              source="xor-attriqa"))
    return items


def xor_distractor_pool(rows: Sequence[tuple[str, dict[str, Any]]], max_doc_words: int | None = None,
                        ) -> list[Document]:
    """Every passage no annotator judged supporting, deduplicated: the candidates for RAGE's non-relevant documents."""
    texts: list[str] = []
    for _row_id, row in parse_match_rows(rows):
        texts.extend(p for p, a in zip(row.passages, row.labels) if not a)
    return [_doc(t, max_doc_words) for t in dict.fromkeys(texts)]


# -- BEIR-format folders (queries.jsonl, corpus.jsonl, qrels/<split>.tsv) ---------------------------------------------

@dataclass(frozen=True)
class BeirData:
    """A BEIR dataset: ``corpus[doc id]``, ``queries[query id]``, ``qrels[query id][doc id] = relevance``."""

    corpus: Mapping[str, Document]
    queries: Mapping[str, str]
    qrels: Mapping[str, Mapping[str, int]]


def _jsonl(path: Path) -> Iterable[RawRow]:
    """The rows of a JSONL file of objects (streamed); InputError naming the line of the first that is not one."""
    for row in read_jsonl(path, what="JSONL file"):
        if isinstance(row, BadRow):
            raise InputError(f"{path} line {row.line} is {row.error}; write one JSON object per line.")
        if not isinstance(row.data, dict):
            raise InputError(f"{path} line {row.line} is a JSON {json_kind(row.data)}, not an object; write one JSON "
                             "object per line.")
        yield row


def _beir_rows(path: Path, needed: tuple[str, ...]) -> Iterable[dict[str, Any]]:
    """The rows of a BEIR JSONL file, each checked to carry the ``needed`` fields."""
    for raw in _jsonl(path):
        row = raw.data
        missing = [k for k in needed if row.get(k) is None]
        if missing:
            raise InputError(f"{path} line {raw.line} lacks {missing}; BEIR rows carry {list(needed)}.",
                             field=missing[0])
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
    for n, row in enumerate(csv.reader(text_lines(qrels_path, what="qrels TSV file"), delimiter="\t"), 1):
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
    from mirage.bias.metrics import normalize_answer

    out = {}
    for raw in _jsonl(Path(path)):
        row = raw.data
        if not isinstance(row.get("answers"), list) or ("_id" not in row and "question" not in row):
            raise InputError(f"{path} line {raw.line} needs 'answers' (a list) and '_id' or 'question'.",
                             field="answers")
        out[str(row["_id"]) if "_id" in row else normalize_answer(row["question"])] = [str(a) for a in row["answers"]]
    return out


def read_run(path: str | Path) -> dict[str, list[str]]:
    """A TREC run file (``qid Q0 docid rank score tag``): per query, its documents best first."""
    ranked: dict[str, list[tuple[float, str]]] = {}
    for n, line in enumerate(read_text(path, what="TREC run file").split("\n"), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            ranked.setdefault(parts[0], []).append((float(parts[4]), parts[2]))
        except (IndexError, ValueError):
            raise InputError(f"{path} line {n} is {line!r}; "
                             "a TREC run line is 'qid Q0 docid rank score tag'.") from None
    return {q: [d for _, d in sorted(docs, key=lambda t: -t[0])] for q, docs in ranked.items()}


def beir_relevant_counts(data: BeirData) -> list[int]:
    """Per query, the number of its relevant documents (qrel score > 0) found in the corpus."""
    return [sum(1 for d, score in data.qrels.get(qid, {}).items() if score > 0 and d in data.corpus)
            for qid in data.queries]


def beir_items(data: BeirData, *, k: int, seed: int, answers: Mapping[str, Sequence[str]] | None = None,
               run: Mapping[str, Sequence[str]] | None = None, max_doc_words: int | None = None,
               source: str = "beir", n_relevant: int = 1) -> list[BiasItem]:
    """Items from the queries with exactly ``n_relevant`` relevant documents (qrel score > 0), in qrels order.

    Non-relevant documents: the best-ranked non-relevant ones of ``run`` (a retriever's ranking) when given, else
    drawn at random from the corpus (seeded). ``answers`` maps a query id, or a normalised question, to gold answers
    (BEIR has none; for NQ join them from NQ-open with :func:`load_nq_answers`).
    """
    from mirage.bias.metrics import normalize_answer

    doc_ids = sorted(data.corpus)
    items = []
    for qid, question in data.queries.items():
        positives = [d for d, score in data.qrels.get(qid, {}).items() if score > 0 and d in data.corpus]
        if len(positives) != n_relevant:
            continue
        rng = random.Random(f"{seed}:{qid}")
        judged = set(data.qrels.get(qid, {}))
        n_other = k - n_relevant
        if run is not None and qid in run:
            others = [d for d in run[qid] if d not in judged or data.qrels[qid][d] <= 0][:n_other]
        else:
            others = []
            while len(others) < min(n_other, len(doc_ids) - n_relevant):
                d = doc_ids[rng.randrange(len(doc_ids))]
                if d not in positives and d not in others and data.qrels.get(qid, {}).get(d, 0) <= 0:
                    others.append(d)
        relevant = [_doc(data.corpus[d].text, max_doc_words, data.corpus[d].title) for d in positives]
        docs, ids = place_relevant(relevant, [_doc(data.corpus[d].text, max_doc_words, data.corpus[d].title)
                                              for d in others if d in data.corpus], rng)
        gold: Sequence[str] = ()
        if answers is not None:
            gold = answers.get(qid) or answers.get(normalize_answer(question)) or ()
        items.append(BiasItem(id=qid, question=question, docs=docs, relevant=ids, answers=tuple(gold), source=source))
    return items


def load_nq_answers(split: str = "validation") -> dict[str, list[str]]:  # pragma: no cover - needs the model hub
    """NQ-open gold answers keyed by normalised question, to join with BEIR's NQ queries (from NQ's dev set)."""
    import datasets

    from mirage.bias.metrics import normalize_answer

    rows = datasets.load_dataset("google-research-datasets/nq_open", split=split)
    return {normalize_answer(r["question"]): list(r["answer"]) for r in rows}


# -- MS MARCO (passages with is_selected labels) --------------------------------------------------------------------

def msmarco_items(rows: Iterable[dict[str, Any]], *, k: int, seed: int, max_doc_words: int | None = None,
                  n_relevant: int = 1) -> list[BiasItem]:
    """Items from MS MARCO v2.1 rows (``query``, ``answers``, ``passages: {is_selected, passage_text}``) with exactly
    ``n_relevant`` selected passages and a real answer; the other passages, in their order, are the non-relevant
    ones."""
    items = []
    for n, row in enumerate(rows):
        passages = row["passages"]
        selected, texts = list(passages["is_selected"]), list(passages["passage_text"])
        answers = [a for a in row.get("answers") or [] if a and a != "No Answer Present."]
        if sum(1 for s in selected if s) != n_relevant or not answers:
            continue
        qid = str(row.get("query_id", n))
        rng = random.Random(f"{seed}:{qid}")
        relevant = [_doc(t, max_doc_words) for t, s in zip(texts, selected) if s]
        others = [_doc(t, max_doc_words) for t, s in zip(texts, selected) if not s][: k - n_relevant]
        docs, ids = place_relevant(relevant, others, rng)
        items.append(BiasItem(id=qid, question=row["query"], docs=docs, relevant=ids, answers=tuple(answers),
                              source="msmarco"))
    return items


def load_msmarco(split: str = "validation") -> list[dict[str, Any]]:  # pragma: no cover - needs the model hub
    """MS MARCO v2.1 rows from the hub through ``datasets``."""
    import datasets

    return list(datasets.load_dataset("microsoft/ms_marco", "v2.1", split=split))


# -- prepared items and the dispatcher ---------------------------------------------------------------------------------

def read_bias_items(path: str | Path) -> list[BiasItem]:
    """Items written by :func:`write_items` (one :meth:`BiasItem.to_dict` per line)."""
    return [BiasItem.from_dict(row.data) for row in _jsonl(Path(path))]


def write_items(items: Iterable[BiasItem], path: str | Path) -> None:
    write_atomic(path, "".join(json.dumps(i.to_dict(), ensure_ascii=False) + "\n" for i in items))


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
        first = next((r.data for r in read_rows(path) if isinstance(r, RawRow) and isinstance(r.data, dict)), {})
        if "split_passages_en" in first:
            return "xor"
        if "relevant" in first and "docs" in first:
            return "items"
    raise InputError(f"{spec}: not an XOR-AttriQA file or folder, a BEIR folder (corpus.jsonl, queries.jsonl, "
                     "qrels/), a JSONL of prepared items, nor 'nq' / 'msmarco'.")
