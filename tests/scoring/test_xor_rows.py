"""One reading of an XOR-AttriQA row, :func:`mirage.scoring.xor_data.parse_xor_row`, for the scorer and the bias
study (before, the scorer's ``parse_row`` and the study's ``_xor_passages`` each parsed the rows, with two regexes for
the same stray mark).

The keys and questions pinned here were computed with the two parsers, before they became one, on the rows copied in
``tests/data`` (their source lines are in ``tests/data/README.md`` and ``tests/data/README-xor_bias_rows.md``): the
scorer's items keep their keys (so its stored scores stay valid and its results identical), the study's items their
questions, passages and labels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirage.bias.items import load_xor_rows, xor_distractor_pool, xor_items
from mirage.data.inputs import InputError
from mirage.scoring.rows import RowError
from mirage.scoring.xor_data import clean_query, load_xor_attriqa, parse_xor_row

DATA = Path(__file__).parents[1] / "data"
MATCH_FILES = [DATA / "xor_attriqa_match" / "val.jsonl", DATA / "xor_attriqa_match" / "train.jsonl",
               DATA / "xor_bias_rows.jsonl"]

#: The scorer's item keys (a hash of question, passages and answer) per file and text view, before the change.
SCORER_KEYS = {
    ("xor_attriqa_match/val.jsonl", "en"): ["ebaf5e72befa0fac", "18f616c8fa26b47e", "d434dd4b7bc75570",
                                            "3d500d62afe5679f"],
    ("xor_attriqa_match/val.jsonl", "native"): ["55cb70571543fac2", "123ec886b829c7f8", "7a4c1d577a7ddd51",
                                                "af0dc6fb021e5258"],
    ("xor_attriqa_match/train.jsonl", "en"): ["38a044a90b2f41ce", "521305971cbb81b0", "6495717491826b66",
                                              "4af73698fb92325f"],
    ("xor_attriqa_match/train.jsonl", "native"): ["31452d7b86b08543", "3fa208b3a9c165ff", "2fb2a5ccdc71bd59",
                                                  "03c1dfdeb8c65762"],
    ("xor_bias_rows.jsonl", "en"): ["a7ca7682c6238229", "c84bc8bcc31aa2eb", "4f1a01bb291ba619", "99fdaa0312eead03"],
    ("xor_bias_rows.jsonl", "native"): ["d52a9e3d1c8688b5", "dffbfb8caa587ce4", "af11b0b8f8c906c8",
                                        "b17a3f9b697ae247"],
    ("xor_attriqa_full/val.jsonl", "en"): ["b42f29756812efdf", "7e2e51b1c3ea9383", "742eb13f6901c835"],
    ("xor_attriqa_full/val.jsonl", "native"): ["3dc292f6d1483d36", "062d6f653ef75917", "7e01d95051c1a8d9"],
}


@pytest.mark.parametrize("name, text", sorted(SCORER_KEYS))
def test_the_scorer_reads_the_rows_as_before(name, text):
    data = load_xor_attriqa(DATA / name, text=text)
    assert not data.bad_rows
    assert [item.key for item in data.items] == SCORER_KEYS[name, text]


def test_the_bias_study_reads_the_rows_as_before():
    rows, bad = load_xor_rows(DATA / "xor_bias_rows.jsonl")
    assert not bad
    items = xor_items(rows, k=5, seed=3)
    assert [(it.id, it.question) for it in items] == [
        ("xor_bias_rows-1", "When was the Ikhwan party formed?"),
        ("xor_bias_rows-3", "How many sub-divisions are there in North Twenty Four Parganas district of West Bengal?"),
        ("xor_bias_rows-4", "What is the population of Korpilahti?"),  # its query ends in a cut-short " ["
    ]


def _agree(path: Path) -> int:
    """Check that the scorer and the study read the same passages, labels and answer from each row of ``path``, and
    the same question but for a cut-short stray mark; the number of rows checked."""
    raws = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    scored = load_xor_attriqa(path, text="en").items
    rows, bad = load_xor_rows(path)
    assert not bad and len(scored) == len(rows) == len(raws)
    pool = {d.text for d in xor_distractor_pool(rows)}
    for raw, item, (_row_id, data) in zip(raws, scored, rows):
        study = parse_xor_row(data)  # what the study reads (xor_items, xor_distractor_pool)
        assert data == raw
        assert item.passages == study.passages == tuple(raw["split_passages_en"])
        assert item.labels == study.labels == tuple(raw["ais"])
        assert item.answer == study.answer == raw["prediction_en"]
        assert item.question == clean_query(raw["query_en"], cut_marks=False)
        assert study.question == clean_query(raw["query_en"])
        assert item.question in (study.question, study.question + " [")
        assert {p for p, a in zip(study.passages, study.labels) if not a} <= pool
    return len(rows)


@pytest.mark.parametrize("path", MATCH_FILES, ids=lambda p: p.name)
def test_scorer_and_study_read_the_copied_rows_alike(path):
    assert _agree(path) == 4


def test_scorer_and_study_read_every_shared_row_alike(data_dir):
    from mirage.data import resolve

    assert sum(_agree(resolve(f"xor-attriqa-match:{split}")) for split in ("train", "val", "fi", "ru")) == 332


def test_the_stray_mark_rule():
    for query in ("When? [b]", "When?  [b] ", "When?[b]"):
        assert clean_query(query) == clean_query(query, cut_marks=False) == "When?"
    assert clean_query("When was burlesque invented? [") == "When was burlesque invented?"
    assert clean_query("When was burlesque invented? [", cut_marks=False) == "When was burlesque invented? ["
    assert clean_query("Is [b] a mark? ") == "Is [b] a mark?"  # only at the end
    assert clean_query("[b]") == ""


def test_rows_either_reader_rejects():
    good = json.loads((DATA / "xor_bias_rows.jsonl").read_text(encoding="utf-8").splitlines()[0])
    with pytest.raises(RowError, match="the query is empty"):
        parse_xor_row({**good, "query_en": " [b]"})
    with pytest.raises(InputError, match=r"^item r1: 'split_passages_en' has 1 passages for 4 'ais' labels\.$"):
        xor_items([("r1", {**good, "split_passages_en": good["split_passages_en"][:1]})], k=3, seed=0)
    per_passage = json.loads((DATA / "xor_attriqa_full" / "val.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert parse_xor_row(per_passage, index=7).per_passage and parse_xor_row(per_passage, index=7).idxs == (7,)
    with pytest.raises(InputError, match="per-passage release"):
        xor_items([("r1", per_passage)], k=3, seed=0)


def _answers(items):
    """Items up to passage order and file positions: (question, answer, sorted (passage, label) pairs)."""
    return sorted((it.question, it.answer, tuple(sorted(zip(it.passages, it.labels)))) for it in items)


@pytest.mark.parametrize("text", ["en", "native"])
def test_grouping_the_per_passage_release_rebuilds_the_match_rows(text):
    """The per-passage rows of one answer, grouped, are the match release's item of that answer: same question,
    answer, passages and labels (the slice holds the passages of the four match rows in tests/data and the two
    passages of one answer outside the match subset). In the native view a passage retrieved in English is read in
    English, as in the match release; the release's passage_in_language is a translation the system never read."""
    full = DATA / "xor_attriqa_full" / "train.jsonl"
    single = load_xor_attriqa(full, text=text)
    grouped = load_xor_attriqa(full, text=text, group=True)
    match = load_xor_attriqa(DATA / "xor_attriqa_match" / "train.jsonl", text=text)
    assert not grouped.bad_rows and len(single.items) == 7 and all(len(it.passages) == 1 for it in single.items)
    assert len(grouped.items) == 5  # the two-passage match row and the two-passage other answer are merged
    in_match = [it for it in grouped.items if (it.question, it.answer) in {(m.question, m.answer) for m in match.items}]
    assert _answers(in_match) == _answers(match.items)
    other = next(it for it in grouped.items if it not in in_match)
    assert len(other.passages) == 2 and other.labels == (True, True) and other.idxs == (3, 4)
    assert [it.line for it in grouped.items] == [1, 3, 4, 6, 7]  # a group takes its first row's place
