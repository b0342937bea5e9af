"""Results as pandas tables: :func:`read_results` turns a ``mirage attribute`` results file into one tidy frame.

    df = mirage.read_results("out/attributed.jsonl")
    df[df.mirage_citations.str.len() == 0]          # sentences mirage finds no document behind

One result's table is :meth:`mirage.attribution.results.AttributionResult.to_dataframe`; the results themselves, as
objects, :func:`mirage.views.report.read_result_objects`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mirage.views.report import read_result_objects

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["read_results"]

#: The columns before the document scores, in order.
COLUMNS = ("item", "sentence", "text", "start", "end", "mirage_citations", "self_citations", "invalid_self_citations")


def read_results(path: str | Path) -> pd.DataFrame:
    """One row per (item, sentence) of a results file: ``item`` (the item's id, or its 0-based position in the file
    when it has none), ``sentence`` (its index in the answer), ``text``, ``start``, ``end`` (its span in the answer),
    ``mirage_citations``, ``self_citations``, ``invalid_self_citations`` (lists of 1-based document ids) and
    ``doc_1`` … ``doc_N``: the sentence's document scores (``SentenceAttribution.doc_scores``), N the most documents
    of any item, NaN beyond an item's own documents or in results written before scores existed.

    The file is read as ``mirage view`` reads it (:func:`mirage.views.report.read_result_objects`): a torn last line is
    skipped with a warning, any other bad line is an InputError naming the file and line.
    """
    import pandas as pd

    frames = []
    n_docs = 0
    for position, res in enumerate(read_result_objects(path)):
        frame = res.to_dataframe()
        frame.insert(0, "item", res.id if res.id is not None else position)
        n_docs = max(n_docs, len(res.docs))
        if len(frame):
            frames.append(frame)
    columns = [*COLUMNS, *(f"doc_{d + 1}" for d in range(n_docs))]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True).reindex(columns=columns)
