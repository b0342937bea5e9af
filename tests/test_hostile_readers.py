"""Hostile inputs to mirage's readers, parsers and reports (issue 39): a value nested 1,200 levels deep, a 40 MB
document, a JSON list whose recovery used to be quadratic, a YAML alias bomb, hand-edited result records, and run
folders whose figures or text point outside the folder or to the network. Each gives a one-line error naming where,
or is handled, never a traceback; the rest of a batch runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from mirage.cli import main
from mirage.inputs import MAX_JSON_DEPTH, BadRow, InputError, RawRow, parse_json, read_items, read_rows

GOOD = {"question": "When was the Ikhwan party formed?",
        "docs": [{"title": "Ikhwan", "text": "The Ikhwan was formed in 1913."}], "output": "In 1913."}
DEEP = "[" * 1200 + "]" * 1200  # 1,200 levels: past Python's recursion limit


def _deep_item(n: int = 1200) -> str:
    """An item whose ignored field ``extra`` nests ``n`` levels deep (as JSON text: it cannot be built as a dict and
    dumped, which recurses too)."""
    good = json.dumps(GOOD)
    return good[:-1] + ', "extra": ' + "[" * n + "]" * n + "}"


@pytest.fixture(scope="module")
def deep_run(tmp_path_factory) -> tuple[Path, int, str]:
    """`mirage attribute` (the embedded model, forced answers) on two items, the first with a field nested 1,200
    levels deep: the folder, the exit status and what it printed on stderr."""
    folder = tmp_path_factory.mktemp("run")
    (folder / "in.jsonl").write_text(_deep_item() + "\n" + json.dumps({**GOOD, "id": "ok"}) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        done = subprocess.run([sys.executable, "-m", "mirage", "attribute", str(folder / "in.jsonl"), "-o",
                               str(folder / "out.jsonl"), "--quiet", "--keep-saliency"], check=False,
                              capture_output=True, text=True, timeout=600)
    return folder, done.returncode, done.stderr


@pytest.fixture(scope="module")
def result_line(deep_run) -> str:
    """One result record as `mirage attribute` writes it."""
    return (deep_run[0] / "out.jsonl").read_text().splitlines()[0]


# -- 1. a value nested 1,200 levels deep ------------------------------------------------------------------------------

def test_parse_json_refuses_deep_values_as_broken_json():
    with pytest.raises(json.JSONDecodeError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        parse_json(DEEP)
    with pytest.raises(ValueError, match="nested deeper"):
        parse_json(DEEP.encode())
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json(ok) is not None
    assert parse_json('["[[[[", {"a": "]]]"}]') == ["[[[[", {"a": "]]]"}], "brackets inside strings are text"


@pytest.mark.parametrize("layout", ["jsonl", "list", "pretty list"])
def test_a_too_deep_row_is_one_bad_row_naming_its_line(tmp_path, layout):
    good = json.dumps(GOOD)
    rows = [good, _deep_item(), good]
    path = tmp_path / ("items.jsonl" if layout == "jsonl" else "items.json")
    path.write_text("\n".join(rows) + "\n" if layout == "jsonl" else
                    "[" + ", ".join(rows) + "]" if layout == "list" else "[\n" + ",\n".join(rows) + "\n]\n")
    read = list(read_rows(path))
    assert [type(r).__name__ for r in read] == ["RawRow", "BadRow", "RawRow"]
    assert all(r.data == GOOD for r in read if isinstance(r, RawRow))
    bad = read[1]
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in bad.error and "\n" not in bad.error
    assert bad.line == {"jsonl": 2, "list": 1, "pretty list": 3}[layout]
    items = list(read_items(path))
    assert [i for i, _ in items] == [0, 1, 2] and isinstance(items[1][1], InputError)


def test_a_whole_file_object_nested_too_deep_is_an_input_error(tmp_path):
    path = tmp_path / "one.json"
    path.write_text('{\n  "question": "q",\n  "x": ' + DEEP + "\n}\n")
    with pytest.raises(InputError, match="nested deeper than"):
        list(read_rows(path))


def test_attribute_runs_the_rest_of_a_batch_with_a_too_deep_item(deep_run):
    """The reported case, through `mirage attribute` on the embedded model: the deep item is one error record with
    its line, the other item is attributed."""
    folder, status, stderr = deep_run
    assert status == 3, stderr[-3000:]  # 3: an item was skipped
    assert [json.loads(line)["id"] for line in (folder / "out.jsonl").read_text().splitlines()] == ["ok"]
    errors = [json.loads(line) for line in (folder / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert len(errors) == 1
    assert f"{folder / 'in.jsonl'}:1: not valid JSON (nested deeper than {MAX_JSON_DEPTH} levels" in errors[0]["error"]
    assert "Traceback" not in stderr


def test_resume_and_view_survive_a_too_deep_line_in_the_output(tmp_path, capsys, result_line):
    from mirage.runs import ResumableJSONL, read_records

    out = tmp_path / "out.jsonl"
    key = json.loads(result_line)["key"]
    out.write_text(result_line + "\n" + '{"key": "1:def", "x": ' + DEEP + "}\n")
    assert [r["key"] for r in read_records(out)] == [key]
    with pytest.warns(UserWarning, match=r"skipped damaged line\(s\) \[2\]"):
        store = ResumableJSONL(out)
    try:
        assert key in store.done
    finally:
        store.close()
    assert main(["view", str(out), "-o", str(tmp_path / "page.html")]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "nested deeper than" in err and "Traceback" not in err


# -- 2. a 40 MB document ----------------------------------------------------------------------------------------------

def test_a_huge_document_is_cut_by_characters_before_it_is_tokenized(real_tokenizer, monkeypatch):
    """No text longer than what the window can hold reaches the tokenizer, and the cut is the one the whole
    document gets (a document well past the bound is cut to the same text as one just over it)."""
    from mirage.config import PromptConfig
    from mirage.inputs import Document
    from mirage.prompts import Reservation, build_prompt, load_template
    from mirage.tokenization import max_token_chars

    template = load_template(PromptConfig(name="selfcitation"))
    budget = Reservation(window=1024, tokens=100, field="generation.max_new_tokens")
    unit = "The Ikhwan was formed in 1913 by Abdulaziz. "
    seen: list[int] = []
    original = type(real_tokenizer).__call__

    def spy(self, text, *args, **kwargs):
        seen.append(len(text) if isinstance(text, str) else sum(map(len, text)))
        return original(self, text, *args, **kwargs)

    def build(text):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return build_prompt(template, "When?", (Document("Big", text), Document("Small", "Paris.")),
                                tokenizer=real_tokenizer, use_chat_template=True, reservation=budget, item=0)

    bound = (budget.max_prompt_tokens + 64) * max_token_chars(real_tokenizer)
    huge = unit * (40_000_000 // len(unit))  # 40 MB
    monkeypatch.setattr(type(real_tokenizer), "__call__", spy)
    built = build(huge)
    assert max(seen) < bound + 2_000, "the tokenizer saw more text than the window can hold"
    monkeypatch.undo()
    just_over = build(unit * (bound // len(unit) + 50))
    assert built.text == just_over.text and built.truncated_docs == just_over.truncated_docs == (1,)


def test_a_huge_document_takes_memory_bounded_by_the_window_not_the_document(tmp_path):
    """Peak memory (the process's high-water mark, ``ru_maxrss``: the tokenizer allocates outside Python, where
    tracemalloc cannot see) grows by less than the document's own size when a 40 MB document is prepared; tokenized
    whole it took about 150 bytes per character (6 GB)."""
    script = textwrap.dedent("""
        import resource, warnings
        from transformers import AutoTokenizer
        from mirage.config import PromptConfig
        from mirage.inputs import Document
        from mirage.models import embedded_checkpoint
        from mirage.prompts import Reservation, build_prompt, load_template
        tok = AutoTokenizer.from_pretrained(embedded_checkpoint("smollm2-135m-instruct"))
        template = load_template(PromptConfig(name="selfcitation"))
        small = Document("Small", "Paris is the capital of France. " * 100)
        build = lambda docs: build_prompt(template, "When?", docs, tokenizer=tok, use_chat_template=True,
                                          reservation=Reservation(window=2048, tokens=100), item=0)
        warnings.simplefilter("ignore")
        build((small,))
        big = Document("Big", "The Ikhwan was formed in 1913 by Abdulaziz. " * 900_000)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        built = build((big, small))
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(len(big.text), (after - before) * 1024, built.truncated_docs)
    """)
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    size, grown, truncated = done.stdout.split(maxsplit=2)
    print(f"document {int(size) / 1e6:.1f} MB, peak memory grew {int(grown) / 1e6:.1f} MB")
    assert int(grown) < int(size) and truncated.strip() == "(1,)"


# -- 3. the JSON-list recovery parser ---------------------------------------------------------------------------------

def _count_decodes(monkeypatch) -> list[int]:
    calls = [0]
    original = json.JSONDecoder.raw_decode

    def counting(self, s, idx=0):
        calls[0] += 1
        return original(self, s, idx)

    monkeypatch.setattr(json.JSONDecoder, "raw_decode", counting)
    return calls


def _broken_list(n_values: int, n_items: int) -> str:
    """Broken elements holding long nested lists (each comma in them a place where recovery may try a next
    element), among good items."""
    broken = '{"question": x, "vals": [' + ", ".join(["1"] * n_values) + '], "more": {"a": [1, 2], "b": 3}}'
    good = json.dumps(GOOD)
    return "[" + ",\n".join([broken, good] * n_items) + "]"


def test_list_recovery_decodes_each_position_a_bounded_number_of_times(tmp_path, monkeypatch):
    calls = _count_decodes(monkeypatch)
    counts = {}
    for n_values in (2_000, 8_000):
        path = tmp_path / f"items{n_values}.json"
        text = _broken_list(n_values, 20)
        path.write_text(text)
        calls[0] = 0
        rows = list(read_rows(path))
        assert [isinstance(r, RawRow) for r in rows] == [False, True] * 20
        counts[n_values] = calls[0]
        assert calls[0] <= 2 * text.count(",") + 4 * len(rows), "more than two decodes per comma"
    print(f"decoder calls: {counts}")
    assert counts[8_000] <= 4.5 * counts[2_000], "work grows faster than the file"


def test_a_megabyte_list_with_broken_elements_parses_in_linear_work(tmp_path, monkeypatch):
    calls = _count_decodes(monkeypatch)
    text = _broken_list(40_000, 8)  # about 1 MB
    path = tmp_path / "big.json"
    path.write_text(text)
    rows = list(read_rows(path))
    assert len(text) > 800_000 and sum(isinstance(r, BadRow) for r in rows) == 8
    print(f"{len(text)} characters, {text.count(',')} commas, {calls[0]} decoder calls")
    assert calls[0] <= 2 * text.count(",") + 100
