"""The bias study's other item sources: BEIR-format folders (with gold answers and a TREC run), MS MARCO rows, and
the DATA-argument dispatcher, with their errors on malformed files.

The hub loaders (``BeIR/nq``, ``microsoft/ms_marco``) cannot run here (no dataset hub), so the folders and rows below
are small hand-written stand-ins in those formats: BEIR's ``corpus.jsonl`` / ``queries.jsonl`` / ``qrels/test.tsv``
and MS MARCO v2.1's ``passages: {is_selected, passage_text}`` rows. No language model runs here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mirage.bias.items import (
    beir_items,
    detect_format,
    msmarco_items,
    read_answers,
    read_beir,
    read_run,
)
from mirage.bias.protocol import BiasConfig
from mirage.bias.study import build_items
from mirage.data.inputs import InputError

CORPUS = {
    "d1": ("Eiffel Tower", "The Eiffel Tower was completed in 1889 for the World's Fair."),
    "d2": ("Louvre", "The Louvre is the world's most-visited museum."),
    "d3": ("Seine", "The Seine flows through Paris to the English Channel."),
    "d4": ("Notre-Dame", "Notre-Dame cathedral was damaged by fire in 2019."),
    "d5": ("Montmartre", "Montmartre is a hill in the north of Paris."),
    "d6": ("Big Ben", "Big Ben's tower was completed in 1859."),
}
QUERIES = {"q1": "When was the Eiffel Tower completed?", "q2": "When was Big Ben completed?",
           "q3": "What is in Paris?"}
# q1: one relevant document (d1) and a judged non-relevant one (d6); q2: one relevant (d6);
# q3: two relevant documents, so it is not a study item.
QRELS = [("q1", "d1", 1), ("q1", "d6", 0), ("q2", "d6", 2), ("q3", "d2", 1), ("q3", "d5", 1)]


def write_beir(folder: Path, *, answers: bool = True, run: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": t, "text": x}) + "\n"
                                                 for k, (t, x) in CORPUS.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": q}) + "\n" for k, q in QUERIES.items()))
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                               + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in QRELS))
    if answers:
        (folder / "answers.jsonl").write_text(json.dumps({"_id": "q1", "answers": ["1889"]}) + "\n"
                                              + json.dumps({"question": "When was Big Ben completed?",
                                                            "answers": ["1859"]}) + "\n")
    if run:  # a retriever ranking: d6 (judged non-relevant) first, then d3, d2, d1 (relevant), d4
        (folder / "run.trec").write_text("q1 Q0 d4 5 0.1 bm25\nq1 Q0 d6 1 9.0 bm25\nq1 Q0 d3 2 8.0 bm25\n"
                                         "q1 Q0 d2 3 7.5 bm25\nq1 Q0 d1 4 7.0 bm25\n")
    return folder


def test_read_beir_skips_the_header_and_keeps_scores(tmp_path):
    data = read_beir(write_beir(tmp_path / "beir"))
    assert set(data.corpus) == set(CORPUS) and data.corpus["d1"].title == "Eiffel Tower"
    assert data.queries["q2"] == "When was Big Ben completed?"
    assert data.qrels == {"q1": {"d1": 1, "d6": 0}, "q2": {"d6": 2}, "q3": {"d2": 1, "d5": 1}}


def test_beir_items_take_single_positive_queries_with_run_negatives_and_answers(tmp_path):
    folder = write_beir(tmp_path / "beir")
    data = read_beir(folder)
    items = beir_items(data, k=4, seed=0, answers=read_answers(folder / "answers.jsonl"),
                       run=read_run(folder / "run.trec"))
    by_id = {i.id: i for i in items}
    assert set(by_id) == {"q1", "q2"}  # q3 has two relevant documents
    q1 = by_id["q1"]
    assert len(q1.docs) == 4 and len(q1.relevant) == 1
    assert q1.docs[q1.relevant[0] - 1].text == CORPUS["d1"][1]
    # non-relevant: the run's best-ranked non-relevant documents, in rank order (d6 is judged 0, so it counts)
    others = [d.text for n, d in enumerate(q1.docs, 1) if n not in q1.relevant]
    assert others == [CORPUS["d6"][1], CORPUS["d3"][1], CORPUS["d2"][1]]
    assert q1.answers == ("1889",)
    assert by_id["q2"].answers == ("1859",)  # joined by the normalised question
    # q2 has no run: random non-relevant documents from the corpus, seeded, never its positive
    q2 = by_id["q2"]
    assert all(d.text != CORPUS["d6"][1] for n, d in enumerate(q2.docs, 1) if n not in q2.relevant)
    assert beir_items(data, k=4, seed=0, run=read_run(folder / "run.trec"))[1].docs == q2.docs
    positions = {beir_items(data, k=4, seed=s)[0].relevant for s in range(12)}
    assert len(positions) > 1  # the relevant document's position is drawn, not fixed


def test_build_items_reads_a_beir_folder_end_to_end(tmp_path):
    folder = write_beir(tmp_path / "beir")
    assert detect_format(str(folder)) == "beir"
    items = build_items(str(folder), BiasConfig(k=3, seed=1))
    assert [i.id for i in items] == ["q1", "q2"] and all(len(i.docs) == 3 for i in items)
    assert items[0].source == "beir" and items[0].answers == ("1889",)
    assert build_items(str(folder), BiasConfig(k=3, seed=1), limit=1) == items[:1]


@pytest.mark.parametrize(("path", "content", "needle"), [
    ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\n", "line 2"),
    ("qrels/test.tsv", "q1\td1\tyes\n", "line 1"),
    ("corpus.jsonl", '{"_id": "d1", "title": "t"}\n', "lacks ['text']"),
    ("corpus.jsonl", '\n{"_id": "d1", "text": "t"}\n["d2", "t"]\n', "line 3 is a JSON list, not an object"),
    ("queries.jsonl", '{"_id": "q1", "text": "ok"}\n{not json\n', "line 2 is not valid JSON (Expecting property name"),
    ("answers.jsonl", '\n{"_id": "q1", "answers": "1889"}\n', "line 2 needs 'answers'"),
    ("run.trec", "q1 Q0 d1 1\n", "line 1"),
])
def test_malformed_beir_files_name_the_file_and_line(tmp_path, path, content, needle):
    folder = write_beir(tmp_path / "beir")
    (folder / path).write_text(content)
    with pytest.raises(InputError, match=re.escape(needle)) as err:
        build_items(str(folder), BiasConfig(k=3))
    assert path.split("/")[-1] in str(err.value)


def test_missing_beir_file_says_what_a_folder_holds(tmp_path):
    folder = write_beir(tmp_path / "beir")
    (folder / "qrels" / "test.tsv").unlink()
    with pytest.raises(InputError, match=r"qrels/test.tsv"):
        read_beir(folder)


def msmarco_row(qid: int, selected: list[int], answers: list[str]) -> dict:
    return {"query_id": qid, "query": f"question {qid}", "answers": answers,
            "passages": {"is_selected": selected, "passage_text": [f"passage {qid}.{i}" for i in range(len(selected))]}}


def test_msmarco_items_keep_one_selected_passage_with_a_real_answer():
    rows = [msmarco_row(1, [0, 1, 0, 0, 0, 0], ["yes"]),
            msmarco_row(2, [1, 1, 0], ["two selected"]),
            msmarco_row(3, [0, 0, 1], ["No Answer Present."]),
            msmarco_row(4, [0, 0, 0], ["none selected"])]
    items = msmarco_items(rows, k=4, seed=0)
    assert [i.id for i in items] == ["1"]
    item = items[0]
    assert len(item.docs) == 4 and item.answers == ("yes",) and item.source == "msmarco"
    assert item.docs[item.relevant[0] - 1].text == "passage 1.1"
    assert [d.text for n, d in enumerate(item.docs, 1) if n not in item.relevant] == [
        "passage 1.0", "passage 1.2", "passage 1.3"]  # the others in their order, cut to k - 1


def test_detect_format_names_every_kind(tmp_path):
    assert detect_format("nq") == "nq" and detect_format("msmarco") == "msmarco"
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "a", "question": "q", "docs": [{"text": "t"}], "relevant": [1]}) + "\n")
    assert detect_format(str(items)) == "items"
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(InputError, match="BEIR folder"):
        detect_format(str(other))
