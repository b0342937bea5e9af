"""Rebuild tests/data/beir_small/ from the project's shared XOR-AttriQA-match ``val.jsonl`` (see README.md here).

    python tests/data/beir_small/make_beir_small.py SHARED/data/xor_attriqa_match/val.jsonl

Queries: the first ten rows (file order) with exactly one passage labelled as supporting, an English query and answer,
and ``prediction_correct`` true. Corpus: the English passages of those rows, then those of the following rows of the
file (every row, whatever its labels), deduplicated by text, until the corpus holds 80 passages. Each query's
supporting passage has qrel 1, its row's other passages 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mirage.data.build import build_output

HERE = Path(__file__).parent
#: Each file of the folder, by the name the ``beir-small`` recipe of :mod:`mirage.data.build` gives it.
FILES = {"corpus.jsonl": "corpus.jsonl", "queries.jsonl": "queries.jsonl", "answers.jsonl": "answers.jsonl",
         "test.tsv": "qrels/test.tsv"}


def main(source: Path) -> None:
    """Write the folder's files with the package's recipe (``mirage data get beir-small`` builds the same bytes)."""
    for name, rel in FILES.items():
        (HERE / rel).parent.mkdir(exist_ok=True)
        (HERE / rel).write_bytes(build_output("beir-small", [source], name))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
