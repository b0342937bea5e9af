"""The benchmark harness (``benchmarks/harness.py``): every script of ``benchmarks/`` gets its command line from it and
builds no parser of its own, no script imports another's private names, each script's ``--help`` lists its flags, and
every ``python benchmarks/NAME.py …`` command the docs and the results write still parses.

The scripts are commands, never imported here (tests import the library alone): one child interpreter imports them
through the harness, as ``python benchmarks/NAME.py`` finds it, builds each parser and parses the commands, without
running any script."""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem not in ("__init__", "harness"))
#: The calls that build or run a parser: the harness's alone.
PARSER_CALLS = ("ArgumentParser", "add_argument", "add_argument_group", "add_mutually_exclusive_group",
                "add_subparsers", "parse_args", "parse_known_args")
#: What the docs write for a value they leave open: ``N`` a number, ``…`` more values (dropped).
PLACEHOLDERS = {"N": "3", "…": None}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def _parser_findings(path: Path) -> list[str]:
    """What a script must not do itself: import argparse, build or run a parser, or put a folder on ``sys.path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "argparse" for a in node.names):
            found.append(f"{node.lineno}: import argparse")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "argparse":
            found.append(f"{node.lineno}: from argparse import …")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in PARSER_CALLS or (isinstance(func, ast.Attribute) and ast.unparse(func.value) == "sys.path"):
                found.append(f"{node.lineno}: {ast.unparse(func)}(…)")
    return found


def _private_import_findings(path: Path, scripts: set[str]) -> list[str]:
    """Private names (``_x``) of another script (or of the harness) that a script imports or reads
    (``from benchmarks.x import _y``, ``from x import _y``, ``x._y`` on a script module it imported)."""
    found, aliases = [], set()  # aliases: local (dotted) names bound to a script module
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            parts = node.module.split(".")
            ours = parts[0] in scripts or (parts[0] == "benchmarks" and (len(parts) == 1 or parts[1] in scripts))
            for alias in node.names:
                if ours and _private(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                elif node.module == "benchmarks" and alias.name in scripts:
                    aliases.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[-1] in scripts and parts[0] in (*scripts, "benchmarks"):
                    aliases.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and ast.unparse(node.value) in aliases:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_script_builds_its_own_parser():
    """argparse, a parser's calls and ``sys.path`` belong to the harness: a script declares its options only."""
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(BENCHMARKS.glob("*.py")) if path.name != "harness.py"
             for line in _parser_findings(path)]
    assert not found, "scripts that build a parser or set sys.path themselves:\n" + "\n".join(found)


def test_no_script_imports_another_scripts_private_names():
    scripts = {*SCRIPTS, "harness"}
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(BENCHMARKS.glob("*.py"))
             for line in _private_import_findings(path, scripts)]
    assert not found, "private names used across scripts (make them public where they live):\n" + "\n".join(found)


def test_the_checks_find_what_they_forbid(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import argparse\nimport sys\nfrom benchmarks.bench_attribution import _cases, attribution_cases\n"
                   "from benchmarks import bench_scale\nimport cpu_allocator as ca\nfrom harness import _private\n"
                   "sys.path.insert(0, 'x')\np = argparse.ArgumentParser()\np.add_argument('--x')\n"
                   "bench_scale._key, ca._x, ca.MODES, bench_scale.__doc__\n", encoding="utf-8")
    assert [line.split(":")[0] for line in _parser_findings(bad)] == ["1", "7", "8", "9"]
    found = _private_import_findings(bad, {"bench_attribution", "bench_scale", "cpu_allocator", "harness"})
    assert [line.split(":")[0] for line in found] == ["3", "6", "10", "10"], found


def test_each_script_is_a_harness_command():
    """A script imports the harness before anything of mirage or of another script (the harness puts the checkout
    first on ``sys.path``), declares ``Options`` and ``run``, and its command runs ``main(Options, run)``."""
    wrong = []
    for name in SCRIPTS:
        tree = ast.parse((BENCHMARKS / f"{name}.py").read_text(encoding="utf-8"))
        modules = [node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                   for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        harness = next((k for k, module in enumerate(modules) if module == "harness"), None)
        own = next((k for k, module in enumerate(modules) if (module or "").split(".")[0] in ("mirage", "benchmarks")),
                   len(modules))
        if harness is None or harness > own:
            wrong.append(f"{name}: imports mirage or benchmarks before the harness")
        defined = {node.name: type(node) for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        if defined.get("Options") is not ast.ClassDef or defined.get("run") is not ast.FunctionDef:
            wrong.append(f"{name}: no class Options and function run")
        guard = tree.body[-1]
        if not (isinstance(guard, ast.If) and ast.unparse(guard.test) == "__name__ == '__main__'"
                and [ast.unparse(s) for s in guard.body] == ["main(Options, run)"]):
            wrong.append(f"{name}: its command is not main(Options, run)")
    assert not wrong, "\n".join(wrong)


# -- the parsers, built in one child interpreter ----------------------------------------------------------------------


_INLINE = re.compile(r"`(python3? benchmarks/[a-z_]+\.py\b[^`]*)`")
_COMMAND = re.compile(r"python3? benchmarks/([a-z_]+)\.py\b")


def _markdown_commands(text: str):
    """The ``python benchmarks/NAME.py …`` command lines of a markdown page: in code spans, and the lines of fenced
    blocks (continuation lines joined)."""
    for k, part in enumerate(text.split("```")):
        if k % 2:  # a fenced block
            for line in re.sub(r"\\\n\s*", " ", part).splitlines():
                if _COMMAND.match(line.strip()):
                    yield line.strip()
        else:
            yield from (m.group(1) for m in _INLINE.finditer(part))


def _json_commands(value):
    """The ``command`` fields of a results file that run a script."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "command" and isinstance(item, str) and _COMMAND.match(item):
                yield item
            else:
                yield from _json_commands(item)
    elif isinstance(value, list):
        for item in value:
            yield from _json_commands(item)


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """``(where, script, argv)`` of every script command in docs/*.md, README.md, the results' pages
    (benchmarks/results/**/*.md) and the results' ``command`` fields (benchmarks/results/**/*.json); the docs'
    placeholders (:data:`PLACEHOLDERS`) read as sample values."""
    found = []
    results = BENCHMARKS / "results"
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", *sorted(results.rglob("*.md"))]
    for path in pages:
        for line in _markdown_commands(path.read_text(encoding="utf-8")):
            found.append((path, line))
    for path in sorted(results.rglob("*.json")):
        text = path.read_text(encoding="utf-8")
        if '"command"' in text and "benchmarks/" in text:
            found += [(path, line) for line in _json_commands(json.loads(text))]
    out = []
    for path, line in found:
        words = shlex.split(line, comments=True)
        argv = [PLACEHOLDERS.get(w, w) for w in words[2:] if PLACEHOLDERS.get(w, w) is not None]
        out.append((str(path.relative_to(ROOT)), _COMMAND.match(line).group(1), argv))
    return out


#: Run in a child interpreter, from a folder outside the repository: import each script as ``python
#: benchmarks/NAME.py`` finds it (``benchmarks/`` first on sys.path, the harness before mirage), build its parser
#: through the harness, show ``--help``, and parse the given command lines (stdin: script → argv lists).
_CHILD = """
import contextlib, importlib, io, json, sys
sys.path.insert(0, sys.argv[1])
import harness
import mirage
from mirage.options import options_from_args
commands = json.load(sys.stdin)
out = {"mirage": mirage.__file__, "scripts": {}}
for name in sys.argv[2:]:
    module = importlib.import_module(name)
    parser = harness.script_parser(module)
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        try:
            parser.parse_args(["--help"])
            status = None
        except SystemExit as exit:
            status = exit.code
    parsed = []
    for argv in commands.get(name, []):
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                options = options_from_args(module.Options, parser.parse_args(argv))
            parsed.append(None)
        except SystemExit:
            parsed.append(errors.getvalue().strip().splitlines()[-1])
    out["scripts"][name] = {
        "status": status, "help": shown.getvalue(), "doc": module.__doc__, "prog": parser.prog,
        "description": parser.description,
        "names": [s for a in parser._actions if a.help != harness.HIDDEN for s in a.option_strings or [a.dest]],
        "errors": parsed}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Per script: its parser's ``--help`` (exit status, text), program name, flags and positionals, and the error of
    each documented command (None where it parses); ``documented``: the commands, by script."""
    documented: dict[str, list[tuple[str, list[str]]]] = {}
    for where, name, argv in documented_commands():
        documented.setdefault(name, []).append((where, argv))
    run = subprocess.run([sys.executable, "-c", _CHILD, str(BENCHMARKS), *SCRIPTS], cwd=tmp_path_factory.mktemp("cwd"),
                         input=json.dumps({n: [argv for _w, argv in cmds] for n, cmds in documented.items()}),
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return {**json.loads(run.stdout), "documented": documented}


def test_the_harness_reads_this_checkout(built):
    """Imported as a script imports it, the harness puts this repository first: mirage is this checkout's."""
    assert Path(built["mirage"]).resolve().is_relative_to(ROOT)


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_shows_its_flags(built, name):
    got = built["scripts"][name]
    assert got["status"] == 0 and got["prog"] == f"{name}.py"
    assert got["help"].startswith(f"usage: {name}.py ")
    assert got["description"] == got["doc"].strip().split("\n\n")[0]  # the docstring's first paragraph
    assert got["names"], name
    for flag in got["names"]:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", got["help"]), f"{name}: {flag} not in --help"


def test_every_documented_command_parses(built):
    """Each command line written in the docs and the results parses with its script's parser (the command lines
    stay as they were: the documented and recorded commands still run)."""
    documented = built["documented"]
    assert sum(len(cmds) for cmds in documented.values()) > 40  # the reader finds them
    unknown = sorted(set(documented) - set(SCRIPTS))
    assert not unknown, f"commands of scripts that are not there: {unknown}"
    failed = [f"{where}: python benchmarks/{name}.py {shlex.join(argv)}\n    {error}"
              for name, cmds in documented.items()
              for (where, argv), error in zip(cmds, built["scripts"][name]["errors"]) if error is not None]
    assert not failed, "documented commands that do not parse:\n" + "\n".join(failed)
