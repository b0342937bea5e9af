"""`mirage tune eval`'s answer store (`evaluate_citations(store=...)`): a ResumableJSONL keyed by each item's id,
question and documents, on the tiny in-memory model with real generation; an earlier mirage's file is converted
once."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from mirage.config import ConfigError
from mirage.pipeline import Mirage
from mirage.runs.store import StoreError
from mirage.tune import evaluate
from mirage.tune.data import build_gold

XOR = Path(__file__).resolve().parents[1] / "data" / "xor_attriqa_match"
TOKENS = 4


@pytest.fixture(scope="module")
def examples():
    found, _ = build_gold([XOR / "train.jsonl", XOR / "val.jsonl"])
    assert len({ex.id for ex in found}) == len(found) == 3
    return found


@pytest.fixture
def generated(monkeypatch):
    """The ids of the examples the real ``generate_answer`` ran for, in order."""
    calls: list[int] = []
    real = evaluate.generate_answer

    def counting(lm, ids, cfg):
        calls.append(len(ids))
        return real(lm, ids, cfg=cfg)

    monkeypatch.setattr(evaluate, "generate_answer", counting)
    return calls


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _old_header(mirage: Mirage, max_new_tokens: int = TOKENS) -> dict:
    cfg = mirage.config.replace(generation={"max_new_tokens": max_new_tokens, "do_sample": False})
    return {"model": mirage.lm.name, "prompt": cfg.to_dict()["prompt"], "max_new_tokens": max_new_tokens,
            "judge": None}


def _without_seconds(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def test_a_rerun_computes_nothing_and_returns_the_same_report(tiny_causal, examples, generated, tmp_path):
    mirage = Mirage(tiny_causal)
    store = tmp_path / "run.answers.jsonl"
    first = evaluate.evaluate_citations(mirage, examples, max_new_tokens=TOKENS, store=store)
    assert len(generated) == 3
    records = _lines(store)
    assert [r["id"] for r in records] == [ex.id for ex in examples]
    assert all(list(r)[:2] == ["key", "settings"] and r["settings"]["max_new_tokens"] == TOKENS for r in records)
    assert not any({"key", "settings"} & set(a) for a in first.answers)   # the report's rows are as before
    assert first.to_dict()["answers"][0].keys() == {"id", "lang", "answer", "cited", "supporting", "citations",
                                                    "n_sentences", "invalid", "exact_match", "n_tokens", "seconds"}
    again = evaluate.evaluate_citations(mirage, examples, max_new_tokens=TOKENS, store=store)
    assert len(generated) == 3                                               # nothing generated again
    assert again.answers == first.answers and again == dataclasses.replace(first, versions=again.versions)
    assert len(_lines(store)) == 3                                           # and nothing appended
    # an item whose documents changed is answered again, the others are reused
    changed = dataclasses.replace(examples[1], docs=[{**d, "text": d["text"] + " More."} for d in examples[1].docs])
    third = evaluate.evaluate_citations(mirage, [examples[0], changed, examples[2]], max_new_tokens=TOKENS, store=store)
    assert len(generated) == 4 and len(_lines(store)) == 4
    assert third.answers[0] == first.answers[0] and third.answers[2] == first.answers[2]


def test_a_torn_last_line_is_repaired_and_its_answer_redone(tiny_causal, examples, generated, tmp_path):
    mirage = Mirage(tiny_causal)
    store = tmp_path / "run.answers.jsonl"
    first = evaluate.evaluate_citations(mirage, examples, max_new_tokens=TOKENS, store=store)
    data = store.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    store.write_bytes(data[: last + (len(data) - last) // 2])               # killed halfway through the last row
    with pytest.warns(UserWarning, match="torn last line"):
        again = evaluate.evaluate_citations(mirage, examples, max_new_tokens=TOKENS, store=store)
    assert len(generated) == 4                                               # only the torn answer was redone
    assert _without_seconds(again.answers) == _without_seconds(first.answers)  # greedy: the same answer
    records = _lines(store)                                                  # every line parses: no torn tail left
    assert [r["id"] for r in records] == [ex.id for ex in examples]
    evaluate.evaluate_citations(mirage, examples, max_new_tokens=TOKENS, store=store)
    assert len(generated) == 4


def test_an_old_format_file_is_converted_once_and_reused(tiny_causal, examples, generated, tmp_path):
    mirage = Mirage(tiny_causal)
    fresh = evaluate.evaluate_citations(mirage, examples, max_new_tokens=TOKENS)
    assert len(generated) == 3
    store = tmp_path / "run.answers.jsonl"
    # as the earlier mirage wrote it: a header, one row per answer by id; killed while writing the third row
    rows = [json.dumps(row, ensure_ascii=False) + "\n" for row in fresh.answers]
    old = (json.dumps({"header": _old_header(mirage)}, ensure_ascii=False) + "\n" + rows[0] + rows[1]
           + rows[2][: len(rows[2]) // 2]).encode("utf-8")
    store.write_bytes(old)
    with pytest.warns(UserWarning, match=r"converted 2 stored answer\(s\).*run\.answers\.v0\.jsonl.*1 damaged line"):
        report = evaluate.evaluate_citations(mirage, examples, max_new_tokens=TOKENS, store=store)
    assert len(generated) == 4                                    # the two stored answers were reused
    assert report.answers[:2] == fresh.answers[:2]
    assert _without_seconds(report.answers) == _without_seconds(fresh.answers)
    assert (tmp_path / "run.answers.v0.jsonl").read_bytes() == old            # the original, kept as it was
    assert not (tmp_path / "run.answers.jsonl.converting").exists()
    records = _lines(store)
    assert [r["id"] for r in records] == [ex.id for ex in examples] and all("key" in r for r in records)
    # converted once: a later run reads the new file, warns nothing and computes nothing
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = evaluate.evaluate_citations(mirage, examples, max_new_tokens=TOKENS, store=store)
    assert len(generated) == 4 and again.answers == report.answers


def test_an_existing_backup_is_never_overwritten(tiny_causal, examples, generated, tmp_path):
    mirage = Mirage(tiny_causal)
    store = tmp_path / "run.answers.jsonl"
    old = (json.dumps({"header": _old_header(mirage)}) + "\n").encode("utf-8")
    store.write_bytes(old)
    taken = tmp_path / "run.answers.v0.jsonl"
    taken.write_text("someone's notes\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"run\.answers\.v0-2\.jsonl"):
        evaluate.evaluate_citations(mirage, examples[:1], max_new_tokens=TOKENS, store=store)
    assert taken.read_text(encoding="utf-8") == "someone's notes\n"
    assert (tmp_path / "run.answers.v0-2.jsonl").read_bytes() == old
    assert len(generated) == 1 and len(_lines(store)) == 1


def test_an_old_format_file_of_another_evaluation_is_refused_untouched(tiny_causal, examples, generated, tmp_path):
    mirage = Mirage(tiny_causal)
    store = tmp_path / "run.answers.jsonl"
    old = (json.dumps({"header": _old_header(mirage, max_new_tokens=48)}) + "\n"
           + json.dumps({"id": examples[0].id, "answer": "x"}) + "\n").encode("utf-8")
    store.write_bytes(old)
    with pytest.raises(ConfigError, match=r"run\.answers\.jsonl holds answers of another evaluation "
                                          r"\(max_new_tokens: 48 in the file, 4 now\).*delete it"):
        evaluate.evaluate_citations(mirage, examples, max_new_tokens=TOKENS, store=store)
    assert store.read_bytes() == old and sorted(p.name for p in tmp_path.iterdir()) == ["run.answers.jsonl"]
    assert generated == []


def test_a_store_made_with_other_settings_is_refused(tiny_causal, examples, generated, tmp_path):
    mirage = Mirage(tiny_causal)
    store = tmp_path / "run.answers.jsonl"
    evaluate.evaluate_citations(mirage, examples[:1], max_new_tokens=TOKENS, store=store)
    before = store.read_bytes()
    with pytest.raises(StoreError, match=r"run\.answers\.jsonl holds results made with other settings .*"
                                         r"max_new_tokens: 4 in the file, 5 now"):
        evaluate.evaluate_citations(mirage, examples, max_new_tokens=TOKENS + 1, store=store)
    assert store.read_bytes() == before and len(generated) == 1
