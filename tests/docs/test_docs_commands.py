"""Every command the README and the docs show parses as written: each ``mirage …`` line of their ```bash blocks
(also ``python -m mirage.cli …`` after ``torchrun`` / ``accelerate launch``) goes through mirage's own parser, its
dataset names are registered datasets with registered parts, and the repo files it names exist. The cheap commands
(no model, no network) run for real.

Placeholders, as the docs write them, are read by these rules (:func:`variants`):

- ``[...]`` is an optional group: each command is parsed without its groups, and with all of them;
- ``A | B`` inside a group, or ``a|b|c`` in one word, are alternatives: the ``i``-th variant with the groups takes
  each one's ``i``-th alternative (the last where it has fewer), so every alternative is parsed once;
- the words of :data:`PLACEHOLDERS` (``DIR``, ``DATA``, ``INPUT.json``, ``N``, …) stand for a value of their kind;
- ``VAR=value`` lines set ``$VAR`` for the lines after them.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
from pathlib import Path

import pytest

from mirage.cli import build_parser, main
from mirage.data.registry import is_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: What each placeholder word of the docs stands for when a command is parsed.
PLACEHOLDERS = {"DIR": "out/dir", "DIR2": "out/dir2", "OUT": "out/run", "REQ": "out/requests", "DATA": "eli5-alce",
                "DATA...": "xor-attriqa-match:fi", "INPUT.json": "examples/rag_items.json",
                "OUTPUT.jsonl": "out/attributed.jsonl", "FILE": "configs/paper/table3_eli5_zephyr.yaml",
                "NAME": "smollm2-135m-instruct", "N": "3", "K": "1", "T": "0.5", "P": "5"}
#: Words naming a file of this repository: it must exist.
REPO_FILES = ("configs/", "examples/", "benchmarks/results/")


def bash_blocks(page: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of each fenced ```bash block of ``page``."""
    blocks, start, lines = [], None, page.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if start is None and line.strip() == "```bash":
            start = i + 1
        elif start is not None and line.strip().startswith("```"):
            blocks.append((start + 1, "\n".join(lines[start:i])))
            start = None
    return blocks


def command_lines(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped, ``VAR=value`` lines applied to the
    ``$VAR`` of the lines after them, one command per ``&&`` / ``;``."""
    env: dict[str, str] = {}
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words and all(re.match(r"^[A-Z_]+=", w) for w in words):
            env.update(w.split("=", 1) for w in words)
            continue
        for var, value in env.items():
            line = line.replace(f"${var}", value)
        out += [part.strip() for part in re.split(r"&&|;", _uncommented(line)) if part.strip()]
    return out


def _uncommented(line: str) -> str:
    """``line`` without its trailing ``# comment`` (a ``#`` outside quotes, after a space)."""
    quote = None
    for i, ch in enumerate(line):
        if ch in "\"'" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or line[i - 1] == " "):
            return line[:i]
    return line


def mirage_argv(command: str) -> list[str] | None:
    """The arguments a command gives ``mirage`` (``mirage ARGS``, or ``… -m mirage.cli ARGS`` after a launcher and
    environment settings), else None."""
    words = command.split()
    while words and re.match(r"^[A-Z_]+=", words[0]):
        words = words[1:]
    if words[:1] == ["mirage"]:
        return words[1:]
    if "mirage.cli" in words and words[words.index("mirage.cli") - 1] == "-m":
        return words[words.index("mirage.cli") + 1:]
    return None


def variants(argv: list[str]) -> list[list[str]]:
    """The argument lists a documented command stands for (see the module's rules)."""
    text = " ".join(argv)
    groups = re.findall(r"\[([^\[\]]*)\]", text)
    alternatives = [[alt.strip() for alt in g.split(" | ")] for g in groups]
    words_alts = [w for w in text.split() if "|" in w.strip("[]") and w.strip("[]") != "|"]
    n = max([1, *(len(a) for a in alternatives), *(len(w.strip("[]").split("|")) for w in words_alts)])
    texts = [re.sub(r"\s*\[[^\[\]]*\]", "", text)]
    for i in range(n):
        chosen = iter([a[min(i, len(a) - 1)] for a in alternatives])
        texts.append(re.sub(r"\[[^\[\]]*\]", lambda _m, chosen=chosen: next(chosen), text))
    out = []
    for index, t in enumerate(texts):  # texts[0]: without the groups; texts[i + 1]: the i-th alternatives
        words = shlex.split(t)
        for k, w in enumerate(words):
            if "|" in w:
                alts = w.split("|")
                words[k] = alts[min(max(index - 1, 0), len(alts) - 1)]
        words = [PLACEHOLDERS.get(w, w) for w in words]
        if words not in out:
            out.append(words)
    return out


def documented_commands() -> list[tuple[str, list[str]]]:
    """``(where, argv)`` of every variant of every ``mirage`` command of the README and the docs."""
    out = []
    for page in PAGES:
        for line, block in bash_blocks(page):
            for command in command_lines(block):
                argv = mirage_argv(command)
                for variant in variants(argv) if argv is not None else []:
                    out.append((f"{page.relative_to(ROOT)}:{line}: mirage {shlex.join(variant)}", variant))
    return out


def parse_error(argv: list[str]) -> str | None:
    """What mirage's parser says of ``argv`` (as ``main`` parses it, without running it); None when it parses."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser(argv).parse_args(argv)
    except SystemExit as exit_:
        return err.getvalue().strip().splitlines()[-1] if exit_.code else None
    return None


def argument_errors(argv: list[str]) -> list[str]:
    """The dataset names of ``argv`` that are not registered datasets and parts, and the repo files it names that
    are not there."""
    errors = []
    for word in argv:
        for value in (word, word.split("=", 1)[-1]):
            if is_spec(value) or re.fullmatch(r"[a-z0-9-]+:[a-z0-9_,-]+", value):
                try:
                    parse_spec(value)
                except Exception as err:  # noqa: BLE001 - reported with the command
                    errors.append(str(err))
            if value.startswith(REPO_FILES) and not (ROOT / value).exists():
                errors.append(f"{value}: no such file in the repository")
    return errors


DOCUMENTED = documented_commands()


def test_the_docs_show_commands():
    shown = {argv[0] for _where, argv in DOCUMENTED}
    assert len(DOCUMENTED) > 30 and {"attribute", "score", "bias", "view", "tune", "data"} <= shown, shown


@pytest.mark.parametrize(("where", "argv"), DOCUMENTED, ids=[w for w, _a in DOCUMENTED])
def test_documented_command_parses(where, argv):
    """A flag the parser does not have, a choice it does not take, an unknown dataset or part, or a missing repo file
    in a documented command fails here, naming the page and line."""
    problems = [p for p in (parse_error(argv), *argument_errors(argv)) if p]
    assert not problems, f"{where}: {'; '.join(problems)}"


def test_the_checks_catch_a_broken_command():
    """The checks above fail for a flag, a choice, a dataset part and a file that do not exist."""
    assert "--max-new-tokenz" in parse_error(["attribute", "a.json", "-o", "b.jsonl", "--max-new-tokenz", "3"])
    assert "invalid choice" in parse_error(["score", "xor-attriqa", "d", "-o", "o", "--settings", "nope"])
    assert argument_errors(["score", "xor-attriqa", "xor-attriqa-match:fr"])
    assert argument_errors(["bias", "--config", "configs/bias/studies/nope.yaml"])
    broken = "```bash\nmirage attribute INPUT.json -o OUTPUT.jsonl [--quantization 8bit|2bit]\n```\n"
    (argv,) = [mirage_argv(c) for b in re.findall(r"```bash\n(.*?)\n```", broken, re.DOTALL) for c in command_lines(b)]
    assert [parse_error(v) is not None for v in variants(argv)] == [False, False, True]


# ---------------------------------------------------------------------------------- the cheap commands, run for real
def test_data_list_runs(capsys):
    assert main(["data", "list"]) == 0
    assert "xor-attriqa-match" in capsys.readouterr().out


def test_documented_data_get_runs_from_a_local_copy(data_folder, tmp_path, monkeypatch):
    """Each ``mirage data get NAME`` of the docs, ``--from`` the data folder as the tests' cache is filled (a whole
    dataset as the parts that folder holds)."""
    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "cache"))
    from conftest import SHARED_DATASETS

    shared = {name.split(":")[0]: name for name in SHARED_DATASETS}  # the data folder's parts of each dataset
    names = [shared.get(argv[2], argv[2]) if ":" not in argv[2] else argv[2]
             for _where, argv in DOCUMENTED if argv[:2] == ["data", "get"]]
    assert names
    assert main(["data", "get", *names, "--from", str(data_folder), "--quiet"]) == 0


def test_documented_view_of_a_bias_run_runs(tmp_path, monkeypatch):
    (argv,) = [a for _w, a in DOCUMENTED if a[:2] == ["view", "benchmarks/results/bias_smollm2_hai"]]
    monkeypatch.chdir(ROOT)
    out = tmp_path / argv[argv.index("-o") + 1]
    assert main([*argv[:argv.index("-o")], "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8").startswith("<!")


def test_report_writes_a_copied_run_folders_page(tmp_path):
    """``mirage report DIR`` on a copy of a published run folder writes its page from its results alone, touching
    no other file."""
    from mirage.views.pages.core import MARK

    run = tmp_path / "bias_smollm2_hai"
    shutil.copytree(ROOT / "benchmarks" / "results" / "bias_smollm2_hai", run)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != "README.md"}
    (run / "README.md").unlink()
    assert main(["report", str(run)]) == 0
    assert (run / "README.md").read_text(encoding="utf-8").startswith(MARK)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != "README.md"} == before
