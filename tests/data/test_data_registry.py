"""Datasets by name (``mirage data list`` / ``get``, :func:`mirage.data.resolve`): every file checked against its pinned
checksum, imported ``--from`` the project's data folder (the ``data_cache`` fixture) or from a copy laid out as the
source repository, rebuilt by the recipes byte for byte, and read by the commands by name. The download path runs
offline here: it is tried through a proxy that refuses, and must fail in one line naming ``--from``. Also: no tracked
file names a machine path."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mirage.cli import main
from mirage.data import DATASETS, DataError, data_label, get, parse_spec, resolve
from mirage.data.build import build_output

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- names and the cache ----------------------------------------------------------------------------------------------


def test_names_parse_to_their_parts_and_bad_names_say_what_exists():
    spec = parse_spec("xor-attriqa-match:ru,fi,val")
    assert spec.parts == ("val", "fi", "ru") and not spec.whole  # in the release's order
    assert parse_spec("xor-attriqa-match").parts == ("train", "val", "bn", "fi", "ja", "ru", "te")
    with pytest.raises(DataError, match=r"^unknown dataset 'xor'; known: xor-attriqa-match, .*`mirage data list`"):
        parse_spec("xor:fi")
    with pytest.raises(DataError, match=r"has no part 'de'; its parts: train, val, bn, fi, ja, ru, te\.$"):
        parse_spec("xor-attriqa-match:fi,de")


def test_a_path_resolves_to_itself_and_a_missing_dataset_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "empty"))
    assert resolve("runs/items.jsonl") == Path("runs/items.jsonl")
    assert resolve("nq") == Path("nq")  # a hub name of the bias study, not a dataset of the registry
    with pytest.raises(DataError) as err:
        resolve("xor-attriqa-match:fi")
    assert "\n" not in str(err.value)
    assert "run `mirage data get xor-attriqa-match:fi` (or `mirage data get xor-attriqa-match:fi --from PATH`" in str(
        err.value)


def test_a_command_given_a_missing_dataset_stops_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "empty"))
    assert main(["score", "xor-attriqa", "xor-attriqa-match:fi", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("mirage: error: dataset xor-attriqa-match:fi is not in the cache")
    assert not (tmp_path / "out").exists()


def test_offline_get_fails_in_one_line_naming_from(tmp_path):
    """A real download attempt, through a proxy that refuses (this machine has no route to GitHub either)."""
    env = {**os.environ, "MIRAGE_DATA_DIR": str(tmp_path / "cache"), "HTTPS_PROXY": "http://127.0.0.1:9",
           "https_proxy": "http://127.0.0.1:9", "NO_PROXY": "", "no_proxy": ""}
    done = subprocess.run([sys.executable, "-m", "mirage", "data", "get", "eli5-alce-prompt"], env=env, check=False,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot download https://raw.githubusercontent.com/princeton-nlp/ALCE/" in lines[0]
    assert lines[0].endswith("offline? copy princeton-nlp/ALCE here and run `mirage data get eli5-alce-prompt "
                             "--from PATH`.")
    assert not list((tmp_path / "cache").rglob("*.json"))  # nothing half-written


# -- the data folder imported, and rebuilt from the source's layout ---------------------------------------------------


def test_the_imported_cache_is_the_data_folder_byte_for_byte(data_dir, data_folder):
    files = [p for p in data_folder.rglob("*") if p.is_file() and p.name != "README.md"]
    assert len(files) == 18
    for path in files:
        assert (data_dir / path.relative_to(data_folder)).read_bytes() == path.read_bytes(), path.name
    # beir-small is built from xor-attriqa-match:val: the folder the retrieval tests ship
    for name in ("corpus.jsonl", "queries.jsonl", "answers.jsonl", "qrels/test.tsv"):
        assert (data_dir / "beir_small" / name).read_bytes() == (DATA / "beir_small" / name).read_bytes()


def _source_layout(shared: Path, root: Path) -> Path:
    """A folder laid out as Betswish/MIRAGE-reproduce for the val and fi splits, its files recovered from the data
    folder (the match rows without the two joined fields are the release's bytes: the pins check it)."""
    base = root / "MIRAGE-reproduce" / "sec4_alignment"
    for split in ("val", "fi"):
        rows = [json.loads(line) for line in (shared / "xor_attriqa_match" / f"{split}.jsonl").read_text().splitlines()]
        match = base / "data" / "data-match" / f"pos-{split}.jsonl"
        match.parent.mkdir(parents=True, exist_ok=True)
        match.write_text("".join(json.dumps({k: v for k, v in r.items() if k not in ("query_en", "prediction_en")},
                                            ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        full = base / "data" / "xor_attriqa" / "in-language" / f"{split}.jsonl"
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes((shared / "xor_attriqa_full" / f"{split}.jsonl").read_bytes())
        for kind in ("in-lang", "translate-en"):
            nli = base / "nli-predictions" / f"{split}-nli-{kind}.txt"
            nli.parent.mkdir(parents=True, exist_ok=True)
            nli.write_bytes((shared / "xor_attriqa_match" / f"{split}.nli-{kind}.json").read_bytes())
    return root / "MIRAGE-reproduce"


def test_get_from_a_copy_of_the_source_repository_joins_the_english_fields(data_cache, data_folder, tmp_path,
                                                                           monkeypatch):
    clone = _source_layout(data_folder, tmp_path)
    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "cache"))
    folder = get("xor-attriqa-match:val,fi", source=clone, progress=False)
    assert sorted(p.name for p in folder.iterdir()) == [
        "fi.jsonl", "fi.nli-in-lang.json", "fi.nli-translate-en.json",
        "val.jsonl", "val.nli-in-lang.json", "val.nli-translate-en.json"]
    for split in ("val", "fi"):  # built by the join, then checked against the pin: the data folder's bytes
        assert (folder / f"{split}.jsonl").read_bytes() == (
            data_cache / "xor_attriqa_match" / f"{split}.jsonl").read_bytes()
    assert get("xor-attriqa-full:fi", source=clone, progress=False).read_bytes() == (
        data_folder / "xor_attriqa_full" / "fi.jsonl").read_bytes()
    # a split the copy does not hold: one line naming the file and what to give
    with pytest.raises(DataError, match=r"data-match/pos-ru\.jsonl \(or xor_attriqa_match/ru\.jsonl\) not found \(no "
                                        r"file of that name\); give a clone of Betswish/MIRAGE-reproduce"):
        get("xor-attriqa-match:ru", source=clone, progress=False)


def test_a_copy_that_is_not_the_pinned_file_is_refused(data_folder, tmp_path, monkeypatch):
    clone = _source_layout(data_folder, tmp_path)
    nli = clone / "sec4_alignment" / "nli-predictions" / "val-nli-in-lang.txt"
    nli.write_text(nli.read_text().replace("1", "0", 1))
    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "cache"))
    with pytest.raises(DataError, match=r"val-nli-in-lang\.txt \(or xor_attriqa_match/val\.nli-in-lang\.json\) not "
                                        r"found \(.*val-nli-in-lang\.txt differ from the pinned file\)"):
        get("xor-attriqa-match:val", source=clone, progress=False)
    assert not (tmp_path / "cache" / "xor_attriqa_match" / "val.nli-in-lang.json").exists()


def test_the_eli5_recipes_rebuild_the_pinned_files(data_cache, tmp_path):
    """ALCE's prompt file as published (other indentation) and the MIRAGE authors' run file (each item with its
    prompt and output besides the ALCE fields) give the data folder's files, whose checksums are pinned."""
    prompt = json.loads((data_cache / "eli5_alce" / "eli5_alce_prompt.json").read_text())
    published = tmp_path / "eli5_default.json"
    published.write_text(json.dumps(prompt, indent=4))
    out = DATASETS["eli5-alce-prompt"].parts["eli5-alce-prompt"][0]
    assert hashlib.sha256(build_output(out.build, [published], out.name)).hexdigest() == out.sha256
    items = json.loads((data_cache / "eli5_alce" / "eli5_eval_sample.json").read_text())
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"args": {}, "data": [{**it, "prompt": "…", "output": "an answer [1]."}
                                                    for it in items]}))
    out = DATASETS["eli5-alce"].parts["eli5-alce"][0]
    assert hashlib.sha256(build_output(out.build, [run], out.name)).hexdigest() == out.sha256


def test_the_join_takes_the_english_query_and_answer_of_the_first_passage(tmp_path):
    """On the test slices: the four train rows of tests/data, their per-passage rows placed at their line numbers."""
    match = [json.loads(line) for line in (DATA / "xor_attriqa_match" / "train.jsonl").read_text().splitlines()]
    per_passage_rows = (DATA / "xor_attriqa_full" / "train.jsonl").read_text().splitlines()
    lines = [110, 128, 150, 167, 195, 228, 233]  # tests/data/README.md: 1-based lines of the per-passage release
    sparse = ["{}"] * 233
    for line, row in zip(lines, per_passage_rows):
        sparse[line - 1] = row
    (tmp_path / "full.jsonl").write_text("\n".join(sparse) + "\n")
    (tmp_path / "pos.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if k not in ("query_en", "prediction_en")}, ensure_ascii=False) + "\n"
        for r in match))
    built = build_output("xor-match-join", [tmp_path / "pos.jsonl", tmp_path / "full.jsonl"], "train.jsonl")
    assert built == (DATA / "xor_attriqa_match" / "train.jsonl").read_bytes()


# -- hostile copies and caches (issue 64) ------------------------------------------------------------------------------


def _copy(data_folder: Path, root: Path, *folders: str) -> Path:
    """A copy of some of the data folder's folders, laid out as the cache (never the data folder itself)."""
    for folder in folders:
        shutil.copytree(data_folder / folder, root / folder)
        for path in (root / folder).iterdir():
            path.chmod(0o644)  # the data folder is read-only; this copy is the test's to edit
    return root


def test_a_cached_file_that_is_not_the_pinned_one_is_refused_and_listed_as_differing(data_folder, tmp_path,
                                                                                    monkeypatch, capsys):
    """A truncated cached file is neither read, nor listed as cached; `mirage data get` fetches it again."""
    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "cache"))
    copy = _copy(data_folder, tmp_path / "copy", "eli5_alce")
    cached = get("eli5-alce-prompt", source=copy, progress=False)
    pinned = DATASETS["eli5-alce-prompt"].parts["eli5-alce-prompt"][0].sha256
    assert _sha(cached) == pinned
    cached.write_bytes(cached.read_bytes()[:-100])
    with pytest.raises(DataError) as err:
        resolve("eli5-alce-prompt")
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{cached}: ")
    assert f"its SHA-256 is {_sha(cached)[:12]}… where {pinned[:12]}… is pinned" in message
    assert "`mirage data get eli5-alce-prompt`" in message
    assert main(["attribute", "eli5-alce-prompt", "-o", str(tmp_path / "out.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == f"mirage: error: {message}"
    assert main(["data", "list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("eli5-alce-prompt "))
    assert "cached: no (differs from its pinned SHA-256" in line
    get("eli5-alce-prompt", source=copy, progress=False)  # fetched again: the pinned file
    assert _sha(resolve("eli5-alce-prompt")) == pinned


def test_a_from_folder_with_symlink_loops_is_walked_once(data_folder, tmp_path, monkeypatch):
    """Two links back to the copy's own folder (2^depth paths if followed): each folder is read once, fast."""
    import signal

    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "cache"))
    copy = _copy(data_folder, tmp_path / "copy", "eli5_alce")
    (copy / "loop").symlink_to(copy)
    (copy / "eli5_alce" / "up").symlink_to("..")

    def too_long(*_):
        raise TimeoutError("the walk of --from did not end in 10 s")

    before = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(10)
    try:
        path = get("eli5-alce-prompt", source=copy, progress=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    assert path.read_bytes() == (data_folder / "eli5_alce" / "eli5_alce_prompt.json").read_bytes()


def test_a_from_folder_too_deep_or_too_big_stops_in_one_line(data_folder, tmp_path, monkeypatch):
    from mirage.data import fetch

    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "cache"))
    copy = _copy(data_folder, tmp_path / "copy", "eli5_alce")
    (copy / "a" / "b" / "c" / "d").mkdir(parents=True)
    monkeypatch.setattr(fetch, "WALK_DEPTH", 3)
    with pytest.raises(DataError, match=r"^--from .*copy: folders nested deeper than 3 levels \(at .*c\); give the "
                                        r"folder of the copy itself"):
        get("eli5-alce-prompt", source=copy, progress=False)
    monkeypatch.setattr(fetch, "WALK_DEPTH", 16)
    monkeypatch.setattr(fetch, "WALK_ENTRIES", 5)
    with pytest.raises(DataError, match=r"^--from .*copy: more than 5 files and folders; give the folder of the copy "
                                        r"itself"):
        get("eli5-alce-prompt", source=copy, progress=False)


def test_a_same_named_file_with_another_checksum_is_named_with_both_checksums(data_folder, tmp_path, monkeypatch):
    """The built file is in the copy (laid out as the cache) but edited: not "no file of that name"."""
    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "cache"))
    copy = _copy(data_folder, tmp_path / "copy", "eli5_alce")
    edited = copy / "eli5_alce" / "eli5_alce_prompt.json"
    edited.write_text(edited.read_text(encoding="utf-8").replace("Instruction", "instruction", 1), encoding="utf-8")
    pinned = DATASETS["eli5-alce-prompt"].parts["eli5-alce-prompt"][0].sha256
    with pytest.raises(DataError) as err:
        get("eli5-alce-prompt", source=copy, progress=False)
    message = str(err.value)
    assert "no file of that name" not in message and "\n" not in message
    assert f"the file of that name is there but its SHA-256 is {_sha(edited)[:12]}… where {pinned[:12]}… is " \
           f"pinned: {edited} differ from the pinned file" in message
    assert not (tmp_path / "cache" / "eli5_alce" / "eli5_alce_prompt.json").exists()


def test_a_partial_copy_of_a_dataset_names_the_parts_it_gives(data_folder, tmp_path, monkeypatch, capsys):
    """Issue 65: the data folder holds train, val, fi and ru of xor-attriqa-match. `get` of the whole dataset takes
    those and names them; the whole name stays all seven parts (a run recording `xor-attriqa-match` read them all),
    so reading it names the cached parts' name instead."""
    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "cache"))
    copy = _copy(data_folder, tmp_path / "copy", "xor_attriqa_match")
    assert main(["data", "get", "xor-attriqa-match", "--from", str(copy), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "data-match/pos-bn.jsonl (or xor_attriqa_match/bn.jsonl) not found" in err
    assert err.endswith("parts bn, ja, te are not in that copy; the others are now in the cache: read them as "
                        "`xor-attriqa-match:train,val,fi,ru`.")
    assert main(["data", "list"]) == 0
    assert "cached: train,val,fi,ru" in capsys.readouterr().out
    assert main(["score", "xor-attriqa", "xor-attriqa-match", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("mirage: error: dataset xor-attriqa-match is not in the cache")
    assert "its cached parts are read as `xor-attriqa-match:train,val,fi,ru`" in err
    assert resolve("xor-attriqa-match:train,val,fi,ru").is_dir()
    assert not (tmp_path / "out").exists()


# -- commands read datasets by name ------------------------------------------------------------------------------------


def test_names_resolve_to_the_cache_and_record_as_names(data_dir, monkeypatch):
    for name in ("xor-attriqa-match:fi", "xor-attriqa-match:train,val,fi,ru", "xor-attriqa-full:val", "eli5-alce",
                 "eli5-alce-prompt", "beir-small", "xor-attriqa-fi-ru"):
        path = resolve(name)
        assert path.exists() and path.is_relative_to(data_dir)
        assert data_label(path) == name  # what a run records: the name, not this machine's folder
    monkeypatch.chdir(ROOT)
    assert data_label(ROOT / "tests" / "data" / "x.jsonl") == "tests/data/x.jsonl"  # a path: relative to the cwd
    assert data_label("../shared/x.jsonl") == "../shared/x.jsonl"  # a relative path: as given


def test_the_bias_study_reads_the_named_splits_as_the_data_folder(data_dir, data_folder, tmp_path):
    """`data: xor-attriqa-match:train,val,fi,ru` (configs/bias/studies/) is the folder the shipped studies read."""
    from mirage.bias.items import load_xor_rows

    by_name, bad = load_xor_rows(resolve("xor-attriqa-match:train,val,fi,ru"))
    shipped, shipped_bad = load_xor_rows(data_folder / "xor_attriqa_match")
    assert by_name == shipped and len(by_name) == 332 and len(bad) == len(shipped_bad)
    assert main(["bias", "xor-attriqa-match:train,val,fi,ru", "-o", str(tmp_path / "requests"), "--write-requests",
                 "--limit", "3"]) == 0
    assert main(["bias", str(data_folder / "xor_attriqa_match"), "-o", str(tmp_path / "shipped"), "--write-requests",
                 "--limit", "3"]) == 0
    named, given = sorted((tmp_path / "requests").rglob("*.jsonl")), sorted((tmp_path / "shipped").rglob("*.jsonl"))
    assert named and [p.read_bytes() for p in named] == [p.read_bytes() for p in given]


def test_the_fi_ru_file_is_the_two_parts_in_one_and_the_bias_study_reads_it_as_that_file(data_dir, tmp_path):
    """``xor-attriqa-fi-ru`` is fi's rows then ru's, byte for byte (pinned), numbered as one file's rows
    (``xor_fi_ru-LINE``: the ids that seed where each question's documents go), so that the study of the name builds
    the prompts of the same rows joined by hand (``cat fi.jsonl ru.jsonl``), not those of the two parts read apart."""
    from mirage.bias.items import load_xor_rows

    path = resolve("xor-attriqa-fi-ru")
    joined = tmp_path / "xor_fi_ru.jsonl"
    joined.write_bytes(resolve("xor-attriqa-match:fi").read_bytes() + resolve("xor-attriqa-match:ru").read_bytes())
    assert path.read_bytes() == joined.read_bytes() and data_label(path) == "xor-attriqa-fi-ru"
    rows, _ = load_xor_rows(path)
    assert rows == load_xor_rows(joined)[0] and rows[0][0].startswith("xor_fi_ru-")
    out = {}
    for name, data in (("named", "xor-attriqa-fi-ru"), ("joined", str(joined)), ("parts", "xor-attriqa-match:fi,ru")):
        assert main(["bias", data, "-o", str(tmp_path / name), "--write-requests", "--limit", "3"]) == 0
        out[name] = [p.read_bytes() for p in sorted((tmp_path / name).rglob("*.jsonl"))]
    assert out["named"] and out["named"] == out["joined"] != out["parts"]


def test_retrieve_and_tune_data_take_names(data_dir, tmp_path):
    assert main(["retrieve", "beir-small", "--retriever", "bm25", "-o", str(tmp_path / "named.trec")]) == 0
    assert main(["retrieve", str(DATA / "beir_small"), "--retriever", "bm25", "-o", str(tmp_path / "path.trec")]) == 0
    assert (tmp_path / "named.trec").read_text() == (tmp_path / "path.trec").read_text()
    assert main(["tune", "data", "gold", "--xor", "xor-attriqa-match:val", "--eli5-demos", "eli5-alce-prompt",
                 "-o", str(tmp_path / "gold.jsonl"), "--quiet"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "gold.jsonl").read_text().splitlines()]
    assert {r["source"] for r in rows} == {"xor-attriqa", "eli5-demo"} and len(rows) > 4


def test_tune_commands_read_a_name_of_several_parts_as_each_part_s_file(data_dir, tmp_path):
    """`mirage tune data --xor xor-attriqa-match:train,val` and `mirage tune eval xor-attriqa-match:fi,ru` (as the
    tuning guide writes them) read each part's file, and the examples record each part's name."""
    from mirage.data import resolve_files

    assert resolve_files(["xor-attriqa-match:ru,fi", "eli5-alce-prompt"]) == [
        str(resolve("xor-attriqa-match:fi")), str(resolve("xor-attriqa-match:ru")), str(resolve("eli5-alce-prompt"))]
    assert resolve_files([resolve("xor-attriqa-match:fi,ru")]) == [  # a folder: its JSONL files
        str(resolve("xor-attriqa-match:fi,ru") / "fi.jsonl"), str(resolve("xor-attriqa-match:fi,ru") / "ru.jsonl")]
    assert main(["tune", "data", "gold", "--xor", "xor-attriqa-match:train,val", "-o", str(tmp_path / "both.jsonl"),
                 "--quiet"]) == 0
    assert main(["tune", "data", "gold", "--xor", "xor-attriqa-match:train", "xor-attriqa-match:val",
                 "-o", str(tmp_path / "each.jsonl"), "--quiet"]) == 0
    both = (tmp_path / "both.jsonl").read_text()
    assert both == (tmp_path / "each.jsonl").read_text()
    files = {json.loads(line)["file"] for line in both.splitlines()}
    assert files == {"xor-attriqa-match:train", "xor-attriqa-match:val"}


def test_attribute_reads_a_dataset_of_items(data_dir, tmp_path, capsys, monkeypatch):
    """`mirage attribute eli5-alce`: the name is the cached file (so -o over it is refused before a model loads);
    without the cache, one line naming `mirage data get`."""
    sample = resolve("eli5-alce")
    assert main(["attribute", "eli5-alce", "-o", str(sample)]) == 2
    assert capsys.readouterr().err.strip() == (f"mirage: error: -o {sample} is the input file; "
                                               "results go to a new file "
                                               f"(e.g. {sample.with_name(sample.stem + '.attributed.jsonl')}), never "
                                               "over the input.")
    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "empty"))
    assert main(["attribute", "eli5-alce", "-o", str(tmp_path / "out.jsonl")]) == 2
    assert "run `mirage data get eli5-alce`" in capsys.readouterr().err


def test_data_list_and_get_report_the_cache(data_dir, capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    for name in DATASETS:
        assert name in out
    assert "cached: train,val,fi,ru" in out and "cached: yes" in out
    assert main(["data", "get", "eli5-alce", "--quiet"]) == 0  # already there: checked, not downloaded
    assert capsys.readouterr().out.strip() == f"eli5-alce: {data_dir / 'eli5_alce' / 'eli5_eval_sample.json'}"


# -- no machine paths in the repository --------------------------------------------------------------------------------

#: An absolute path of a machine's working or home folders (built in two parts so that this file does not hold one).
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:" + "work|root|home" + r")/[\w.-]")
#: Tracked files allowed to name one, and why (none today).
MACHINE_PATH_EXCEPTIONS: dict[str, str] = {}


def test_no_tracked_file_names_a_machine_path():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    found = []
    for name in filter(None, files):
        path = ROOT / name
        if name in MACHINE_PATH_EXCEPTIONS or not path.is_file():
            continue
        data = path.read_bytes()
        if name.endswith(".gz"):
            data = gzip.decompress(data)
        text = data.decode("utf-8", errors="ignore")
        found += [f"{name}: {m.group(0)}…" for m in MACHINE_PATH.finditer(text)][:3]
    assert not found, "machine paths in tracked files:\n" + "\n".join(found)
