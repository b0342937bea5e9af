"""XOR-AttriQA's per-passage predictions (``DIR/pairs.jsonl``) and the model's own match subset (``--self-match``,
the paper's Algorithm 1), end to end on the embedded smollm2 model and the data slices in tests/data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirage import cli
from mirage.attribution.citations import parse_answer
from mirage.data.fetch import data_label
from mirage.scoring import metrics as M
from mirage.scoring.xor_attriqa import same_answer
from mirage.scoring.xor_data import load_xor_attriqa
from mirage.scoring.xor_eval import SCORE_ONLY

pytestmark = pytest.mark.slow

DATA = Path(__file__).parents[1] / "data"
XOR_VAL = DATA / "xor_attriqa_match" / "val.jsonl"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def pairs_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pairs")
    args = ["score", "xor-attriqa", str(XOR_VAL), "--calibrate-on", str(XOR_VAL), "--limit", "2", "-o", str(out),
            "--quiet"]
    assert cli.main(args) == 0
    return out, args


def test_pairs_jsonl_has_one_line_per_passage_with_every_setting(pairs_run):
    out, _ = pairs_run
    res = json.loads((out / "results.json").read_text())
    pairs = _lines(out / "pairs.jsonl")
    items = load_xor_attriqa(XOR_VAL, limit=2).items
    assert len(pairs) == res["counts"]["all"]["pairs"] == sum(len(i.labels) for i in items)
    expected = [(i.key, i.question, d, label) for i in items for d, label in enumerate(i.labels)]
    assert [(p["key"], p["query"], p["passage"], p["label"]) for p in pairs] == expected
    stored = {r["key"] for r in _lines(out / "scores.jsonl") if "cti" in r}
    assert {p["key"] for p in pairs} == stored
    names = set().union(*(res[m] for m in ("agreement", "roc_auc")))
    for p in pairs:
        assert set(p["settings"]) <= names
        assert {"ex_top3", "ex_top5pct", "cal_top3", "cal_top5pct", "learned", "cite_all"} <= set(p["settings"])
        for name, value in p["settings"].items():
            assert set(value) == {"score", "cited"} and isinstance(value["score"], float)
            assert value["cited"] is None if name in SCORE_ONLY else isinstance(value["cited"], bool)


def test_pairs_reproduce_the_reported_measures(pairs_run):
    """Every binary setting's agreement and F1 per language, recomputed from pairs.jsonl alone, are results.json's."""
    out, _ = pairs_run
    res = json.loads((out / "results.json").read_text())
    lang = {i.key: i.lang for i in load_xor_attriqa(XOR_VAL, limit=2).items}
    pairs = _lines(out / "pairs.jsonl")
    checked = 0
    for setting, per_lang in res["agreement"].items():
        if setting in SCORE_ONLY:
            continue
        for language in (k for k in per_lang if k != "avg"):
            rows = [p for p in pairs if lang[p["key"]] == language and setting in p["settings"]]
            counts = M.BinaryCounts.of([p["settings"][setting]["cited"] for p in rows], [p["label"] for p in rows])
            assert M.agreement(counts) == pytest.approx(per_lang[language])
            assert M.BINARY_METRICS["f1"](counts) == pytest.approx(res["f1"][setting][language])
            checked += 1
    assert checked >= 8


def test_pairs_jsonl_is_rewritten_whole_on_resume(pairs_run, monkeypatch):
    out, args = pairs_run
    before = (out / "pairs.jsonl").read_text()
    (out / "pairs.jsonl").write_text("stale\n")
    from mirage.pipeline import Mirage

    monkeypatch.setattr(Mirage, "from_pretrained", classmethod(lambda *a, **k: pytest.fail("model loaded")))
    assert cli.main(args) == 0
    assert (out / "pairs.jsonl").read_text() == before
    assert not list(out.glob(".pairs.jsonl.*"))  # no temporary file left behind


# -- the model's own match subset -------------------------------------------------------------------------------------


def test_same_answer_is_the_authors_exact_comparison():
    assert same_answer(" 200\n", "200") and same_answer("yes", "yes")
    assert not same_answer("Yes", "yes")  # no case folding
    assert not same_answer("200.", "200") and not same_answer("yes, it is", "yes")


def test_self_match_keeps_the_rows_the_model_reproduces(tmp_path, capsys):
    """On a real generation: the embedded model does not reproduce the annotated 'yes' (nothing kept: a one-line
    error naming the counts, every generation on disk); a row whose annotation is that very generation is kept, and
    the model's own generation is what gets attributed."""
    out = tmp_path / "first"
    assert cli.main(["score", "xor-attriqa", str(XOR_VAL), "--limit", "1", "--self-match", "--settings", "ex",
                     "-o", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "self-match kept 0 of the 1 test row(s)" in err and "matches.jsonl" in err
    (record,) = _lines(out / "matches.jsonl")
    row = json.loads(XOR_VAL.read_text().splitlines()[0])
    assert record["annotated"] == row["prediction_en"] == "yes"
    assert (record["file"], record["line"]) == (XOR_VAL.name, 1)  # the file's name, no folder of this machine
    assert record["generated"] and record["kept"] is same_answer(record["generated"], record["annotated"]) is False
    assert not (out / "results.json").exists()
    counts = json.loads((out / "self_match.json").read_text())
    assert counts["test"]["all"] == {"rows": 1, "kept": 0} and counts["calibration"] is None
    assert counts["model"] == "smollm2-135m-instruct" and counts["generation"]["do_sample"] is False
    assert counts["data"] == [data_label(XOR_VAL)] and counts["calibrate_on"] is None and counts["text"] == "en"
    page = (out / "README.md").read_text()  # the folder still gets its page, from self_match.json
    assert "# Self-match check: smollm2-135m-instruct" in page and "| test | all | 1 | 0 | 0.0 |" in page
    assert "--self-match" in json.loads((out / "provenance.json").read_text())["command"]
    assert "## Command" in page and "--self-match" in page.split("## Command", 1)[1]

    own = tmp_path / "own.jsonl"
    own.write_text(json.dumps({**row, "prediction_en": record["generated"]}) + "\n")
    second = tmp_path / "second"
    assert cli.main(["score", "xor-attriqa", str(own), "--self-match", "--settings", "ex", "-o", str(second),
                     "--quiet"]) == 0
    (kept,) = _lines(second / "matches.jsonl")
    assert kept["kept"] is True and kept["generated"] == record["generated"]  # greedy: the same generation
    res = json.loads((second / "results.json").read_text())
    assert res["settings"]["self_match"]["test"] == {row["query_language"]: {"rows": 1, "kept": 1},
                                                     "all": {"rows": 1, "kept": 1}}
    (item,) = [r for r in _lines(second / "scores.jsonl") if "cti" in r]
    # the generation is attributed as every XOR-AttriQA answer is: its [n] marks stripped
    assert "".join(item["tokens"]).strip() == parse_answer(record["generated"], len(row["ais"])).text.strip()
    assert len(_lines(second / "pairs.jsonl")) == len(row["ais"])
