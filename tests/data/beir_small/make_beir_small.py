"""Rebuild tests/data/beir_small/ from the project's shared XOR-AttriQA-match ``val.jsonl`` (see README.md here).

    python tests/data/beir_small/make_beir_small.py SHARED/data/xor_attriqa_match/val.jsonl

Queries: the first ten rows (file order) with exactly one passage labelled as supporting, an English query and answer,
and ``prediction_correct`` true. Corpus: the English passages of those rows, then those of the following rows of the
file (every row, whatever its labels), deduplicated by text, until the corpus holds 80 passages. Each query's
supporting passage has qrel 1, its row's other passages 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mirage.scoring.xor_attriqa import clean_query

N_QUERIES, N_DOCS = 10, 80
HERE = Path(__file__).parent


def main(source: Path) -> None:
    rows = [(n, json.loads(line)) for n, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1)]
    stem = source.stem
    chosen = [(n, r) for n, r in rows if sum(bool(a) for a in r["ais"]) == 1 and r.get("query_en")
              and r.get("prediction_en") and r.get("prediction_correct")][:N_QUERIES]
    last = chosen[-1][0]
    corpus: dict[str, str] = {}  # doc id -> text
    qrels: list[tuple[str, str, int]] = []

    def add(n: int, row: dict) -> list[str]:
        ids = []
        for i, text in enumerate(row["split_passages_en"]):
            text = text.strip()
            known = next((d for d, t in corpus.items() if t == text), None)
            if known is None and len(corpus) < N_DOCS:
                known = f"{stem}-{n}-p{i}"
                corpus[known] = text
            ids.append(known)
        return ids

    for n, row in chosen:
        for doc_id, label in zip(add(n, row), row["ais"]):
            qrels.append((f"{stem}-{n}", doc_id, int(bool(label))))
    for n, row in rows:
        if n > last and len(corpus) < N_DOCS:
            add(n, row)
    (HERE / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t}, ensure_ascii=False)
                                               + "\n" for d, t in corpus.items()), encoding="utf-8")
    (HERE / "queries.jsonl").write_text("".join(json.dumps({"_id": f"{stem}-{n}", "text": clean_query(r["query_en"])},
                                                           ensure_ascii=False) + "\n" for n, r in chosen),
                                        encoding="utf-8")
    (HERE / "answers.jsonl").write_text("".join(json.dumps({"_id": f"{stem}-{n}", "answers": [r["prediction_en"]]},
                                                           ensure_ascii=False) + "\n" for n, r in chosen),
                                        encoding="utf-8")
    (HERE / "qrels").mkdir(exist_ok=True)
    (HERE / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                             + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
