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
from mirage.data.inputs import InputError
from mirage.data.readers import MAX_JSON_DEPTH, BadRow, RawRow, parse_json, read_items, read_rows

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
    from mirage.runs.store import ResumableJSONL, read_records

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
    from mirage.attribution.prompts import Reservation, build_prompt, load_template
    from mirage.attribution.tokenization import max_token_chars
    from mirage.config import PromptConfig
    from mirage.data.inputs import Document

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


def test_a_huge_question_is_refused_before_it_is_tokenized(real_tokenizer, monkeypatch):
    """A question is never truncated: one longer than the window can hold is an InputError naming it, and the
    tokenizer never sees it."""
    from mirage.attribution.prompts import Reservation, build_prompt, load_template
    from mirage.config import PromptConfig
    from mirage.data.inputs import Document

    def refuse(self, text, *args, **kwargs):
        raise AssertionError("the tokenizer was called")

    monkeypatch.setattr(type(real_tokenizer), "__call__", refuse)
    with pytest.raises(InputError, match=r"^item 3, field 'question': is 20000000 characters long"):
        build_prompt(load_template(PromptConfig(name="selfcitation")), "why " * 5_000_000, (Document("T", "x"),),
                     tokenizer=real_tokenizer, use_chat_template=True, reservation=Reservation(2048, 100), item=3)


def test_a_huge_document_takes_memory_bounded_by_the_window_not_the_document(tmp_path):
    """Peak memory (the process's high-water mark, ``ru_maxrss``: the tokenizer allocates outside Python, where
    tracemalloc cannot see) grows by less than the document's own size when a 40 MB document is prepared; tokenized
    whole it took about 150 bytes per character (6 GB)."""
    script = textwrap.dedent("""
        import resource, warnings
        from transformers import AutoTokenizer
        from mirage.config import PromptConfig
        from mirage.data.inputs import Document
        from mirage.attribution.models import embedded_checkpoint
        from mirage.attribution.prompts import Reservation, build_prompt, load_template
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


# -- 4. a YAML alias bomb, and how much of a user's value a message shows --------------------------------------------

BOMB = textwrap.dedent("""\
    a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
    h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
    cti: {metric: *h}
    """)


def test_a_yaml_alias_bomb_is_refused_in_one_line(tmp_path):
    from mirage.config import ConfigError, MirageConfig
    from mirage.runs.experiment import ExperimentConfig
    from mirage.tune.config import TuneConfig

    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    for load in (MirageConfig.from_yaml, lambda p: ExperimentConfig.from_yaml(p, command="attribute"),
                 TuneConfig.from_yaml):
        with pytest.raises(ConfigError) as err:
            load(path)
        message = str(err.value)
        assert message.startswith(f"{path}: not valid YAML at line 2") and "alias (*a)" in message
        assert "\n" not in message and len(message) < 400


def test_a_huge_value_in_a_config_is_shown_bounded(tmp_path):
    """A 10 MB string, a list of a million items, a million-digit-sized integer, a key of 1 MB: each message shows
    a few dozen characters of it."""
    from mirage.config import ConfigError, MirageConfig
    from mirage.tune.config import TuneConfig

    values = {"string": "x" * 10_000_000, "list": list(range(1_000_000)), "integer": -(10 ** 100_000),
              "nested": [[[[[["deep"] * 50] * 50] * 50] * 50] * 50]}
    for name, value in values.items():
        for make in (lambda v: MirageConfig.from_dict({"cti": {"metric": v}}),
                     lambda v: MirageConfig.from_dict({"cci": {"top_k": v}}),
                     lambda v: MirageConfig.from_dict({"x" * 1_000_000: v}),
                     lambda v: TuneConfig.from_dict({"model": "m", "lora": {"r": v}})):
            with pytest.raises(ConfigError) as err:
                make(value)
            assert len(str(err.value)) < 600 and "\n" not in str(err.value), (name, str(err.value)[:300])


def test_short_repr_and_json_repr_are_bounded():
    from mirage.data.inputs import json_repr, short_repr

    bomb: list = ["lol"] * 9
    for _ in range(9):
        bomb = [bomb] * 9  # 9**10 strings once expanded: never expanded here
    for value in (bomb, "y" * 10_000_000, 10 ** 100_000, {"k" * 1000: bomb}, float("nan")):
        assert len(short_repr(value)) <= 60 and len(json_repr(value)) <= 40
    assert short_repr("abc") == "'abc'" and json_repr({"a": [1, 2]}) == '{"a": [1, 2]}'


def test_yaml_files_of_templates_and_bias_prompts_refuse_aliases(tmp_path):
    from mirage.attribution.prompts import load_template
    from mirage.config import ConfigError, PromptConfig

    path = tmp_path / "t.yaml"
    path.write_text('name: &n x\ninstruction: *n\ntemplate: "{Q} {D}"\ncontextless_template: "{Q}"\n'
                    'doc_template: "{P}"\n')
    with pytest.raises(ConfigError, match=r"cannot be read as YAML \(an alias \(\*n\)"):
        load_template(PromptConfig(path=str(path)))
    path.write_text("[1, 2]\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_template(PromptConfig(path=str(path)))


# -- 5. `mirage view` of hand-edited result records -------------------------------------------------------------------

DELETE = object()


def _variants(record: dict) -> dict[str, tuple[list, object]]:
    import base64

    cue = next(k for k, t in enumerate(record["tokens"]) if t["top_context"])
    return {
        "question null": (["question"], None),
        "docs missing": (["docs"], DELETE),
        "docs a string": (["docs"], "text"),
        "a doc null": (["docs", 0], None),
        "a doc without text": (["docs", 0, "text"], DELETE),
        "tokens null": (["tokens"], None),
        "top_context null": (["tokens", 0, "top_context"], None),
        "cti a string": (["tokens", 0, "cti"], "high"),
        "index a float": (["tokens", 0, "index"], 1.5),
        "span names a missing token": (["spans", 0, "tokens"], [999]),
        "span without docs": (["spans", 0, "docs"], []),
        "saliency data not base64": (["saliency", "data"], "!!!not base64"),
        "saliency data of the wrong size": (["saliency", "data"], base64.b64encode(b"\0" * 6).decode()),
        "saliency a string": (["saliency"], "x"),
        "citations null": (["sentences", 0, "mirage_citations"], None),
        "cti_threshold null": (["cti_threshold"], None),
        "config null": (["config"], None),
        "cue outside the prompt": (["tokens", cue, "top_context", 0, "start"], 10 ** 9),
        "answer a number": (["answer"], 5),
        "context span empty": (["context_spans", 0], {}),
        "unknown key in a token": (["tokens", 0, "colour"], "red"),
        "sentences of numbers": (["sentences"], [1, 2]),
        "truncated_docs of strings": (["truncated_docs"], ["a"]),
        "prompt null": (["prompt"], None),
        "aggregation a list": (["config", "aggregation"], [1]),
        "saliency offsets not pairs": (["saliency", "context_offsets", 0], [1]),
        "negative span": (["spans", 0, "start"], -5),
        "huge document id": (["spans", 0, "docs"], [10 ** 30]),
    }


def _edited(record: dict, path: list, value: object) -> dict:
    out = json.loads(json.dumps(record))
    *parents, last = path
    node = out
    for key in parents:
        node = node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return out


def test_view_of_hand_edited_records_names_the_line_and_field(tmp_path, capsys, result_line):
    record = json.loads(result_line)
    assert record["saliency"] and record["spans"] and record["context_spans"], "the record has every part"
    rendered, refused = [], []
    for name, (path, value) in _variants(record).items():
        src = tmp_path / "edited.jsonl"
        src.write_text(result_line + "\n" + json.dumps(_edited(record, path, value)) + "\n")
        status = main(["view", str(src), "-o", str(tmp_path / f"{len(rendered) + len(refused)}.html")])
        err = capsys.readouterr().err
        assert "Traceback" not in err and status in (0, 2), (name, err[-500:])
        if status == 0:
            rendered.append(name)
            continue
        refused.append(name)
        line = err.strip().splitlines()
        assert len(line) == 1 and f"{src} line 2" in line[0], (name, err)
        field = str(path[0])
        assert field in line[0] or name == "docs missing" and "lacks 'docs'" in line[0], (name, err)
    print(f"{len(refused)} edited records refused with their line and field, {len(rendered)} rendered: {rendered}")
    assert len(refused) >= 25


# -- 6. a run folder's figures and text in a shareable page ---------------------------------------------------------

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
       b"\x00\x00\x00\rIDATx\x9cc\xf8\xcf\xc0\xf0\x1f\x00\x05\x00\x01\xff\x89\x99=\x1d\x00\x00\x00\x00IEND\xaeB`\x82")


def test_figures_are_read_only_inside_the_folder_and_only_as_png(tmp_path):
    from mirage.runs.files import figure_uri

    folder = tmp_path / "run"
    folder.mkdir()
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    (folder / "leak.png").symlink_to(secret)
    (folder / "fake.png").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    outside_png = tmp_path / "elsewhere.png"
    outside_png.write_bytes(PNG)
    (folder / "out.png").symlink_to(outside_png)
    (folder / "real.png").write_bytes(PNG)
    (folder / "inside.png").symlink_to(folder / "real.png")
    for name, why in (("leak.png", "leads out of"), ("fake.png", "not a PNG"), ("out.png", "leads out of")):
        with pytest.warns(UserWarning, match=why):
            assert figure_uri(folder / name) is None, name
    assert figure_uri(folder / "real.png").startswith("data:image/png;base64,")
    assert figure_uri(folder / "inside.png") == figure_uri(folder / "real.png")
    assert figure_uri(folder / "missing.png") is None


def _remote_references(html: str) -> list[str]:
    """What in a page (its tags, their attributes, its style blocks: not its escaped text) loads or points to
    something outside it: an address with a scheme other than ``data:`` or ``#``, a ``<link>``, CSS ``url()`` or
    ``@import`` of an address."""
    from html.parser import HTMLParser

    found: list[str] = []

    def external(value: str) -> bool:
        value = value.strip().lower()
        return bool(value) and not value.startswith(("#", "data:")) and (":" in value.split("/")[0] or
                                                                        value.startswith("//"))

    def css(text: str) -> None:
        import re

        for target in re.findall(r"url\(\s*['\"]?([^'\")]*)|@import\s+['\"]([^'\"]*)", text, re.IGNORECASE):
            if any(external(t) for t in target):
                found.append(f"css {target}")

    class Scan(HTMLParser):
        in_style = False

        def handle_starttag(self, tag, attrs):
            if tag == "link":
                found.append(f"<link {attrs}>")
            self.in_style = tag == "style"
            for name, value in attrs:
                if value and name in ("src", "href", "action", "poster", "srcset", "formaction", "data", "background") \
                        and external(value):
                    found.append(f"<{tag} {name}={value}>")
                if value and name == "style":
                    css(value)

        def handle_endtag(self, tag):
            self.in_style = False

        def handle_data(self, data):
            if self.in_style:
                css(data)

    Scan().feed(html)
    return found


def test_markdown_from_a_run_folder_loads_nothing_remote():
    from mirage.views.bias_report import markdown_html

    text = ("# Tables\n![tracker](https://evil.example/pixel.png) [click](http://evil.example) <https://auto.example>"
            " <img src='https://x.example/a.png'> [ref][r]\n\n[r]: https://ref.example\n\n| a | b |\n|---|---|\n"
            "| ![i](//cdn.example/i.png) | [l](javascript:alert(1)) |\n\n<link rel=stylesheet href=https://c.example>"
            "\n<style>@import url(https://s.example/x.css);</style>\n")
    html = str(markdown_html(text))
    assert _remote_references(html) == [] and "<a " not in html and "<img" not in html
    assert "[image: tracker]" in html and "click" in html and "<table>" in html


def test_a_bias_run_page_embeds_no_local_file_and_nothing_remote(tmp_path, capsys):
    """The shipped bias run folder, copied, with hostile additions: cab.png a link to a key file, tables.md with
    remote images and links. The page holds neither the key nor any remote reference."""
    import shutil

    shipped = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "bias_smollm2_hai"
    folder = tmp_path / "run"
    shutil.copytree(shipped, folder)
    secret = tmp_path / "key.txt"
    secret.write_bytes(b"\x89PNG\r\n\x1a\n" + b"TOPSECRETKEYMATERIAL" * 10)
    (folder / "cab.png").unlink(missing_ok=True)
    (folder / "cab.png").symlink_to(secret)
    (folder / "tables.md").write_text("# Tables\n![x](https://evil.example/p.png)\n[home](https://evil.example)\n"
                                      "<script src=https://evil.example/x.js></script>\n")
    page = tmp_path / "page.html"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["view", str(folder), "-o", str(page)]) == 0, capsys.readouterr().err
    html = page.read_text()
    import base64

    assert "TOPSECRETKEYMATERIAL" not in html and base64.b64encode(secret.read_bytes())[:40].decode() not in html
    assert _remote_references(html) == [], _remote_references(html)[:5]
    assert "<script src" not in html


@pytest.mark.parametrize("field, value, says", [
    ("n_docs", 10 ** 30, "field 'n_docs' is"),  # once a loop over 10**30 documents: the view never ended
    ("item_id", [1], "field 'item_id' must be a string"),
    ("labels", None, "field 'labels' must be a list"),
    ("relevant", [99], "field 'relevant' names a document outside"),
])
def test_view_of_a_hand_edited_bias_run_names_the_record_and_field(tmp_path, capsys, field, value, says):
    import gzip
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(Path(__file__).parents[1] / "data" / "bias_run_small", folder)
    rows = [json.loads(line) for line in gzip.decompress((folder / "generations.jsonl.gz").read_bytes()).splitlines()]
    rows[1][field] = value
    (folder / "generations.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    assert main(["view", str(folder), "-o", str(tmp_path / "page.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "generations.jsonl.gz record 2" in err and says in err, err


def test_a_huge_given_answer_is_refused_before_it_is_tokenized(embedded_mirage, monkeypatch):
    """A given answer (``output``) longer than the model's window can hold is an InputError naming it, raised
    before the tokenizer sees it (tokenized whole, a 50 MB answer took gigabytes and every resume tried again)."""
    tokenizer = embedded_mirage.lm.tokenizer

    def refuse(self, text, *args, **kwargs):
        raise AssertionError("the tokenizer was called")

    monkeypatch.setattr(type(tokenizer), "__call__", refuse)
    monkeypatch.setattr(type(tokenizer), "encode", refuse)
    item = {"id": "big", "question": "Why?", "docs": [{"title": "T", "text": "x"}], "output": "because " * 5_000_000}
    with pytest.raises(InputError, match=r"^item big, field 'output': is \d+ characters long, "
                                         r"more than the model's window"):
        embedded_mirage.attribute_item(item)
