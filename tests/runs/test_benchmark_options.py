"""The benchmarks of ``mirage score`` (:data:`mirage.registry.BENCHMARKS`). Every registered one goes through the same
checks: its subcommand parses with every flag of its options, its fingerprint is plain JSON, stable, names the
benchmark and follows the model, its runner, table and option builder resolve to functions, and the results-page
kind it names exists. Registering one is enough for ``mirage score NAME`` to run it: a toy benchmark registered here
runs end to end through the command, its runner built from :mod:`mirage.scoring.runner` on the embedded model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from mirage.cli import build_parser, main
from mirage.options import cli_arg, option_fields
from mirage.registry import BENCHMARKS
from mirage.runs.benchmark_options import (
    KEEP_TRAINED_QUESTIONS,
    OUTPUT_DIR,
    Benchmark,
    register_benchmark,
    resolve_ref,
    score_help,
)
from mirage.runs.experiment import ExperimentConfig

ELI5 = Path(__file__).parents[1] / "data" / "eli5_alce" / "eli5_eval_sample.json"


def check_benchmark(benchmark: Benchmark, capsys: pytest.CaptureFixture[str]) -> None:
    """The conformance checks every registered benchmark passes."""
    assert BENCHMARKS[benchmark.name] is benchmark and benchmark.name in score_help()
    with pytest.raises(SystemExit) as done:
        main(["score", benchmark.name, "--help"])
    assert done.value.code == 0
    usage = capsys.readouterr().out
    assert usage.startswith(f"usage: mirage score {benchmark.name} ") and benchmark.description.split()[0] in usage
    flags = [opt.flag for opt in option_fields(benchmark.options)]
    assert flags and all(flag in usage for flag in flags), [f for f in flags if f not in usage]
    args = build_parser().parse_args(["score", benchmark.name, "data.file", "-o", "out"])
    assert args.benchmark == benchmark.name and args.output == "out"
    experiment = ExperimentConfig.from_dict({"data": ["data.file"]}, command=benchmark.name)
    fingerprint = experiment.fingerprint()
    assert json.loads(json.dumps(fingerprint)) == fingerprint == experiment.fingerprint()
    assert fingerprint["model"] == experiment.model and fingerprint.get("benchmark", benchmark.name) == benchmark.name
    other = dataclasses.replace(experiment, model="another-model").fingerprint()
    assert other != fingerprint and other["model"] == "another-model"
    if benchmark.default_prompt is not None:
        assert experiment.pipeline.prompt.name == benchmark.default_prompt
    for ref in (benchmark.runner, benchmark.table, benchmark.options_from):
        assert ref is None or callable(resolve_ref(ref)), ref
    if benchmark.page is not None:
        from mirage.views.pages import PAGE_KINDS

        assert benchmark.page in PAGE_KINDS, f"{benchmark.name}: no results-page kind {benchmark.page!r}"


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_every_registered_benchmark_parses_fingerprints_and_resolves(name, capsys):
    check_benchmark(BENCHMARKS[name], capsys)


# -- a benchmark registered by a user ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ToyOptions:
    """The toy benchmark's options: the output folder and the documents per question."""

    output: str = cli_arg(**OUTPUT_DIR)
    ndocs: int = cli_arg(2, flag="--ndocs", help="documents given to the model (default 2)")
    keep_trained_questions: bool = cli_arg(False, **KEEP_TRAINED_QUESTIONS)


@dataclasses.dataclass
class ToyReport:
    """The toy benchmark's report: the mean share of CTI-selected answer tokens."""

    items: int
    mean_share: float
    bad_rows: dict[str, Any]
    faithfulness: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def toy_runner(experiment: ExperimentConfig, options: ToyOptions, *, mirage: Any, progress: Any) -> ToyReport:
    """The share of each ALCE reference answer's tokens that CTI selects, built from mirage.scoring.runner."""
    from mirage.runs.lazy import resolve_mirage
    from mirage.scoring.eli5 import load_alce
    from mirage.scoring.runner import check_command, check_run, mirage_source, require_scored, save_results

    check_command(experiment, "toy")
    out = Path(options.output)
    check_run(out, experiment.fingerprint())
    data = load_alce(experiment.data[0], limit=experiment.limit)
    model = resolve_mirage(mirage_source(experiment, mirage))
    shares = []
    for item in data.items:
        res = model.attribute_item({"question": item.question, "docs": item.docs_dicts(options.ndocs),
                                    "output": item.answer}, config=experiment.pipeline)
        shares.append(sum(t.context_sensitive for t in res.tokens) / len(res.tokens))
    require_scored(out, experiment.data[0], len(shares), data.bad_rows)
    report = ToyReport(items=len(shares), mean_share=sum(shares) / len(shares), bad_rows={"count": 0, "rows": []})
    save_results(out, report)
    return report


def toy_table(report: ToyReport) -> str:
    return f"mean CTI share {report.mean_share:.3f} over {report.items} answers"


@pytest.fixture
def toy():
    """The toy benchmark, registered for the test and gone afterwards."""
    benchmark = Benchmark(name="toy", help="the share of reference answer tokens CTI selects (a test's benchmark)",
                          description="Force-decode each reference answer; report the share of its tokens CTI "
                                      "selects.",
                          options=ToyOptions, runner=f"{__name__}:toy_runner", table=f"{__name__}:toy_table",
                          data={"nargs": "?", "help": "ALCE-format file"})
    register_benchmark(benchmark)
    yield benchmark
    del BENCHMARKS["toy"]


def test_a_registered_benchmark_passes_the_checks_and_runs_as_mirage_score(toy, tmp_path, capsys):
    check_benchmark(toy, capsys)
    out = tmp_path / "run"
    code = main(["score", "toy", str(ELI5), "--limit", "1", "--model", "smollm2-135m-instruct", "--ndocs", "2",
                 "-o", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert report["items"] == 1 and 0 <= report["mean_share"] <= 1
    assert f"mean CTI share {report['mean_share']:.3f} over 1 answers" in printed
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["model"] == "smollm2-135m-instruct"


def test_a_benchmark_with_an_unusable_declaration_is_refused():
    from mirage.config import ConfigError

    with pytest.raises(ConfigError, match="runner must be 'module:function'"):
        Benchmark(name="bad", help="h", description="d", options=ToyOptions, runner="no_colon", table="m:f")
    with pytest.raises(ConfigError, match="fields output and keep_trained_questions"):
        Benchmark(name="bad", help="h", description="d", options=ToyReport, runner="m:f", table="m:f")
    with pytest.raises(ValueError, match="already registered"):
        register_benchmark(BENCHMARKS["eli5"])
