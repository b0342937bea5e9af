"""The recipes that turn upstream files into the files mirage reads (:data:`RECIPES`, named by
:class:`mirage.data.registry.Output.build`). Each is a pure function of its input files' bytes, so the result of a
download and of an import from a local copy are the same bytes, pinned by SHA-256 in the registry.

- ``copy``: the file unchanged;
- ``json-indent1``: a JSON file rewritten with one-space indents, non-ASCII kept (ALCE's prompt file, as the project's
  data folder holds it);
- ``xor-match-join``: the match release's rows (``pos-<split>.jsonl``) with ``query_en`` and ``prediction_en``, the
  English query and answer of the row's first passage in the per-passage release (``idxs[0]``), stripped;
- ``eli5-items``: the ALCE fields (question, question_ctx, answer, claims, docs) of the items of a MIRAGE authors'
  ELI5 run;
- ``beir-small``: the retriever study's BEIR folder built from the match release's ``val`` split (the rule of
  ``tests/data/beir_small/README.md``);
- ``concat``: the input files one after the other, byte for byte (JSONL files of several parts as one file, so that
  its rows are numbered as one file's: ``<stem>-<line>``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from mirage.data.readers import BadRow, parse_json, read_jsonl, read_text
from mirage.data.registry import DataError

__all__ = ["RECIPES", "build_output"]

Recipe = Callable[[Sequence[Path], str], bytes]


def _lines(path: Path) -> list[dict]:
    rows = []
    for row in read_jsonl(path):
        if isinstance(row, BadRow):
            raise DataError(f"{row}; fetch the file again (mirage data get).")
        rows.append(row.data)
    return rows


def _jsonl_bytes(rows: Sequence[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def _copy(inputs: Sequence[Path], name: str) -> bytes:
    return inputs[0].read_bytes()


def _json_indent1(inputs: Sequence[Path], name: str) -> bytes:
    return json.dumps(parse_json(read_text(inputs[0])), indent=1, ensure_ascii=False).encode("utf-8")


def _xor_match_join(inputs: Sequence[Path], name: str) -> bytes:
    match, per_passage = _lines(inputs[0]), _lines(inputs[1])
    rows = []
    for n, row in enumerate(match, 1):
        first = row["idxs"][0]
        if first >= len(per_passage):
            raise DataError(f"{inputs[0].name} line {n}: idxs[0] = {first} is past the end of {inputs[1].name} "
                            f"({len(per_passage)} rows); the two files are not of the same split.")
        source = per_passage[first]
        rows.append({**row, "query_en": source["query_translated_en"].strip(),
                     "prediction_en": source["prediction_translated_en"].strip()})
    return _jsonl_bytes(rows)


def _eli5_items(inputs: Sequence[Path], name: str) -> bytes:
    keep = ("question", "question_ctx", "answer", "claims", "docs")
    data = parse_json(read_text(inputs[0]))["data"]
    return json.dumps([{k: item[k] for k in keep} for item in data], indent=1, ensure_ascii=False).encode("utf-8")


#: tests/data/beir_small/README.md: ten queries, a corpus of at most 80 passages.
_BEIR_QUERIES, _BEIR_DOCS = 10, 80


def _beir_small(inputs: Sequence[Path], name: str) -> bytes:
    from mirage.scoring.xor_data import clean_query

    source = inputs[0]
    stem = source.name.split(".")[0]
    rows = list(enumerate(_lines(source), 1))
    chosen = [(n, r) for n, r in rows if sum(bool(a) for a in r["ais"]) == 1 and r.get("query_en")
              and r.get("prediction_en") and r.get("prediction_correct")][:_BEIR_QUERIES]
    corpus: dict[str, str] = {}  # doc id -> text
    qrels: list[tuple[str, str, int]] = []

    def add(n: int, row: dict) -> list[str | None]:
        ids = []
        for i, text in enumerate(row["split_passages_en"]):
            text = text.strip()
            known = next((d for d, t in corpus.items() if t == text), None)
            if known is None and len(corpus) < _BEIR_DOCS:
                known = f"{stem}-{n}-p{i}"
                corpus[known] = text
            ids.append(known)
        return ids

    for n, row in chosen:
        for doc_id, label in zip(add(n, row), row["ais"]):
            qrels.append((f"{stem}-{n}", str(doc_id), int(bool(label))))
    last = chosen[-1][0] if chosen else 0
    for n, row in rows:
        if n > last and len(corpus) < _BEIR_DOCS:
            add(n, row)
    files = {
        "corpus.jsonl": _jsonl_bytes([{"_id": d, "title": "", "text": t} for d, t in corpus.items()]),
        "queries.jsonl": _jsonl_bytes([{"_id": f"{stem}-{n}", "text": clean_query(r["query_en"])} for n, r in chosen]),
        "answers.jsonl": _jsonl_bytes([{"_id": f"{stem}-{n}", "answers": [r["prediction_en"]]} for n, r in chosen]),
        "test.tsv": ("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)).encode(),
    }
    return files[name]


def _concat(inputs: Sequence[Path], name: str) -> bytes:
    parts = [p.read_bytes() for p in inputs]
    for path, data in zip(inputs, parts):
        if data and not data.endswith(b"\n"):
            raise DataError(f"{path.name} does not end with a line break, so its last row would run into the next "
                            "file's first; fetch the file again (mirage data get).")
    return b"".join(parts)


RECIPES: dict[str, Recipe] = {"copy": _copy, "json-indent1": _json_indent1, "xor-match-join": _xor_match_join,
                              "eli5-items": _eli5_items, "beir-small": _beir_small, "concat": _concat}


def build_output(recipe: str, inputs: Sequence[Path], name: str) -> bytes:
    """The bytes of the output file ``name`` built by ``recipe`` from ``inputs``; DataError naming the input that
    does not have the expected form."""
    try:
        return RECIPES[recipe](inputs, name)
    except (KeyError, IndexError, TypeError, ValueError) as err:
        if isinstance(err, DataError):
            raise
        raise DataError(f"cannot build {name} from {', '.join(p.name for p in inputs)}: {type(err).__name__}: "
                        f"{err}; are these the source's files?") from None
