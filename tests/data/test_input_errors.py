"""Bad input files give one clear InputError naming the file (and line), or a per-row error, never a traceback:
encodings, paths, pretty-printed objects, broken JSON list elements, lone surrogates, non-string titles (items and
`mirage attribute`); malformed XOR-AttriQA rows in the bias study; malformed NLI prediction files; torn or foreign
lines in the results file `mirage view` reads."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from mirage.bias.items import detect_format, load_xor_rows, read_xor_rows, xor_items
from mirage.cli import main
from mirage.data.inputs import InputError, make_item
from mirage.data.readers import BadRow, RawRow, read_items, read_jsonl, read_rows
from mirage.scoring.xor_data import load_xor_attriqa

DATA = Path(__file__).parents[1] / "data"
XOR_ROWS = DATA / "xor_bias_rows.jsonl"

GOOD = {"question": "When was the Ikhwan party formed?",
        "docs": [{"title": "Ikhwan", "text": "The Ikhwan was formed in 1913."}], "output": "In 1913."}


def _write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _no_model(monkeypatch):
    from mirage.pipeline import Mirage

    def refuse(*_args, **_kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(Mirage, "from_pretrained", refuse)


# -- encodings and paths ----------------------------------------------------------------------------------------------

JSONL = json.dumps(GOOD, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("encoding, data, says", [
    ("latin-1", '{"question": "Caf\u00e9?", "docs": [{"text": "x"}]}\n'.encode("latin-1"), "byte 0xe9 at line 1"),
    ("utf-16 with BOM", JSONL.encode("utf-16"), "looks like UTF-16 (it starts with a UTF-16 byte-order mark)"),
    ("utf-16-le without BOM", JSONL.encode("utf-16-le"), "looks like UTF-16 (every other byte is 0)"),
    ("utf-16-be without BOM", JSONL.encode("utf-16-be"), "looks like UTF-16 (every other byte is 0)"),
])
def test_non_utf8_files_are_named_not_decoded(tmp_path, encoding, data, says):
    path = _write(tmp_path / "items.jsonl", data)
    with pytest.raises(InputError) as err:
        list(read_items(path))
    message = str(err.value)
    assert message.startswith(f"{path} is not UTF-8") and says in message and "Re-save it as UTF-8" in message


def test_a_utf8_bom_is_accepted(tmp_path):
    bom = b"\xef\xbb\xbf"
    jsonl = _write(tmp_path / "bom.jsonl", bom + JSONL.encode())
    listed = _write(tmp_path / "bom.json", bom + json.dumps([GOOD, GOOD], indent=2).encode())
    assert list(read_items(jsonl)) == [(0, GOOD)]
    assert list(read_items(listed)) == [(0, GOOD), (1, GOOD)]


def test_read_text_gunzips_a_gz_name_and_names_one_that_is_not_gzip(tmp_path):
    """One read_text for items and run folders: a .gz name is gunzipped (as run folders ship their stores), its
    text checked as any other; a .gz name over plain bytes is one line naming the file."""
    import gzip

    from mirage.data.readers import read_text

    packed = _write(tmp_path / "rows.jsonl.gz", gzip.compress("\ufeffé\n".encode()))
    assert read_text(packed) == "é\n"
    fake = _write(tmp_path / "plain.jsonl.gz", b"not gzip")
    with pytest.raises(InputError, match=f"^{fake} cannot be read .*a .gz name must hold gzip data") as err:
        read_text(fake)
    assert "\n" not in str(err.value)
    latin = _write(tmp_path / "latin.txt.gz", gzip.compress("é".encode("latin-1")))
    with pytest.raises(InputError, match="is not UTF-8"):
        read_text(latin)


def test_a_directory_or_a_missing_path_is_named(tmp_path):
    with pytest.raises(InputError, match=f"^{tmp_path} is a directory"):
        list(read_items(tmp_path))
    with pytest.raises(InputError, match=f"^{tmp_path / 'nope.json'} does not exist"):
        list(read_items(tmp_path / "nope.json"))


def test_jsonl_lines_split_at_newlines_only(tmp_path):
    """A raw U+2028 inside a JSON string (valid JSON) does not split its line nor shift later line numbers."""
    first = json.dumps({**GOOD, "question": "Line\u2028separated?"}, ensure_ascii=False)
    path = _write(tmp_path / "items.jsonl", first + "\n{broken\n" + json.dumps(GOOD) + "\n")
    rows = list(read_rows(path))
    assert [(type(r).__name__, r.line) for r in rows] == [("RawRow", 1), ("BadRow", 2), ("RawRow", 3)]
    assert rows[0].data["question"] == "Line\u2028separated?"



def test_read_jsonl_is_read_rows_for_jsonl(tmp_path):
    """The one JSONL reader (streamed) gives the rows of read_rows' JSONL branch: line numbers across blank lines and
    every line break JSON allows, errors located on their own line, the unterminated last line marked."""
    text = ('{"a": 1}\r\n\n{"a": 2}\r{"a": 3,\n' + json.dumps({"a": "Line\u2028separated"}, ensure_ascii=False)
            + '\n[1, 2]\n{"a": ')
    path = _write(tmp_path / "rows.jsonl", text)
    rows = list(read_jsonl(path))
    assert rows == list(read_rows(path))
    assert [(type(r).__name__, r.line, getattr(r, "index", None)) for r in rows] == [
        ("RawRow", 1, 0), ("RawRow", 3, 1), ("BadRow", 4, None), ("RawRow", 5, 3), ("RawRow", 6, 4),
        ("BadRow", 7, None)]
    assert rows[2] == BadRow(file=str(path), line=4, error="not valid JSON (Expecting property name enclosed in "
                                                           "double quotes, column 9)")
    assert rows[5] == BadRow(file=str(path), line=7, error="not valid JSON (Expecting value, column 7)",
                             unterminated=True)
    assert rows[3].data == {"a": "Line\u2028separated"} and rows[4].data == [1, 2]
    with pytest.raises(InputError, match=f"^{tmp_path} is a directory"):
        list(read_jsonl(tmp_path))
    _write(path, JSONL.encode("utf-16"))
    with pytest.raises(InputError, match=f"^{path} is not UTF-8: it looks like UTF-16"):
        list(read_jsonl(path))

# -- one pretty-printed object ----------------------------------------------------------------------------------------

def test_a_pretty_printed_object_is_one_item(tmp_path):
    path = _write(tmp_path / "item.json", json.dumps(GOOD, indent=2))
    assert list(read_items(path)) == [(0, GOOD)]
    rows = list(read_rows(path))
    assert rows == [RawRow(index=0, line=1, data=GOOD)]


def test_a_broken_pretty_printed_object_is_one_error_with_its_line(tmp_path):
    text = json.dumps(GOOD, indent=2).replace('"Ikhwan"', "'Ikhwan'")  # line 5
    path = _write(tmp_path / "item.json", text)
    with pytest.raises(InputError, match=rf"^{path} is not valid JSON at line 5 \(Expecting value, column 16\)"):
        list(read_items(path))


# -- broken elements of a JSON list -----------------------------------------------------------------------------------

def _pretty_list(elements: list[str]) -> str:
    return "[\n" + ",\n".join(elements) + "\n]\n"


def test_a_broken_list_element_is_one_error_and_the_others_are_read(tmp_path):
    good = json.dumps(GOOD, indent=2)  # 10 lines per element
    missing_comma = good.replace('"question": "When was the Ikhwan party formed?",',
                                 '"question": "When was the Ikhwan party formed?"')
    assert missing_comma != good
    path = _write(tmp_path / "items.json", _pretty_list([good, missing_comma, good, good]))
    rows = list(read_rows(path))
    assert [(type(r).__name__, r.line) for r in rows] == [("RawRow", 2), ("BadRow", 12), ("RawRow", 22),
                                                          ("RawRow", 32)]
    assert [r.index for r in rows if isinstance(r, RawRow)] == [0, 2, 3]
    assert rows[1].error == ("not valid JSON (Expecting ',' delimiter at line 14, column 3); "
                             "this list element is skipped")
    items = list(read_items(path))
    assert [i for i, _ in items] == [0, 1, 2, 3]
    assert items[0][1] == items[2][1] == items[3][1] == GOOD
    assert isinstance(items[1][1], InputError)
    assert str(items[1][1]) == f"item 1: {path}:12: {rows[1].error}."


def test_list_recovery_keeps_each_broken_element_apart(tmp_path):
    """Consecutive broken elements, an unbalanced bracket, an unterminated string (which upsets any count of
    brackets outside strings) and a broken nested value: each is one error, no good element is lost."""
    good = json.dumps(GOOD)
    unbalanced = good.replace('"docs": [', '"docs": ', 1)
    unterminated = good.replace('"When was the Ikhwan party formed?"', '"When was the Ikhwan party formed?', 1)
    nested = json.dumps({**GOOD, "docs": [{"text": "a, {b}"}, {"text": "c"}, {"text": "d"}]}).replace('"d"', "'d'")
    single_quotes = good.replace('"title"', "'title'")
    elements = [unbalanced, good, single_quotes, unterminated, good, nested, good]
    for sep in (", ", ",\n"):  # one line, and one element per line
        path = _write(tmp_path / "items.json", "[" + sep.join(elements) + "]")
        rows = list(read_rows(path))
        assert [isinstance(r, RawRow) for r in rows] == [False, True, False, False, True, False, True]
        assert all(r.data == GOOD for r in rows if isinstance(r, RawRow))
        assert [r.index for r in rows if isinstance(r, RawRow)] == [1, 4, 6]
        if sep == ",\n":
            assert [r.line for r in rows] == [1, 2, 3, 4, 5, 6, 7]


def test_the_last_element_broken_or_cut_short(tmp_path):
    good = json.dumps(GOOD)
    cut = _write(tmp_path / "cut.json", f'[\n{good},\n{good},\n{{"question": "Wh')
    rows = list(read_rows(cut))
    assert [type(r).__name__ for r in rows] == ["RawRow", "RawRow", "BadRow"]
    assert rows[2].line == 4 and "Unterminated string starting at line 4, column 14" in rows[2].error
    unclosed = _write(tmp_path / "unclosed.json", f"[{good},\n{good}\n")
    rows = list(read_rows(unclosed))
    assert [type(r).__name__ for r in rows] == ["RawRow", "RawRow", "BadRow"]
    assert "ends without its closing ']'" in rows[2].error
    trailing_comma = _write(tmp_path / "trailing.json", f"[{good}, {good},]")
    assert [r.data for r in read_rows(trailing_comma)] == [GOOD, GOOD]


def test_a_list_with_nothing_readable_is_one_error_naming_file_and_line(tmp_path):
    path = _write(tmp_path / "items.json", '[\n  {"question": "q", "docs": [}\n]')
    with pytest.raises(InputError, match=rf"^{path} is not valid JSON at line 2 \(Expecting value, column 30\); "
                                         "nothing in its list could be read"):
        list(read_items(path))


def test_attribute_records_a_broken_list_element_per_item(tmp_path, monkeypatch, capsys):
    """`--limit 1` on a list whose first element is broken: that item goes to the errors file, no model loads."""
    _no_model(monkeypatch)
    good = json.dumps(GOOD, indent=2)
    src = _write(tmp_path / "items.json", _pretty_list([good.replace('"docs":', '"docs"'), good]))
    out = tmp_path / "out.jsonl"
    assert main(["attribute", str(src), "-o", str(out), "--limit", "1"]) == 3
    errors = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert len(errors) == 1 and errors[0]["index"] == 0
    assert errors[0]["error"].startswith(f"item 0: {src}:2: not valid JSON "
                                         "(Expecting ':' delimiter at line 4, column 10)")
    assert "1 invalid; attributing 0" in capsys.readouterr().err


# -- item fields ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, item", [
    ("question", {**GOOD, "question": "Who \ud800 wrote it?"}),
    ("docs[0].text", {**GOOD, "docs": [{"title": "t", "text": "Who \ud800 wrote it?"}]}),
    ("docs[0].title", {**GOOD, "docs": [{"title": "Who \ud800 wrote it?", "text": "x"}]}),
    ("output", {**GOOD, "output": "Who \ud800 wrote it?"}),
    ("id", {**GOOD, "id": "Who \ud800 wrote it?"}),
])
def test_a_lone_surrogate_makes_the_item_invalid_naming_the_field(tmp_path, field, item):
    path = _write(tmp_path / "items.jsonl", json.dumps(item) + "\n")  # the JSON holds the escape "\ud800"
    assert "\\ud800" in path.read_text()
    [(index, raw)] = read_items(path)
    with pytest.raises(InputError) as err:
        make_item(raw, item=index)
    assert str(err.value) == (f"item 0, field {field!r}: contains an unpaired surrogate (\\ud800) at character 4; "
                              "the text is not valid Unicode (remove the \\ud800 escape or give its pair).")


def test_a_surrogate_pair_is_one_character_and_valid(tmp_path):
    path = _write(tmp_path / "items.jsonl", json.dumps({**GOOD, "question": "Why \U0001F600?"}) + "\n")
    assert "\\ud83d\\ude00" in path.read_text()
    [(_, raw)] = read_items(path)
    assert make_item(raw).question == "Why \U0001F600?"


@pytest.mark.parametrize("title", [0, False, [], 5, {}])
def test_a_non_string_title_is_rejected_even_when_falsy(title):
    with pytest.raises(InputError, match=r"^item 2, field 'docs\[0\].title': must be a string, got "):
        make_item({**GOOD, "docs": [{"title": title, "text": "x"}]}, item=2)


@pytest.mark.parametrize("doc", [{"text": "x"}, {"title": None, "text": "x"}, {"title": "", "text": "x"}])
def test_a_missing_or_null_title_is_an_empty_title(doc):
    assert make_item({**GOOD, "docs": [doc]}).docs[0].title == ""


def test_attribute_reports_surrogates_and_falsy_titles_without_loading_the_model(tmp_path, monkeypatch, capsys):
    _no_model(monkeypatch)
    items = [{**GOOD, "question": "Who \ud800?"}, {**GOOD, "docs": [{"title": False, "text": "x"}]}]
    src = _write(tmp_path / "items.json", json.dumps(items))
    out = tmp_path / "out.jsonl"
    assert main(["attribute", str(src), "-o", str(out)]) == 3
    errors = [json.loads(line)["error"] for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert errors[0].startswith("item 0, field 'question': contains an unpaired surrogate (\\ud800) at character 4")
    assert errors[1] == ("item 1, field 'docs[0].title': must be a string, got bool (false); leave it out or give "
                         'null (or "") for no title.')


# -- XOR-AttriQA rows of the bias study -------------------------------------------------------------------------------

def _xor_file_with_bad_rows(tmp_path: Path) -> Path:
    rows = XOR_ROWS.read_text(encoding="utf-8").splitlines()
    lines = [rows[0], '{"query_en": "When?", "ais": [1, 0', rows[1], "[1, 2]",
             json.dumps({**json.loads(rows[0]), "split_passages_en": ["a"]}), rows[2], rows[3]]
    return _write(tmp_path / "rows.jsonl", "\n".join(lines) + "\n")


def test_malformed_xor_rows_are_skipped_and_reported_with_file_and_line(tmp_path):
    path = _xor_file_with_bad_rows(tmp_path)
    assert detect_format(str(path)) == "xor"
    rows, bad = load_xor_rows(path)
    assert [row_id for row_id, _ in rows] == ["rows-1", "rows-3", "rows-6", "rows-7"]  # ids keep their line numbers
    assert [str(b) for b in bad] == [
        f"{path}:2: not valid JSON (Expecting ',' delimiter, column 35)",
        f"{path}:4: row must be a JSON object, got list",
        f"{path}:5: 'split_passages_en' has 1 passages for 4 'ais' labels",
    ]  # the scorer's reading of a row (mirage.scoring.xor_data.parse_xor_row), its messages
    reference = [(f"rows-{n}", row) for n, (_, row) in zip([1, 3, 6, 7], load_xor_rows(XOR_ROWS)[0])]
    assert rows == reference
    assert xor_items(rows, k=5, seed=3) == xor_items(reference, k=5, seed=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read_xor_rows(path) == rows
    assert [str(w.message) for w in caught] == [f"skipped {b}" for b in bad]
    assert all(w.filename == __file__ for w in caught)  # attributed to the caller


def test_the_bias_study_builds_its_items_past_malformed_rows(tmp_path, capsys):
    """What `mirage bias` runs before loading a model: the bad rows are skipped, each printed to stderr, not raised."""
    from mirage.bias.protocol import BiasConfig
    from mirage.bias.study import build_items

    path = _xor_file_with_bad_rows(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # printed, not warned
        items = build_items(str(path), BiasConfig(k=5, seed=3))
    _, bad = load_xor_rows(path)
    assert capsys.readouterr().err.splitlines() == [f"skipped {b}" for b in bad]
    assert [b.line for b in bad] == [2, 4, 5]
    assert [it.id for it in items] == ["rows-1", "rows-6", "rows-7"]  # rows-3 has two supporting passages


def test_a_non_utf8_xor_file_is_named(tmp_path):
    path = _write(tmp_path / "rows.jsonl", XOR_ROWS.read_text(encoding="utf-8").encode("utf-16"))
    for read in (detect_format, load_xor_rows):
        with pytest.raises(InputError, match=f"^{path} is not UTF-8: it looks like UTF-16"):
            read(str(path))


def test_a_non_utf8_beir_file_is_named(tmp_path):
    from mirage.bias.items import read_beir

    (tmp_path / "qrels").mkdir()
    _write(tmp_path / "corpus.jsonl", '{"_id": "d1", "title": "", "text": "Caf\u00e9"}\n'.encode("latin-1"))
    _write(tmp_path / "queries.jsonl", '{"_id": "q1", "text": "Where?"}\n')
    _write(tmp_path / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    with pytest.raises(InputError, match=f"^{tmp_path / 'corpus.jsonl'} is not UTF-8: byte 0xe9 at line 1"):
        read_beir(tmp_path)


# -- NLI prediction files ---------------------------------------------------------------------------------------------

@pytest.fixture
def xor_split(tmp_path) -> Path:
    """A copy of the test slice of XOR-AttriQA val with its two (whole, real) NLI prediction files beside it."""
    for name in ("val.jsonl", "val.nli-in-lang.json", "val.nli-translate-en.json"):
        shutil.copy(DATA / "xor_attriqa_match" / name, tmp_path / name)
    return tmp_path / "val.jsonl"


def test_real_nli_files_load(xor_split):
    values = json.loads((xor_split.parent / "val.nli-in-lang.json").read_text())
    data = load_xor_attriqa(xor_split)
    assert data.items and all(set(i.nli) == {"nli_mt", "nli_orig"} for i in data.items)
    assert all(i.nli["nli_orig"] == tuple(bool(values[j]) for j in i.idxs) for i in data.items)


def test_every_shared_nli_file_loads(data_dir):
    from mirage.data import resolve

    for split in ("fi", "ru", "train", "val"):
        data = load_xor_attriqa(resolve(f"xor-attriqa-match:{split}"))
        assert not data.bad_rows and all(set(i.nli) == {"nli_mt", "nli_orig"} for i in data.items)


@pytest.mark.parametrize("content, problem", [
    ("[0, 1, ", " is not valid JSON (Expecting value at line 1, column 8); "),
    ('{"predictions": [0, 1]}', " holds a JSON object, not a list; "),
    ("[0, 1, 2, 1]", ": 1 of its 4 predictions are not 0 or 1 ([2] = 2); "),
    ('[0, "yes", 0.5, 1.0, null, 1]',
     ': 4 of its 6 predictions are not 0 or 1 ([1] = "yes", [2] = 0.5, [3] = 1.0, …); '),
])
def test_a_malformed_nli_file_is_named_with_its_problem(xor_split, content, problem):
    nli = _write(xor_split.parent / "val.nli-translate-en.json", content)
    with pytest.raises(InputError) as err:
        load_xor_attriqa(xor_split)
    assert str(err.value) == (f"{nli}{problem}an NLI prediction file is a flat JSON list of 0/1, one per passage, "
                              "indexed by the rows' 'idxs'.")


def test_an_nli_file_too_short_for_the_rows_is_named(xor_split):
    nli = xor_split.parent / "val.nli-in-lang.json"
    _write(nli, json.dumps([0, 1] * 100))  # 200 predictions; the rows use passage indices up to 289
    with pytest.raises(InputError, match=rf"^{nli} has 200 predictions, but {xor_split} line \d+ uses passage "
                                         r"index \d+ \('idxs'\).* at least 290\. Is it the file of another split\?"):
        load_xor_attriqa(xor_split)


def test_nli_booleans_are_accepted(xor_split):
    as_ints = [i.nli for i in load_xor_attriqa(xor_split).items]
    nli = xor_split.parent / "val.nli-in-lang.json"
    _write(nli, json.dumps([bool(v) for v in json.loads(nli.read_text())]))
    assert "true" in nli.read_text()
    assert [i.nli for i in load_xor_attriqa(xor_split).items] == as_ints


# -- the results file of `mirage view` --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def result_lines(tiny_causal) -> list[str]:
    """Two real records as `mirage attribute` writes them (computed on a tiny in-memory model)."""
    from mirage import Mirage, MirageConfig

    cfg = MirageConfig().replace(cti={"std_k": 0.0}, cci={"top_k": 3, "top_percent": None})
    res = Mirage(tiny_causal, config=cfg).attribute(GOOD["question"], GOOD["docs"], answer="It was 1913 [1].")
    return [json.dumps({"key": f"k{i}", "index": i, **res.to_dict()}) for i in range(2)]


def test_view_skips_a_torn_last_line_with_a_warning(tmp_path, result_lines):
    from mirage.views.report import read_result_objects

    path = _write(tmp_path / "out.jsonl", "\n".join(result_lines) + "\n" + result_lines[1][:57])  # no newline
    with pytest.warns(UserWarning, match=rf"^{path}: skipped line 3, a record cut off mid-write"):
        results = read_result_objects(path)
    assert len(results) == 2 and results[0].answer == "It was 1913."


def test_mirage_view_writes_the_report_despite_a_torn_last_line(tmp_path, result_lines):
    path = _write(tmp_path / "out.jsonl", "\n".join(result_lines) + "\n" + result_lines[1][:57])
    html = tmp_path / "report.html"
    with pytest.warns(UserWarning, match="cut off mid-write"):
        assert main(["view", str(path), "-o", str(html)]) == 0
    assert html.exists()


@pytest.mark.parametrize("line, says", [
    ('["a", "list"]', "line 2 is a JSON list, not an object"),
    ('"a string"', "line 2 is a JSON string, not an object"),
    ("3", "line 2 is a JSON number, not an object"),
    ('{"key": "k", "index": 0, "error": "item 0: ..."}',
     ("line 2 is not a mirage attribution result: it lacks 'question', 'docs', 'answer', 'raw_answer', … (it looks "
      "like the .errors.jsonl of a run")),
    ('{"broken": ', "line 2 is not valid JSON (Expecting value, column 12)"),
])
def test_view_names_the_line_that_is_not_a_result(tmp_path, result_lines, capsys, line, says):
    from mirage.views.report import read_result_objects

    path = _write(tmp_path / "out.jsonl", "\n".join([result_lines[0], line, result_lines[1]]) + "\n")
    with pytest.raises(InputError, match="^" + f"{path} {says}".replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.").replace("[", r"\[").replace("]", r"\]")):
        read_result_objects(path)
    assert main(["view", str(path), "-o", str(tmp_path / "r.html")]) == 2
    assert f"mirage: error: {path} {says}" in capsys.readouterr().err


def test_view_a_non_utf8_or_missing_results_file(tmp_path, result_lines):
    from mirage.views.report import read_result_objects

    path = _write(tmp_path / "out.jsonl", ("\n".join(result_lines) + "\n").encode("utf-16"))
    with pytest.raises(InputError, match=f"^{path} is not UTF-8: it looks like UTF-16"):
        read_result_objects(path)
    with pytest.raises(InputError, match=f"^{tmp_path} is a directory"):
        read_result_objects(tmp_path)
    with pytest.raises(InputError, match=f"^{tmp_path / 'none.jsonl'} does not exist"):
        read_result_objects(tmp_path / "none.jsonl")


def test_a_string_document_list_is_refused_with_the_fix():
    """A string where the list of documents goes is one error that names the field and says what to give."""
    with pytest.raises(InputError) as err:
        make_item({"question": "Why?", "docs": "Rayleigh scattering."})
    message = str(err.value)
    assert message.startswith("field 'docs': must be a list of documents, got string;")
    assert '[{"title": "", "text": "..."}]' in message


@pytest.mark.parametrize("answer", ["", "   ", 3])
def test_a_blank_given_answer_names_the_argument_of_the_call(tiny_causal, answer):
    """``Mirage.attribute(..., answer="")`` names ``answer``, the argument the caller wrote, not the item's field."""
    from mirage import Mirage

    with pytest.raises(InputError) as err:
        Mirage(tiny_causal).attribute("Why?", [{"title": "", "text": "Scattering."}], answer=answer)
    assert str(err.value).startswith("field 'answer': must be non-blank text")
    assert "'output'" not in str(err.value)


@pytest.mark.parametrize("kind", ["json", "jsonl"])
def test_view_of_an_input_file_says_to_attribute_it_first(tmp_path, capsys, kind):
    """`mirage view` given the items to attribute (the examples' JSON list, or JSONL items) says so and names the
    command, instead of "line 1 is not valid JSON"."""
    items = json.loads((Path(__file__).resolve().parents[2] / "examples" / "rag_items.json").read_text("utf-8"))
    path = tmp_path / f"items.{kind}"
    path.write_text(json.dumps(items, indent=1) if kind == "json" else
                    "".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    assert main(["view", str(path), "-o", str(tmp_path / "page.html")]) != 0
    err = capsys.readouterr().err
    assert "this is an input file of items (question, docs), not results: attribute it first" in err
    assert f"mirage attribute {path} -o OUT.jsonl" in err and "not valid JSON" not in err.split("; ")[-1]
    assert not (tmp_path / "page.html").exists()
