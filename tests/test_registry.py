"""The registries' plug-in point (:func:`mirage.registry.load_plugins`): a package installed beside mirage that names a
module under the ``mirage.plugins`` entry-point group gets its registrations into every ``mirage`` command without
any edit to mirage. The package here is a real installed distribution (a ``.dist-info`` folder with its
``entry_points.txt``, as pip writes it) on the ``PYTHONPATH`` of a real ``python -m mirage`` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mirage.registry import PLUGIN_GROUP, Registry, load_plugins

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = '''
"""A benchmark that counts a file's non-empty lines, and a CTI metric, registered on import."""
import dataclasses
from pathlib import Path

from mirage.attribution.cti import register_cti_metric
from mirage.options import cli_arg
from mirage.runs.benchmark_options import KEEP_TRAINED_QUESTIONS, OUTPUT_DIR, Benchmark, register_benchmark


@dataclasses.dataclass(frozen=True)
class LineOptions:
    output: str = cli_arg(**OUTPUT_DIR)
    keep_trained_questions: bool = cli_arg(False, **KEEP_TRAINED_QUESTIONS)


@dataclasses.dataclass
class LineReport:
    lines: int

    def to_dict(self):
        return dataclasses.asdict(self)


def run(experiment, options, *, mirage, progress):
    from mirage.scoring.runner import save_results

    lines = [line for line in Path(experiment.data[0]).read_text(encoding="utf-8").splitlines() if line.strip()]
    report = LineReport(lines=len(lines))
    save_results(Path(options.output), report)
    return report


def table(report):
    return f"{report.lines} lines counted"


register_benchmark(Benchmark(name="line-count", help="count a file's lines (a plug-in's benchmark)",
                             description="Count the non-empty lines of a file.", options=LineOptions,
                             runner=f"{__name__}:run", table=f"{__name__}:table",
                             data={"nargs": "?", "help": "a text file"}))
register_cti_metric("plugin_abs_diff", lambda logp_ctx, logp_noctx, answer_ids: (logp_ctx - logp_noctx).abs())
'''


def install(site: Path, module: str, source: str) -> None:
    """A distribution ``mirage-test-plugin`` in ``site``, as pip installs it, naming ``module`` under the group."""
    (site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = site / "mirage_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mirage-test-plugin\nVersion: 0.1\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[{PLUGIN_GROUP}]\ndemo = {module}\n", encoding="utf-8")


def python(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a process whose path holds ``site`` (the installed plug-in, if any) and this checkout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, check=False,
                          timeout=300)


def mirage(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return python(site, "-m", "mirage", *args, cwd=cwd)


def test_an_installed_plugin_adds_a_benchmark_and_a_metric_to_the_commands(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    install(site, "mirage_line_plugin", PLUGIN)
    listed = mirage(site, "score", "--help", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "line-count" in listed.stdout and "count a file's lines" in listed.stdout
    data = tmp_path / "three.txt"
    data.write_text("a\n\nb\nc\n", encoding="utf-8")
    ran = mirage(site, "score", "line-count", str(data), "-o", str(tmp_path / "run"), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "3 lines counted" in ran.stdout
    assert json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))["lines"] == 3
    # the metric is a valid cti.metric: the configuration accepts it
    check = ("from mirage.registry import load_plugins; load_plugins(); from mirage.config import MirageConfig; "
             "print(MirageConfig.from_dict({'cti': {'metric': 'plugin_abs_diff'}}).cti.metric)")
    out = python(site, "-c", check, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "plugin_abs_diff", out.stderr
    # without the distribution on the path, neither exists: the benchmark is not listed, the metric is refused
    bare = mirage(tmp_path / "empty", "score", "--help", cwd=tmp_path)
    assert bare.returncode == 0 and "line-count" not in bare.stdout
    refused = python(tmp_path / "empty", "-c", check, cwd=tmp_path)
    assert refused.returncode == 1 and "plugin_abs_diff" in refused.stderr and "ConfigError" in refused.stderr


def test_a_plugin_that_fails_to_import_is_one_line_naming_it_and_the_fix(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    install(site, "mirage_broken_plugin", "raise RuntimeError('needs a GPU library')\n")
    out = mirage(site, "score", "--help", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    line = out.stderr.strip()
    assert "\n" not in line, line
    assert line.startswith("mirage: error: plug-in 'demo' (mirage_broken_plugin, installed by mirage-test-plugin)")
    assert "RuntimeError: needs a GPU library" in line and "uninstall mirage-test-plugin" in line


def test_load_plugins_runs_once_and_the_test_suite_has_loaded_them():
    # conftest.py loads the installed plug-ins before collection, so their entries are parametrised by every
    # registry's conformance test; a second call imports nothing again
    first = load_plugins()
    assert load_plugins() is first
    from importlib.metadata import entry_points

    assert first == sorted(point.name for point in entry_points(group=PLUGIN_GROUP))


def test_a_registry_refuses_a_silent_overwrite_and_names_its_entries():
    registry: Registry[int] = Registry("widget")
    registry.register("a", 1)
    with pytest.raises(ValueError, match="widget 'a' is already registered; pass overwrite=True"):
        registry.register("a", 2)
    registry.register("a", 2, overwrite=True)
    assert registry.lookup("a") == 2
    with pytest.raises(ValueError, match="unknown widget 'b'; registered: 'a'"):
        registry.lookup("b")
    with pytest.raises(ValueError, match="non-empty string"):
        registry.register(" ", 3)
