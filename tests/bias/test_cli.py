"""``mirage bias`` on the embedded model over XOR-AttriQA-derived items, in every mode: outputs, labels in the prompts,
resuming after a killed run, and the explainer on a custom label pair. Kept small (two items, three documents of at
most 25 words, 8 new tokens) so that it runs in a couple of minutes on a CPU."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mirage.bias.protocol import BIAS_CONFIG_DIR
from mirage.bias.results import BiasStudyResult
from mirage.cli import main

ROWS = Path(__file__).parents[1] / "data" / "xor_bias_rows.jsonl"
SMALL = ["--ndocs", "3", "--max-doc-words", "25", "--max-new-tokens", "8", "--limit", "2", "--quiet"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    """Every test here runs the real model with one torch thread (conftest's ``one_thread``)."""


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("bias")
    assert main(["bias", str(ROWS), "-o", str(out), *SMALL]) == 0
    return out


def test_every_mode_is_run_and_written(study):
    records = _lines(study / "generations.jsonl")
    items = _lines(study / "items.jsonl")
    assert len(items) == 2 and len(records) == 8
    assert {(r["item_id"], r["mode"]) for r in records} == {
        (it["id"], m) for it in items for m in ("vanilla", "informed", "counterfactual", "mixed")}
    expected = {"vanilla": (None, None), "informed": ("Human", "LLM"), "counterfactual": ("LLM", "Human"),
                "mixed": ("Human", "Human")}
    for r in records:
        rel = r["relevant"][0]
        assert r["n_docs"] == 3 and len(r["labels"]) == 3
        rel_label, other_label = expected[r["mode"]]
        assert r["labels"][rel - 1] == rel_label
        assert all(lab == other_label for i, lab in enumerate(r["labels"]) if i != rel - 1)
        # the label sits inside the document's own entry of the prompt, and the consideration line with it
        entry = r["prompt"].split(f"Document [{rel}]: ")[1].split("\n")[0]
        if rel_label is None:
            assert "written by" not in r["prompt"]
        else:
            assert entry.rstrip().endswith(f"(written by {rel_label})")
            assert "3. Some documents were written by humans, while others were written by an LLM." in r["prompt"]
        assert len(r["self_citations"]) == len(r["mirage_citations"]) or r["error"]
        for _doc, p in r["self_citation_probs"] + r["mirage_citation_probs"]:
            assert 0 < p <= 1
    assert any(r["mirage_citations"] and any(r["mirage_citations"]) for r in records)


def test_results_tables_and_plot(study):
    result = BiasStudyResult.load(study / "results.json")
    assert result.model == "smollm2-135m-instruct" and result.n_items == 2 and result.omega == 1
    for source in ("self", "mirage"):
        summary = result.sources[source]
        assert list(summary.modes) == ["vanilla", "informed", "counterfactual", "mixed"]
        assert set(summary.cas) == {"informed", "counterfactual", "mixed"}
        assert summary.cab is not None and summary.cab.n == 2
        for mode in summary.modes.values():
            assert 0 <= mode.precision <= 1 and 0 <= mode.recall <= 1 and mode.n == 2
    tables = (study / "tables.md").read_text()
    assert "## Self-citation" in tables and "## MIRAGE" in tables and "### Attribution bias (CAB)" in tables
    # does each citation set follow the relevant document: the vanilla answers, one per question
    assert result.follow is not None and result.follow.k == 3 and result.follow.n_answers == 2
    assert "## Does the citation follow the relevant document?" in tables
    assert (study / "cab.png").stat().st_size > 1000
    assert len(list((study / "prompts").glob("*.yaml"))) == 2  # vanilla and informed templates


def test_resume_after_a_killed_run(study, tmp_path):
    out = tmp_path / "resumed"
    shutil.copytree(study, out)
    before = _lines(study / "generations.jsonl")
    # a re-run with nothing left to do generates nothing and gives the same results
    assert main(["bias", str(ROWS), "-o", str(out), *SMALL]) == 0
    assert _lines(out / "generations.jsonl") == before
    # a run killed mid-write: seven finished lines and a torn eighth
    text = (study / "generations.jsonl").read_text().splitlines()
    (out / "generations.jsonl").write_text("\n".join(text[:7]) + "\n" + text[7][:40])
    assert main(["bias", str(ROWS), "-o", str(out), *SMALL]) == 0
    after = _lines(out / "generations.jsonl")
    assert after[:7] == before[:7] and len(after) == 8
    same = ("key", "labels", "raw_answer", "self_citations", "mirage_citations", "prompt")
    assert {k: after[7][k] for k in same} == {k: before[7][k] for k in same}  # greedy: the same generation again
    assert [p for _, p in after[7]["self_citation_probs"]] == pytest.approx(
        [p for _, p in before[7]["self_citation_probs"]], abs=1e-4)
    resumed, first = BiasStudyResult.load(out / "results.json"), BiasStudyResult.load(study / "results.json")
    for source in ("self", "mirage"):
        assert resumed.sources[source].cab.precision.value == pytest.approx(first.sources[source].cab.precision.value)


def test_reuse_copies_the_generations_another_study_shares(study, tmp_path, monkeypatch):
    """``--reuse DIR``: a gender study of the same model and configuration takes its vanilla generations (no labels,
    so the same prompts) from the hai study's folder and generates only its labelled modes; a study whose
    configuration differs finds nothing to take."""
    from mirage.bias.runner import BiasStudy

    generated = []
    real = BiasStudy.generate

    def counting(self, planned):
        generated.append((planned.item.id, planned.mode))
        return real(self, planned)

    monkeypatch.setattr(BiasStudy, "generate", counting)
    out = tmp_path / "gender"
    assert main(["bias", str(ROWS), "-o", str(out), *SMALL, "--metadata", "gender", "--modes", "vanilla",
                 "informed", "--reuse-from", str(study)]) == 0
    assert sorted(mode for _id, mode in generated) == ["informed", "informed"]
    hai = {r["key"]: r for r in _lines(study / "generations.jsonl")}
    records = _lines(out / "generations.jsonl")
    vanilla = [r for r in records if r["mode"] == "vanilla"]
    assert len(records) == 4 and len(vanilla) == 2 and all(r == hai[r["key"]] for r in vanilla)
    assert all(r["labels"][r["relevant"][0] - 1] in ("a man", "a woman") for r in records if r["mode"] == "informed")
    generated.clear()  # another configuration: other keys, so every generation runs
    assert main(["bias", str(ROWS), "-o", str(tmp_path / "other"), *SMALL[:-3], "--limit", "1", "--quiet",
                 "--max-new-tokens", "6", "--modes", "vanilla", "--reuse-from", str(study)]) == 0
    assert generated == [("xor_bias_rows-1", "vanilla")]
    assert main(["bias", str(ROWS), "-o", str(tmp_path / "x"), *SMALL, "--reuse-from", str(tmp_path / "nothing")]) == 2


def test_custom_labels_relevant_side_and_explainer(tmp_path):
    prompts = tmp_path / "prompts"
    shutil.copytree(BIAS_CONFIG_DIR, prompts)
    (prompts / "explainer.yaml").write_text("question: Why did you cite these documents?\nmax_new_tokens: 6\n")
    out = tmp_path / "custom"
    argv = ["bias", str(ROWS), "-o", str(out), "--metadata", "custom", "--labels", "Expert,Scholar", "Novice",
            "--relevant-side", "second", "--modes", "informed", "--explain", "--prompts-dir", str(prompts), *SMALL]
    argv[argv.index("--limit") + 1] = "1"
    assert main(argv) == 0
    (record,) = _lines(out / "generations.jsonl")
    rel = record["relevant"][0]
    assert record["labels"][rel - 1] == "Novice"
    assert all(lab in ("Expert", "Scholar") for i, lab in enumerate(record["labels"]) if i != rel - 1)
    assert "written by Expert, while others were written by Novice" in record["prompt"]
    assert isinstance(record["explanation"], str) and record["explanation"]
    result = BiasStudyResult.load(out / "results.json")
    assert result.omega == -1 and result.metadata["first"] == "Expert" and result.sources["self"].cab is None
    # the explanation is analysed into results.json and tables.md, with the custom labels as metadata cues, and the
    # run folder gives the same analysis again without generating
    from mirage.bias.explanations import analyse_record, analyse_run, label_words, metadata_cues
    from mirage.bias.records import BiasRecord

    analysis = result.explanations
    assert analysis is not None and analysis.n_records == 1 and list(analysis.modes) == ["informed"]
    assert analysis.label_words == ["Expert", "Scholar", "Novice"] == label_words(result.metadata)
    (row,) = analysis.rows
    assert row.key == record["key"] and row.mode == "informed"
    assert row == analyse_record(BiasRecord.from_dict(record), metadata_cues(analysis.label_words))
    assert set(row.claimed) <= set(range(1, 4)) and analysis.overall.categories[row.category] == 1
    assert analyse_run(out).to_dict() == analysis.to_dict()
    tables = (out / "tables.md").read_text()
    assert "## Explanations" in tables and "| informed | 1 |" in tables and "`Expert`, `Scholar`, `Novice`" in tables


def test_bad_arguments_fail_cleanly(tmp_path, capsys):
    assert main(["bias", str(ROWS), "-o", str(tmp_path), "--metadata", "custom", *SMALL]) == 2
    assert "needs labels" in capsys.readouterr().err
    assert main(["bias", str(ROWS), "-o", str(tmp_path), "--prompt", "standard", *SMALL]) == 2


def test_sentence_marks_of_the_model_a_study_runs(tmp_path, capsys):
    """``--sentence-mark trained`` writes the shipped follower's mark (`` [n]`` after each sentence, as in the prompt
    it was tuned in) into every document of both modes, the labels still inside each entry; the results record
    the mark itself and the page's command gives it back."""
    out = tmp_path / "marked"
    argv = ["bias", str(ROWS), "-o", str(out), "--model", "smollm2-135m-cite-follow", "--sentence-mark", "trained",
            "--modes", "vanilla", "informed", *SMALL]
    argv[argv.index("--limit") + 1] = "1"
    assert main(argv) == 0
    records = _lines(out / "generations.jsonl")
    assert {r["mode"] for r in records} == {"vanilla", "informed"}
    for r in records:
        for doc in range(1, r["n_docs"] + 1):
            entry = r["prompt"].split(f"Document [{doc}]: ")[1].split("\nDocument [")[0].split("\n\n")[0]
            assert entry.count(f" [{doc}]") >= 1 and f" [{doc % 3 + 1}]" not in entry
        if r["mode"] == "informed":
            rel = r["relevant"][0]
            entry = r["prompt"].split(f"Document [{rel}]: ")[1].split("\n")[0]
            assert "(written by Human)" in entry
    result = BiasStudyResult.load(out / "results.json")
    assert result.config["sentence_mark"] == " [{ID}]"
    assert "each sentence followed by `[{ID}]`" in (out / "tables.md").read_text()
    # the run's page gives the command back, mark included: as it was typed (provenance.json), or rebuilt from the
    # results, with the mark itself, where a folder has no provenance
    assert main(["report", str(out)]) == 0
    assert "--sentence-mark trained" in (out / "README.md").read_text()
    (out / "provenance.json").unlink()
    assert main(["report", str(out)]) == 0
    assert "--sentence-mark ' [{ID}]'" in (out / "README.md").read_text()
    # a model tuned without marks has no mark to take, and a mark must name the document
    capsys.readouterr()
    assert main(["bias", str(ROWS), "-o", str(tmp_path / "base"), "--sentence-mark", "trained", *SMALL]) == 2
    assert "bias.sentence_mark='trained': smollm2-135m-instruct was not tuned" in capsys.readouterr().err
    assert main(["bias", str(ROWS), "-o", str(tmp_path / "bad"), "--sentence-mark", " [n]", *SMALL]) == 2
    assert "bias.sentence_mark=' [n]' must contain {ID}" in capsys.readouterr().err


@pytest.mark.parametrize("broken", ["missing folder", "missing file", "bad template"])
def test_a_broken_prompts_dir_is_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch, broken):
    """The study's prompt files (--prompts-dir) are read before the model loads and before anything is written to
    the run folder: one line naming the field and the file, not an error after the model loaded."""
    import mirage.pipeline

    def refuse(*_args, **_kwargs):
        raise AssertionError("the model was loaded although the study's prompts were never readable")

    for name in ("load_model", "load_adapter"):
        monkeypatch.setattr(mirage.pipeline, name, refuse)
    prompts = tmp_path / "prompts"
    if broken != "missing folder":
        shutil.copytree(BIAS_CONFIG_DIR, prompts)
        if broken == "missing file":
            (prompts / "metadata.yaml").unlink()
        else:
            (prompts / "vanilla.yaml").write_text("name: vanilla\n")
    out = tmp_path / "run"
    assert main(["bias", str(ROWS), "-o", str(out), "--prompts-dir", str(prompts), *SMALL]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bias.prompts_dir" in err and str(prompts) in err
    assert not out.exists()
