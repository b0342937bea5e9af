"""Fuzz every reader of user files: item files (JSON, JSONL, JSON lists), YAML configs (run, experiment, tune, bias
protocol, prompt templates), results files as `mirage view` and resume read them, and bias and ELI5 run folders.

Random inputs (hypothesis: random bytes, random JSON values, valid files cut or with a byte changed) and a list of
hand-made adversarial ones (truncated, nested 1,200 levels, huge numbers, NaN, byte-order marks, UTF-16, NUL bytes,
duplicate keys, wrong types, YAML aliases and tags). Each must give mirage's own one-line error or a result, never a
traceback; nothing may be written outside the output path; every input file must be left as it was (hashed before
and after). The test prints how many cases it tried."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirage.config import ConfigError
from mirage.data.inputs import InputError
from mirage.runs.store import StoreError

DATA = Path(__file__).parents[1] / "data"
ELI5_RUN = DATA / "eli5_run_small"
BIAS_RUN = DATA / "bias_run_small"
#: The errors a reader may raise: mirage's own, each one line.
ALLOWED = (InputError, ConfigError, StoreError)
TRIED: Counter[str] = Counter()

GOOD_ITEM = {"question": "When was the Ikhwan party formed?",
             "docs": [{"title": "Ikhwan", "text": "The Ikhwan was formed in 1913."}], "output": "In 1913."}
GOOD_CONFIG = "cti:\n  metric: kl_noctx_ctx\ncci:\n  top_k: 3\ngeneration:\n  max_new_tokens: 50\n"
DEEP = "[" * 1200 + "]" * 1200


def _answers() -> list[dict]:
    """The result records of the shipped ELI5 test run (base records to mutate)."""
    text = gzip.decompress((ELI5_RUN / "answers.jsonl.gz").read_bytes()).decode()
    return [json.loads(line)["result"] for line in text.splitlines() if line.strip()]


RESULT = _answers()[0]
RESULT_LINE = json.dumps(RESULT)

#: Hand-made adversarial texts, as bytes (each tried by every reader that takes a file).
ADVERSARIAL: list[bytes] = [
    b"", b"\n\n", b"[", b"]", b"{", b"[]", b"{}", b"null", b"0", b'""', b"[,]", b"[1,,2]", b"[1 2]",
    DEEP.encode(), ('{"question": "q", "docs": ' + DEEP + "}").encode(),
    ("[" + json.dumps(GOOD_ITEM) + ", " + DEEP + "]").encode(),
    ('{"question": 1' + "0" * 5000 + "}").encode(), b'{"question": 1e999999, "docs": ["x"]}',
    b'{"question": NaN, "docs": [Infinity, -Infinity]}', b"\xef\xbb\xbf" + json.dumps(GOOD_ITEM).encode(),
    json.dumps(GOOD_ITEM).encode("utf-16"), json.dumps(GOOD_ITEM).encode("utf-16-le"),
    json.dumps(GOOD_ITEM).encode("utf-32"), b'{"question": "a\x00b", "docs": ["x"]}', b"\x00" * 64,
    b'{"question": "q", "question": "r", "docs": ["x"], "docs": 5}', b'{"question": ["q"], "docs": {"a": 1}}',
    b'{"question": "q", "docs": [{"title": ["t"], "text": {"x": 1}}]}', b'{"question": "\\ud800", "docs": ["x"]}',
    b"\xff\xfe\xfd", "caf\u00e9".encode("latin-1"), b"[" + b'{"a": [1, 2, 3], "b": x},' * 500 + b"]",
    json.dumps(GOOD_ITEM).encode()[:37], (json.dumps(GOOD_ITEM) + "\n") .encode() * 3 + b'{"question": "cut',
    b"\r\n".join([json.dumps(GOOD_ITEM).encode()] * 3), b"\r".join([json.dumps(GOOD_ITEM).encode()] * 2),
    b"a: &a [1, 2]\nb: [*a, *a]\n", b"a: &a ['x','x','x']\nb: &b [*a,*a,*a]\nc: [*b,*b,*b]\n",
    b"!!python/object/apply:os.system ['echo hi']\n", b"cti: !!python/name:os.system\n", b"cti: [\n",
    b"cti:\n  metric: 5\n", b"cti: {metric: [1, 2]}\n", b"? [a, b]\n: 1\n", b"cci: {top_k: 1" + b"0" * 5000 + b"}\n",
    ("x: " + "[" * 1200 + "]" * 1200 + "\n").encode(), b"cci: {top_k: .nan}\n", b"cci: {top_k: .inf}\n",
    b"generation: {max_new_tokens: true}\n", b"cti: {metric: kl_noctx_ctx}\ncti: {metric: js}\n",
    b"- 1\n- 2\n", b"'just a string'\n", b"%YAML 9.9\n---\n", b"{" + b'"k": 1, ' * 2000 + b'"k": 2}',
    RESULT_LINE.encode(), (RESULT_LINE + "\n" + RESULT_LINE[: len(RESULT_LINE) // 2]).encode(),
    RESULT_LINE.replace('"question"', '"q"').encode(), RESULT_LINE.replace('"tokens": [', '"tokens": [null, ').encode(),
    json.dumps({**RESULT, "saliency": {"answer_tokens": [0], "context_positions": [0], "context_docs": [1],
                                       "context_offsets": [[0, 1]], "content": None, "scale": 1.0,
                                       "data": "@@"}}).encode(),
    json.dumps({"key": "k", "result": RESULT, "seed": [1], "line": {"a": 1}}).encode(),
    json.dumps({"key": "k", "result": None}).encode(), json.dumps({"key": 5, "result": RESULT}).encode(),
]


# -- running one reader on one input ----------------------------------------------------------------------------------

def _digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (links not followed) with the hash of its bytes."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "link:" + str(path.readlink())
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _check(kind: str, root: Path, run, output: Path | None = None) -> None:
    """Run ``run()`` (one reader on the inputs under ``root``): it returns or raises one of ALLOWED with a one-line
    message; nothing under ``root`` changes but ``output`` (and the output's own errors file, when it is a store)."""
    TRIED[kind] += 1
    before = _digest(root)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run()
    except ALLOWED as err:
        message = str(err)
        assert message and "\n" not in message.strip(), f"{kind}: a message of several lines: {message[:500]}"
        assert len(message) < 3000, f"{kind}: a message of {len(message)} characters"
    after = _digest(root)
    written = {p for p in set(after) | set(before) if before.get(p) != after.get(p)}
    allowed = {str(output)} if output is not None else set()
    allowed |= {p for p in written if output is not None and Path(p).name.startswith(f".{output.name}.")}
    assert written <= allowed, f"{kind}: changed or wrote {sorted(written - allowed)[:5]}"


def _read_all(iterator) -> None:
    for _row in iterator:
        pass


def _json_readers(path: Path) -> list[tuple[str, object]]:
    """Every reader that takes one JSON or JSONL file, as (name, call)."""
    from mirage.data.inputs import make_item
    from mirage.data.readers import read_items, read_jsonl, read_rows
    from mirage.runs.store import read_records
    from mirage.views.report import read_result_objects

    def items() -> None:
        for index, raw in read_items(path):
            if not isinstance(raw, InputError):
                try:
                    make_item(raw, item=index)
                except InputError:
                    pass

    return [("items (JSON, JSONL, JSON list)", items), ("rows", lambda: _read_all(read_rows(path))),
            ("JSONL", lambda: _read_all(read_jsonl(path))),
            ("results records (view)", lambda: read_result_objects(path)),
            ("store records", lambda: read_records(path))]


def _yaml_readers(path: Path) -> list[tuple[str, object]]:
    """Every reader that takes one YAML file, as (name, call)."""
    from mirage.bias.full_protocol import load_protocol
    from mirage.config import MirageConfig
    from mirage.runs.experiment import ExperimentConfig
    from mirage.tune.config import TuneConfig

    return [("run config", lambda: MirageConfig.from_yaml(path)),
            ("experiment config", lambda: ExperimentConfig.from_yaml(path, command="attribute")),
            ("tune config", lambda: TuneConfig.from_yaml(path)), ("bias protocol", lambda: load_protocol(path))]


def _try_file(root: Path, data: bytes, name: str = "input") -> None:
    for suffix, readers in ((".json", _json_readers), (".jsonl", _json_readers), (".yaml", _yaml_readers)):
        path = root / f"{name}{suffix}"
        path.write_bytes(data)
        for kind, run in readers(path):
            _check(kind, root, run)
        if suffix == ".jsonl":
            _try_store(root, path)
        path.unlink()


def _try_store(root: Path, path: Path) -> None:
    """Resume from ``path`` as an output store: it opens or is refused, and writes nothing but its own file."""
    from mirage.runs.store import ResumableJSONL

    def open_store() -> None:
        store = ResumableJSONL(path)
        store.close()

    _check("resume (store)", root, open_store, output=path)
    path.write_bytes(path.read_bytes())  # a store may cut its own torn last line: the next reader starts afresh


def _try_template(root: Path, data: bytes) -> None:
    from mirage.attribution.prompts import load_template
    from mirage.config import PromptConfig

    # one file per content: templates are cached by path, and a path's content never changes here
    path = root / f"template-{hashlib.sha256(data).hexdigest()[:16]}.yaml"
    path.write_bytes(data)
    _check("prompt template", root, lambda: load_template(PromptConfig(path=str(path))))


def _try_view(root: Path, source: Path, files: dict[str, bytes]) -> None:
    """`mirage view` of a copy of the run folder ``source`` with ``files`` replaced."""
    from mirage.views.view import write_view

    folder = root / "run"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(source, folder)
    for name, data in files.items():
        for stale in (folder / name, folder / f"{name}.gz"):
            stale.unlink(missing_ok=True)
        (folder / name).write_bytes(data)
    output = root / "page.html"
    _check(f"run folder ({source.name})", root, lambda: write_view(folder, output), output=output)
    output.unlink(missing_ok=True)


# -- the cases --------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Iterator[Path]:
    """The folder every case writes its inputs in; at the end, how many cases each reader was given is printed."""
    yield tmp_path_factory.mktemp("fuzz")
    total = sum(TRIED.values())
    print(f"\nfuzz cases tried: {total} ({', '.join(f'{k}: {v}' for k, v in sorted(TRIED.items()))})")


def test_hand_made_adversarial_inputs(root):
    for data in ADVERSARIAL:
        _try_file(root, data)
        _try_template(root, data)
    for name in ("generations.jsonl", "results.json", "items.jsonl", "tables.md", "cab.png"):
        for data in ADVERSARIAL[::3]:
            _try_view(root, BIAS_RUN, {name: data})
    for name in ("answers.jsonl", "results.json", "length_bins.png"):
        for data in ADVERSARIAL[::3]:
            _try_view(root, ELI5_RUN, {name: data})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


def _mutated(base: bytes, data: st.DataObject) -> bytes:
    """``base`` cut short, with a byte changed, inserted or removed, or a slice repeated."""
    how = data.draw(st.sampled_from(["cut", "change", "insert", "remove", "repeat"]))
    at = data.draw(st.integers(0, max(0, len(base) - 1)))
    if how == "cut":
        return base[:at]
    if how == "repeat":
        return base[:at] + base[at:] * 2
    byte = bytes([data.draw(st.integers(0, 255))])
    return {"change": base[:at] + byte + base[at + 1:], "insert": base[:at] + byte + base[at:],
            "remove": base[:at] + base[at + 1:]}[how]


SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
VALID_FILES = [json.dumps(GOOD_ITEM).encode(), json.dumps([GOOD_ITEM, GOOD_ITEM], indent=2).encode(),
               (json.dumps(GOOD_ITEM) + "\n") .encode() * 2, GOOD_CONFIG.encode(), RESULT_LINE.encode() + b"\n"]


@SETTINGS
@given(data=st.binary(max_size=300))
def test_random_bytes(root, data):
    _try_file(root, data)


@SETTINGS
@given(value=json_values, layout=st.sampled_from(["json", "jsonl", "list", "item field", "yaml"]))
def test_random_json_values(root, value, layout):
    import yaml

    text = {"json": lambda: json.dumps(value), "jsonl": lambda: json.dumps(value) + "\n" + json.dumps(value),
            "list": lambda: json.dumps([value, GOOD_ITEM]),
            "item field": lambda: json.dumps({**GOOD_ITEM, "docs": value}),
            "yaml": lambda: yaml.safe_dump({"cti": value, "cci": {"top_k": value}})}[layout]()
    _try_file(root, text.encode())


@SETTINGS
@given(data=st.data())
def test_valid_files_mutated(root, data):
    _try_file(root, _mutated(data.draw(st.sampled_from(VALID_FILES)), data))


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_run_folders_mutated(root, data):
    source, name = data.draw(st.sampled_from([(BIAS_RUN, "generations.jsonl.gz"), (BIAS_RUN, "results.json"),
                                              (BIAS_RUN, "items.jsonl"), (BIAS_RUN, "tables.md"),
                                              (ELI5_RUN, "answers.jsonl.gz"), (ELI5_RUN, "results.json")]))
    base = (source / name).read_bytes()
    if name.endswith(".gz"):
        base = gzip.decompress(base)
        name = name[:-3]
    _try_view(root, source, {name: _mutated(base, data)})


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=json_values, field=st.sampled_from(["question", "docs", "answer", "tokens", "spans", "sentences",
                                                  "context_spans", "saliency", "config", "cti_threshold", "id"]))
def test_result_records_with_a_field_replaced(root, value, field):
    from mirage.views.report import read_result_objects

    path = root / "results.jsonl"
    path.write_text(json.dumps({**RESULT, field: value}) + "\n")
    _check("results records (view)", root, lambda: read_result_objects(path))
    answers = json.dumps({"key": "k", "seed": 1, "line": 1, "result": {**RESULT, field: value}}).encode()
    _try_view(root, ELI5_RUN, {"answers.jsonl": answers})


def _records(path: Path) -> list[dict]:
    data = path.read_bytes()
    text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


GENERATIONS = _records(BIAS_RUN / "generations.jsonl.gz")
ITEMS = _records(BIAS_RUN / "items.jsonl")
BIAS_RESULTS = json.loads((BIAS_RUN / "results.json").read_text())
ELI5_RESULTS = json.loads((ELI5_RUN / "results.json").read_text())


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=json_values | st.sampled_from([10 ** 30, -1, 0, [[1, 2]], [None], {"a": None}]), data=st.data())
def test_run_folder_records_with_a_field_replaced(root, value, data):
    """A hand-edited run folder: one field of a generation record, an items row, or a results.json replaced."""
    where = data.draw(st.sampled_from(["generations", "items", "bias results", "eli5 results"]))
    if where in ("generations", "items"):
        rows = [dict(r) for r in (GENERATIONS if where == "generations" else ITEMS)]
        rows[0][data.draw(st.sampled_from(sorted(rows[0])))] = value
        name = "generations.jsonl" if where == "generations" else "items.jsonl"
        _try_view(root, BIAS_RUN, {name: "".join(json.dumps(r) + "\n" for r in rows).encode()})
        return
    results = json.loads(json.dumps(BIAS_RESULTS if where == "bias results" else ELI5_RESULTS))
    node = results
    while True:  # a field at some depth of results.json
        key = data.draw(st.sampled_from(sorted(node)))
        if not isinstance(node[key], dict) or not node[key] or data.draw(st.booleans()):
            break
        node = node[key]
    node[key] = value
    _try_view(root, BIAS_RUN if where == "bias results" else ELI5_RUN, {"results.json": json.dumps(results).encode()})
