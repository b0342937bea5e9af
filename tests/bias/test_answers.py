"""``mirage bias --write-requests`` / ``--answers``: the study on answers generated elsewhere (pattrieval's standalone
evaluation). The requests are written without a model; the "external" answers are written here by hand, as an API
model's would be, so the expected self-citation metrics are known; with ``--model`` the embedded model also attributes
them. Kept small (two XOR-AttriQA-derived items, three documents)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mirage.bias.answers import read_external_answers
from mirage.bias.protocol import BiasConfig
from mirage.bias.results import BiasStudyResult
from mirage.cli import main
from mirage.data.inputs import InputError

ROWS = Path(__file__).parents[1] / "data" / "xor_bias_rows.jsonl"
OPTS = ["--ndocs", "3", "--max-doc-words", "25", "--limit", "2", "--quiet", "--modes", "vanilla", "informed",
        "counterfactual"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def requests(tmp_path_factory):
    out = tmp_path_factory.mktemp("requests")
    assert main(["bias", str(ROWS), "-o", str(out), "--write-requests", *OPTS]) == 0
    return out


def test_requests_carry_the_labelled_prompt_of_every_item_and_mode(requests, tmp_path):
    reqs = _lines(requests / "requests.jsonl")
    assert len(reqs) == 6 and {r["mode"] for r in reqs} == {"vanilla", "informed", "counterfactual"}
    for r in reqs:
        assert r["messages"] == [{"role": "user", "content": r["user"]}]
        rel = r["relevant"][0]
        if r["mode"] == "vanilla":
            assert r["labels"] == [None] * 3 and "Human" not in r["user"]
        else:
            assert r["labels"][rel - 1] == ("Human" if r["mode"] == "informed" else "LLM")
            assert r["user"].count("Human") >= 1 and r["user"].count("LLM") >= 1
    # keys depend on what the prompt shows only: written again, the same keys
    again = tmp_path / "again"
    assert main(["bias", str(ROWS), "-o", str(again), "--write-requests", *OPTS]) == 0
    assert [r["key"] for r in _lines(again / "requests.jsonl")] == [r["key"] for r in reqs]
    assert not (requests / "generations.jsonl").exists()


def _answers(requests: Path, path: Path) -> Path:
    """An external model that cites the relevant document when it is labelled Human (informed) and a non-relevant
    one otherwise, with a confidence for each mark."""
    rows = []
    for r in _lines(requests / "requests.jsonl"):
        rel = r["relevant"][0]
        other = 1 if rel != 1 else 2
        doc = rel if r["mode"] == "informed" else other
        rows.append({"key": r["key"], "answer": f"It was founded in 1912 [{doc}].",
                     "citation_probs": [[doc, 0.9 if doc == rel else 0.4]]})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_answers_are_evaluated_without_a_local_model(requests, tmp_path):
    answers = _answers(requests, tmp_path / "gpt.jsonl")
    out = tmp_path / "eval"
    assert main(["bias", str(ROWS), "-o", str(out), "--answers", str(answers), *OPTS]) == 0
    result = BiasStudyResult.load(out / "results.json")
    assert list(result.sources) == ["self"] and result.model == "gpt" and result.n_items == 2
    modes = result.self_citation.modes
    assert modes["informed"].precision == 1.0 and modes["informed"].recall == 1.0
    assert modes["vanilla"].precision == 0.0 and modes["counterfactual"].recall == 0.0
    assert modes["informed"].ac_relevant == pytest.approx(0.9) and modes["counterfactual"].ac_nonrelevant == 0.4
    assert result.self_citation.cab.precision.value == pytest.approx(1.0)  # all toward Human
    assert result.self_citation.cas["informed"].precision.value == pytest.approx(1.0)
    assert result.self_citation.cas["counterfactual"].precision.value == 0.0
    md = (out / "tables.md").read_text()
    assert "## Self-citation" in md and "## MIRAGE" not in md
    records = _lines(out / "generations.jsonl")
    assert all(r["self_citations"] and r["mirage_citations"] == [[]] for r in records)


def test_the_local_model_attributes_the_external_answers(requests, tmp_path):
    answers = _answers(requests, tmp_path / "gpt.jsonl")
    out = tmp_path / "eval"
    argv = ["bias", str(ROWS), "-o", str(out), "--answers", str(answers), "--model", "smollm2-135m-instruct",
            "--answers-name", "gpt-4", *OPTS]
    assert main(argv) == 0
    result = BiasStudyResult.load(out / "results.json")
    assert list(result.sources) == ["self", "mirage"] and result.model == "gpt-4"
    records = _lines(out / "generations.jsonl")
    assert len(records) == 6 and all(r["error"] is None for r in records)
    assert any(c for r in records for c in r["mirage_citations"])  # mirage cites what the model used
    # the self-citations are the external answers', whatever mirage says
    assert result.self_citation.modes["informed"].precision == 1.0
    mtime = (out / "generations.jsonl").stat().st_mtime_ns
    assert main(argv) == 0  # resumed: nothing attributed again
    assert (out / "generations.jsonl").stat().st_mtime_ns == mtime


def test_bad_answer_files_name_the_line_and_the_fix(requests, tmp_path):
    from mirage.bias.answers import BiasRequest

    reqs = [BiasRequest.from_dict({k: v for k, v in r.items() if k != "messages"})
            for r in _lines(requests / "requests.jsonl")]
    key = reqs[0].key
    cases = {
        "not json\n": "not a JSON object",
        json.dumps({"key": key}) + "\n": '"key" (from requests.jsonl) and "answer"',
        json.dumps({"key": "q:vanilla:0", "answer": "x"}) + "\n": "not one of this study's requests",
        (json.dumps({"key": key, "answer": "a"}) + "\n") * 2: "already answered on line 1",
        json.dumps({"key": key, "answer": "a", "citation_probs": [[1]]}) + "\n": "citation_probs",
    }
    for text, message in cases.items():
        path = tmp_path / "bad.jsonl"
        path.write_text(text)
        with pytest.raises(InputError, match=re.escape(message)):
            read_external_answers(path, reqs)
    with pytest.raises(InputError, match="no such file"):
        read_external_answers(tmp_path / "missing.jsonl", reqs)
    # a study with other options has other keys: every answer is refused, with the fix
    answers = _answers(requests, tmp_path / "gpt.jsonl")
    assert main(["bias", str(ROWS), "-o", str(tmp_path / "other"), "--answers", str(answers), "--seed", "7",
                 *OPTS]) != 0
    assert BiasConfig().modes  # the default config is untouched
