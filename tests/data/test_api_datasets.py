"""``mirage.attribute_dataset``: a Hugging Face Dataset in, the same rows with their attribution as columns out, on the
real embedded model."""

from __future__ import annotations

import pytest

from mirage import Mirage, attribute_dataset
from mirage.attribution.results import AttributionResult
from mirage.data.inputs import InputError

datasets = pytest.importorskip("datasets")

EIFFEL = "The Eiffel Tower in Paris was completed in 1889 for the World's Fair."
MOON = "The Moon is Earth's only natural satellite."


def _dataset():
    """Two rows: one to generate for, one with a given answer; documents as a Sequence feature (columns)."""
    value = datasets.Value("string")
    features = datasets.Features({"id": value, "question": value, "output": value,
                                  "docs": datasets.Sequence({"title": value, "text": value})})
    return datasets.Dataset.from_dict({
        "id": ["eiffel", "moon"],
        "question": ["When was the Eiffel Tower completed?", "What is the Moon?"],
        "output": [None, "The Moon is Earth's only natural satellite [2]."],
        "docs": [{"title": ["Eiffel Tower", "Moon"], "text": [EIFFEL, MOON]},
                 {"title": ["Eiffel Tower", ""], "text": [EIFFEL, MOON]}],
    }, features=features)


@pytest.fixture(scope="module")
def attributed(smollm2):
    return attribute_dataset(_dataset(), Mirage(smollm2), max_new_tokens=12)


def test_attribution_columns_beside_the_rows(attributed):
    assert attributed.column_names == ["id", "question", "output", "docs", "answer", "sentences", "mirage_citations",
                                       "self_citations", "mirage_result"]
    assert attributed.features["mirage_citations"] == datasets.Sequence(datasets.Sequence(datasets.Value("int64")))
    for row in attributed:
        res = AttributionResult.from_json(row["mirage_result"])
        assert res.id == row["id"] and res.answer == row["answer"] and res.config["generation"]["max_new_tokens"] == 12
        assert row["sentences"] == [s.text for s in res.sentences] and row["sentences"]
        assert row["mirage_citations"] == [s.mirage_citations for s in res.sentences]
        assert row["self_citations"] == [s.self_citations for s in res.sentences]
        assert all(1 <= d <= 2 for cited in row["mirage_citations"] for d in cited)
    eiffel, moon = attributed
    assert eiffel["answer"] and AttributionResult.from_json(eiffel["mirage_result"]).generated
    # the given answer is force-decoded, its own [2] kept as the self-citation, and MIRAGE cites the Moon document
    assert moon["answer"] == "The Moon is Earth's only natural satellite."
    assert moon["self_citations"] == [[2]] and 2 in moon["mirage_citations"][0]


def test_an_existing_column_needs_a_prefix(smollm2):
    ds = _dataset().add_column("answer", ["gold 1", "gold 2"])
    with pytest.raises(ValueError, match=r"already has column\(s\) \['answer'\]; attribute_dataset\(\.\.\., prefix="):
        attribute_dataset(ds, Mirage(smollm2))


def test_a_bad_row_fails_before_any_row_is_attributed(smollm2, monkeypatch):
    m = Mirage(smollm2)
    monkeypatch.setattr(m, "attribute_item", lambda *a, **k: pytest.fail("attributed before checking every row"))
    ds = datasets.Dataset.from_list([{"question": "q", "ctxs": ["a document"]}, {"question": "q", "ctxs": []}])
    with pytest.raises(InputError, match=r"^item 1, field 'ctxs': is empty"):
        attribute_dataset(ds, m, prefix="mirage_")
