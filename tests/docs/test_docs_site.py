"""The documentation site builds offline with ``mkdocs build --strict`` (broken links, missing pages or a failing
generator fail it), its generated pages show every command, flag and config field of this version and the figures of
the results files, and the README stays a front door: short, its headline table read from the results files, its
command table naming every command, its links resolving."""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = ["index.html", "getting-started/index.html", "method/index.html", "fidelity/index.html", "api/index.html",
         "cli/index.html", "configuration/index.html", "benchmarks/index.html", "bias/index.html",
         "tuning/index.html", "scaling/index.html", "architecture/index.html",
         "notebooks/01_quickstart/index.html", "results/index.html", "results/xor_attriqa_smollm2_en/index.html"]


def _load_hooks():
    spec = importlib.util.spec_from_file_location("mirage_docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _load_hooks()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once into a temporary folder, with no network (nothing in the build may fetch)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1", "no_proxy": "*",
           "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    return out


def _text(site: Path, page: str) -> str:
    """A built page's text, tags stripped and entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", (site / page).read_text(encoding="utf-8")))


def test_site_has_its_pages(site):
    missing = [page for page in PAGES if not (site / page).exists()]
    assert not missing, f"pages missing from the built site: {missing}"


def test_cli_page_lists_every_command_and_flag(site):
    from mirage.cli import build_parser

    text = _text(site, "cli/index.html")
    commands = hooks.cli_commands()
    assert {"mirage attribute", "mirage score xor-attriqa", "mirage tune sft"} <= set(commands)
    missing = [c for c in commands if c not in text]
    assert not missing, f"commands missing from the CLI page: {missing}"
    flags = {o for _path, sub, _help in hooks._parsers(build_parser()) for a in sub._actions for o in a.option_strings}
    missing = sorted(f for f in flags if f not in text)
    assert not missing, f"flags missing from the CLI page: {missing}"
    assert str(ROOT) not in text, "the CLI page names this machine's paths"


def test_cli_page_shows_each_options_default():
    """The CLI reference shows each option's default: argparse's, else the config field's that a flag stands for
    (``--max-new-tokens``: GenerationConfig's 200; xor-attriqa's own ``--cci-target`` prob), else the one its help
    states. Only switches, required arguments and options whose default is "not given" (None, no config field, and
    a help that names no default: ``--limit``) show none."""
    import argparse

    from mirage.cli import build_parser

    page = hooks.cli_reference()
    attribute = page.split("## `mirage attribute`", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^\| `--max-new-tokens` .*? \| `200` \|", attribute, re.MULTILINE), "--max-new-tokens' default"
    xor = page.split("### `mirage score xor-attriqa`", 1)[1].split("\n### ", 1)[0]
    assert re.search(r"^\| `--cci-target` .*? \| `prob` \|", xor, re.MULTILINE), "xor-attriqa's --cci-target default"
    shown, not_given, missing = 0, [], []
    for path, sub, _help in hooks._parsers(build_parser()):
        for a in sub._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) or a.help == argparse.SUPPRESS:
                continue
            if a.nargs == 0 or a.required:
                continue
            name = f"{' '.join(path)} {'/'.join(a.option_strings) or a.dest}"
            if hooks._shown_default(a):
                shown += 1
            elif a.default is None and getattr(a, "config_default", None) is None and "default" not in (a.help or ""):
                not_given.append(name)
            else:
                missing.append(name)
    assert shown > 150 and not missing, (f"{len(missing)} options with a default the CLI page does not show: "
                                         f"{missing}; {len(not_given)} show none as they have none: {not_given}")


def test_config_page_lists_every_field(site):
    text = _text(site, "configuration/index.html")
    for heading, cls in hooks.config_classes():
        for f in dataclasses.fields(cls):
            assert f.name in text, f"{heading}.{f.name} missing from the configuration page"
            if "flag" in f.metadata:
                assert f.metadata["flag"] in text, f"{f.metadata['flag']} missing from the configuration page"


def test_costs_come_from_the_results_files(site):
    """The attribute command's cost quotes the benchmark files' figures (not text typed into a page)."""
    text = " ".join(_text(site, "cli/index.html").split())
    section = text.split("Attribution of", 1)[1].split("What it costs", 1)[0]
    for name in ("attribution.json", "gpu/attribution_gpu.json"):
        rows = json.loads((ROOT / "benchmarks" / "results" / name).read_text(encoding="utf-8"))["rows"]
        seconds = [r["mirage_s"] for r in rows if r.get("sweep") is None]
        assert f"{min(seconds):.2f}–{max(seconds):.2f} s" in section, name
    bench = _text(site, "benchmarks/index.html")
    gpu = json.loads((ROOT / "benchmarks" / "results" / "gpu" / "attribution_gpu.json").read_text(encoding="utf-8"))
    assert gpu["device_name"] in bench and f"{gpu['rows'][0]['reference_s']:.1f} s" in bench


def test_api_page_is_rendered_from_docstrings(site):
    from mirage.pipeline import Mirage

    text = _text(site, "api/index.html")
    assert "from_pretrained" in text and "score_tokens" in text
    first_line = Mirage.attribute.__doc__.strip().splitlines()[0].replace("`", "")
    assert " ".join(first_line.split()[:6]) in " ".join(text.split())


def test_notebook_page_shows_the_notebook(site):
    text = _text(site, "notebooks/01_quickstart/index.html")
    stored = json.loads((ROOT / "notebooks" / "01_quickstart.ipynb").read_text(encoding="utf-8"))
    first_code = next("".join(c["source"]) for c in stored["cells"] if c["cell_type"] == "code")
    assert first_code.splitlines()[0].strip() in text


def test_executed_notebook_is_shown_only_when_it_matches(tmp_path, monkeypatch):
    """The site takes the tests' executed copy of a notebook when its cells are the stored ones, else the stored
    notebook: a stale copy (the notebook changed since the tests ran) is never shown."""
    stored, executed = tmp_path / "notebooks", tmp_path / "out" / "notebooks"
    stored.mkdir()
    executed.mkdir(parents=True)
    cells = [{"cell_type": "code", "source": "print(1)", "outputs": [], "metadata": {}, "execution_count": None}]
    (stored / "a.ipynb").write_text(json.dumps({"cells": cells}), encoding="utf-8")
    ran = [{**cells[0], "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}]}]
    (executed / "a.ipynb").write_text(json.dumps({"cells": ran}), encoding="utf-8")
    monkeypatch.setattr(hooks, "NOTEBOOKS", stored)
    monkeypatch.setattr(hooks, "EXECUTED", executed)
    assert hooks.notebook_source("a.ipynb") == executed / "a.ipynb"
    (stored / "a.ipynb").write_text(json.dumps({"cells": [{**cells[0], "source": "print(2)"}]}), encoding="utf-8")
    assert hooks.notebook_source("a.ipynb") == stored / "a.ipynb"


def test_unknown_generated_block_fails_the_build():
    class Page:
        class file:
            src_uri = "x.md"

    with pytest.raises(ValueError, match="unknown generated block 'nope'"):
        hooks.on_page_markdown("a\n<!-- mirage:nope -->\n", page=Page, config={}, files=[])


def test_a_results_page_brings_no_raw_html_into_the_site(tmp_path, monkeypatch):
    """A results folder's page and the stand-in page of a folder without one reach the site with no raw HTML and no
    ``javascript:`` link, whatever the run's values and file names held; the page's mark stays a comment."""
    import markdown

    from mirage.views.pages.core import MARK

    monkeypatch.setattr(hooks, "RESULTS", tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "<img src=x onerror=alert(1)>.json").write_text("{}", encoding="utf-8")

    class Page:
        class file:
            src_uri = "results/run/README.md"
            abs_src_path = None

    written = f"{MARK}\n\n# m <script>alert(2)</script>\n\n| a | [x](javascript:alert(3)) |\n|---|---|\n"
    for page in (written, hooks._results_page(tmp_path / "run")):
        shown = hooks.on_page_markdown(page, page=Page, config={}, files=[])
        site = markdown.markdown(shown, extensions=["tables"])
        assert "<script" not in site and "<img" not in site and 'href="javascript' not in site, site
    assert hooks.on_page_markdown(written, page=Page, config={}, files=[]).startswith(MARK + "\n")


def test_written_pages_type_no_measured_figure():
    """Times, memory and speedups on the hand-written pages come from the results files through docs/hooks.py (a
    ``<!-- mirage:... -->`` block) or a link to a results page, never typed: outside code, no page has a number with
    one of those units."""
    unit = re.compile(r"\d(?:[\d.,]*\d)?\s?(?:×|x\b|s\b|ms\b|min\b|h\b|[KMG]i?B\b)")
    typed = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
        text = re.sub(r"`[^`]*`", "", text)
        typed += [f"{page.name}: {m.group(0)!r}" for m in unit.finditer(text)]
    assert not typed, "measured figures typed into the docs (generate them, or link the results page):\n" + \
        "\n".join(typed)


# ------------------------------------------------------------------------------------------------------------- README
def _section(heading: str) -> str:
    return README.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_is_a_front_door():
    assert len(README.splitlines()) <= 350
    blocks = re.findall(r"```bash\n(.*?)\n```", _section("The two commands"), flags=re.DOTALL)
    assert len(blocks) == 2
    assert "mirage attribute examples/rag_items.json" in blocks[0] and "scripts/test.sh" in blocks[1]


def test_readme_headline_table_is_read_from_the_results():
    """The README's one results table is exactly what docs/hooks.py renders from the results files: a figure typed
    by hand, or a results file that changed, fails here."""
    table = "\n".join(line for line in _section("Results").splitlines() if line.startswith("|"))
    assert table == hooks.headline_table(), ("the README's results table differs from the results files; paste "
                                             "docs/hooks.py's headline_table() output")


def test_readme_command_table_names_every_command():
    from mirage.cli import commands

    table = _section("Commands")
    missing = [c.name for c in commands() if f"`mirage {c.name}" not in table]
    assert not missing, f"commands missing from the README's command table: {missing}"


def test_readme_links_resolve():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    assert links
    broken = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert not broken, f"README links to missing files: {broken}"
