"""``mirage bias``: attribution sensitivity and bias, for self-citations and for mirage's citations.

    mirage bias DATA -o DIR [--model NAME] [--metadata hai|hai-extended|hai-names|hai-names-pool|gender|race|custom]
                [--labels A B] [--ndocs 5] [--modes vanilla informed counterfactual mixed] [--seed S] [--limit N]
                [--retriever bm25 dense [--top-k 100]] [--sweep-k 2 5 8 10 | --sweep FIELD V1 V2 ...]
    mirage retrieve BEIR_DIR --retriever bm25|dense -o run.trec [--top-k 100]
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from mirage.bias.protocol import BIAS_CONFIG_DIR, GRID_MODES, MODES, BiasConfig
from mirage.config import ConfigError, read_config_file
from mirage.data import resolve
from mirage.options import add_options, cli_arg, given_options
from mirage.runs.benchmark_options import KEEP_TRAINED_QUESTIONS
from mirage.runs.experiment import (
    ExperimentConfig,
    add_device_args,
    add_experiment_args,
    loading_argv,
)
from mirage.runs.files import RESULTS_FILE
from mirage.runs.progress import terminal_progress

if TYPE_CHECKING:
    from mirage.bias.full_protocol import ProtocolStudy, StudyPlan

__all__ = ["BiasRunOptions", "bias_config_from_args", "check_protocol_study", "register", "register_protocol",
           "register_retrieve", "split_run_options"]


def _pool(text: str) -> tuple[str, ...]:
    return tuple(label.strip() for label in text.split(",") if label.strip())


def _modes(modes: list[str], mixed_grid: bool, mixed: tuple[str, str]) -> tuple[str, ...]:
    """The modes asked for, plus (``--mixed-grid``) the cells of the mixed grid that none of them covers (the
    ``mixed`` mode covers the cell of its ``--mixed`` sides)."""
    out = list(modes)
    if mixed_grid:
        covered = {f"mixed:{mixed[0]}-{mixed[1]}"} if "mixed" in out else set()
        out += [m for m in GRID_MODES if m not in out and m not in covered]
    return tuple(out)


@dataclass(frozen=True)
class BiasRunOptions:
    """How a ``mirage bias`` study runs, beside what it is (its :class:`~mirage.bias.protocol.BiasConfig`): where it
    writes, a model elsewhere (``write_requests``, ``answers``), once per retriever or per value of a sweep, the
    generations it reuses. The config file's ``bias:`` section may give ``retriever``, ``top_k``, ``sweep``
    (``{FIELD: [VALUES]}``), ``answers``, ``answers_name`` and ``reuse`` too (:func:`split_run_options`)."""

    output: str = cli_arg(flag="--output", aliases=("-o",), help=(
        "output folder (re-running skips finished generations)"))
    mixed_grid: bool = cli_arg(False, flag="--mixed-grid", help=(
        "also run every cell of the 2x2 grid of (relevant, non-relevant) label sides (adds informed, "
        "counterfactual, mixed:first-first, mixed:second-second) and report the grid's contrasts"))
    rewrite_model: str | None = cli_arg(None, flag="--rewrite-model", help=(
        "model that rewrites documents (default: --model)"))
    split: str = cli_arg("test", flag="--split", help="qrels split of a BEIR folder (default test)")
    write_requests: bool = cli_arg(False, flag="--write-requests", help=(
        "write DIR/requests.jsonl (the chat messages of every item and mode) for a model elsewhere, and stop; no "
        "local model is loaded"))
    answers: str | None = cli_arg(None, flag="--answers", metavar="FILE", help=(
        "evaluate answers generated elsewhere: JSONL of {key, answer[, citation_probs]} for the requests of "
        "--write-requests (same DATA and options); with --model, the local model also attributes each answer with "
        "mirage"))
    answers_name: str | None = cli_arg(None, flag="--answers-name", help=(
        "name of the model that wrote --answers, for the tables (default: the file name)"))
    compare: tuple[str, ...] = cli_arg((), flag="--compare", help=(
        "other runs' results.json (or folders) to plot beside this one"))
    retriever: tuple[str, ...] = cli_arg((), flag="--retriever", metavar="NAME", help=(
        "BEIR data: rank the corpus with each retriever (bm25, dense), run the study once per retriever into "
        "DIR/NAME/ (its best-ranked non-relevant documents beside the relevant one) and compare them in "
        "DIR/retrievers.md"))
    top_k: int | None = cli_arg(None, flag="--top-k", help=(
        "with --retriever: documents retrieved per query (default 100)"))
    sweep_k: tuple[int, ...] = cli_arg((), flag="--sweep-k", metavar="K", help=(
        "run the study once per number of documents K into DIR/k<K>/ and plot CAS, CAB and citations against K in "
        "DIR/sweep.png (DIR/sweep.json); same as --sweep k K ..."))
    sweep: tuple[str, ...] = cli_arg((), flag="--sweep", metavar=("FIELD", "VALUE"), help=(
        "run the study once per VALUE of FIELD (k, n_relevant, rage_similar, max_doc_words, seed) into "
        "DIR/<FIELD><VALUE>/, then DIR/sweep.json and sweep.png; e.g. --docs rage --sweep rage_similar 0 2 4 trades "
        "seemingly relevant documents for random ones"))
    reuse: tuple[str, ...] = cli_arg((), flag="--reuse-from", dest="reuse", renamed_from=("--reuse",), metavar="DIR",
                                     help=(
        "other mirage bias runs of this model and configuration: the generations this study shares with them (the "
        "vanilla mode of every metadata study, the informed and counterfactual cells of --mixed-grid) are copied "
        "from there, not generated again"))
    quiet: bool = cli_arg(False, flag="--quiet", help="no progress bar or table on the terminal")


def bias_config_from_args(args: argparse.Namespace, section: dict[str, Any] | None = None) -> BiasConfig:
    """The study's BiasConfig: the ``bias:`` section of the ``--config`` file (its keys are BiasConfig's fields, plus
    ``mixed_grid: true``), with the flags given on the command line on top; unset, BiasConfig's defaults."""
    if section is not None and not isinstance(section, dict):
        raise ConfigError("the config file's 'bias' section must be a mapping of bias settings "
                          "(metadata, k, modes, …).")
    values: dict[str, Any] = dict(section or {})
    mixed_grid = bool(values.pop("mixed_grid", False)) or args.mixed_grid
    values.update(given_options(BiasConfig, args, skip=("labels", "explain")))  # a flag wins over the file
    if args.labels:
        values["labels"] = (_pool(args.labels[0]), _pool(args.labels[1]))
    if args.explain:
        values["explain"] = True
    if args.seed is not None:
        values["seed"] = args.seed
    values.setdefault("relevant_side", "second" if values.get("rewrite") == "relevant" else "first")
    mixed = tuple(values.get("mixed", ("first", "first")))
    values["modes"] = _modes(list(values.get("modes", MODES)), mixed_grid, mixed)  # type: ignore[arg-type]
    return BiasConfig.from_dict(values)


#: Keys of the config file's ``bias:`` section that choose how the study runs rather than what it is (the flags
#: --retriever, --top-k, --sweep FIELD VALUES as ``sweep: {FIELD: [VALUES]}``, --answers, --answers-name, --reuse-from).
_RUN_KEYS = ("retriever", "top_k", "sweep", "answers", "answers_name", "reuse")


def split_run_options(args: argparse.Namespace, section: Any) -> dict[str, Any] | None:
    """Move the run options of a config file's ``bias:`` section (sweep, retriever, reuse, …) onto ``args`` (a flag
    given on the command line wins); return the rest, the BiasConfig settings."""
    if section is None or not isinstance(section, dict):
        return section
    section = dict(section)
    for key in _RUN_KEYS:
        if key not in section:
            continue
        value = section.pop(key)
        if key == "sweep":
            if not isinstance(value, dict) or len(value) != 1 or not isinstance(next(iter(value.values())), list):
                raise ConfigError("bias.sweep must be one field and its values, e.g. {k: [2, 5, 8, 10]}.")
            if not (args.sweep or args.sweep_k):
                (name, values), = value.items()
                args.sweep = [str(name), *map(str, values)]
        elif key in ("retriever", "reuse"):
            setattr(args, key, getattr(args, key) or ([value] if isinstance(value, str) else list(value)))
        elif getattr(args, key) is None:
            setattr(args, key, value)
    return section


def _external(args: argparse.Namespace, cfg: BiasConfig, exp: ExperimentConfig) -> int:
    """``--write-requests`` (the prompts for a model elsewhere) or ``--answers`` (evaluate its answers)."""
    from mirage.bias.answers import run_answers_study, write_study_requests
    from mirage.bias.tables import side_by_side

    if args.write_requests and args.answers:
        raise ConfigError("--write-requests and --answers are two steps: write the requests, generate the answers "
                          "elsewhere, then evaluate them with --answers.")
    if cfg.rewrite != "none":
        raise ConfigError("--rewrite needs a local model to rewrite documents; it cannot be combined with "
                          "--write-requests or --answers.")
    if args.write_requests:
        path = write_study_requests(args.data, cfg=cfg, output_dir=args.output, limit=exp.limit, split=args.split)
        print(f"requests for a model elsewhere in {path}; answer each as {{\"key\", \"answer\"}} per line and run "
              "mirage bias with the same options and --answers FILE.", file=sys.stderr)
        return 0
    mirage = exp.load_mirage() if args.model is not None else None  # --model: also mirage's citations
    result, missing = run_answers_study(args.data, args.answers, cfg=cfg, output_dir=args.output, mirage=mirage,
                                        name=args.answers_name, limit=exp.limit, split=args.split,
                                        progress=None if args.quiet else terminal_progress)
    if not args.quiet:
        print(side_by_side(result))
    if missing:
        print(f"{missing} request(s) have no answer in {args.answers}; the metrics use the items answered in every "
              "mode.", file=sys.stderr)
    print(f"{result.n_items} items; results in {args.output}/results.json, tables in {args.output}/tables.md.",
          file=sys.stderr)
    return 0


def _retrievers(args: argparse.Namespace, cfg: BiasConfig, exp: ExperimentConfig, *, mirage: Any,
                rewriter: Any) -> int:
    """``--retriever``: the study once per retriever into DIR/<retriever>/, and their comparison."""
    from mirage.bias.retrievers_study import bias_table, run_retriever_study

    comparison = run_retriever_study(args.data, args.retriever, mirage=mirage, cfg=cfg, output_dir=args.output,
                                     top_k=100 if args.top_k is None else args.top_k, limit=exp.limit,
                                     split=args.split, rewriter=rewriter,
                                     progress=None if args.quiet else terminal_progress,
                                     tuned=exp.adapter or exp.model)
    if comparison is None:
        from mirage.runs.sharding import report_share_done

        return report_share_done()
    if not args.quiet:
        print(bias_table(comparison))
    print(f"{len(comparison.runs)} retriever(s); each study in {args.output}/<retriever>/, the comparison in "
          f"{args.output}/retrievers.md.", file=sys.stderr)
    return 0


def _sweep(args: argparse.Namespace, cfg: BiasConfig, exp: ExperimentConfig, *, mirage: Any, rewriter: Any,
           compare: list[Any]) -> int:
    """``--sweep-k`` / ``--sweep FIELD``: the study once per value into DIR/<field><value>/, then sweep.json/png."""
    from mirage.bias.sweep import parse_sweep, run_bias_sweep

    if args.sweep and args.sweep_k:
        raise ConfigError("give --sweep-k or --sweep, not both (--sweep-k 2 5 is --sweep k 2 5).")
    parameter, values = ("k", list(args.sweep_k)) if args.sweep_k else parse_sweep(args.sweep)
    sweep = run_bias_sweep(args.data, mirage=mirage, cfg=cfg, parameter=parameter, values=values,
                           output_dir=args.output, limit=exp.limit, split=args.split, rewriter=rewriter,
                           progress=None if args.quiet else terminal_progress, compare=compare,
                           reuse=args.reuse or (), tuned=exp.adapter or exp.model)
    if sweep is None:
        from mirage.runs.sharding import report_share_done

        return report_share_done()
    print(f"{len(sweep.points)} studies ({parameter} = {', '.join(map(str, sweep.values))}) in "
          f"{args.output}/{parameter}<value>/; the sweep in {args.output}/sweep.json and sweep.png.", file=sys.stderr)
    return 0


def _check_prompts(cfg: BiasConfig) -> None:
    """Read the study's prompt files now (``bias.prompts_dir``, default configs/bias): a missing or broken one is a
    ConfigError naming the field, before the data is read, the model loads or any output is written."""
    from mirage.bias.prompts import load_prompts
    from mirage.bias.protocol import load_metadata

    try:
        load_prompts(cfg), load_metadata(cfg)
    except ConfigError as err:
        raise ConfigError(f"bias.prompts_dir={cfg.prompts_dir!r} (--prompts-dir): {err}" if cfg.prompts_dir
                          else str(err)) from None


def cmd_bias(args: argparse.Namespace) -> int:
    """Run the study; write DIR/generations.jsonl (resumable), results.json, tables.md and cab.png."""
    from mirage.attribution.models import load_model
    from mirage.bias.prompts import resolve_sentence_mark
    from mirage.bias.results import BiasStudyResult
    from mirage.bias.study import run_bias_study
    from mirage.bias.tables import side_by_side
    from mirage.pipeline import Mirage

    if args.prompt is not None:
        raise ConfigError("mirage bias takes its prompts from configs/bias (edit them or pass --prompts-dir), "
                          "not --prompt.")
    exp = ExperimentConfig.from_args(args, command="bias")
    section = split_run_options(args, read_config_file(args.config).get("bias") if args.config else None)
    cfg = resolve_sentence_mark(bias_config_from_args(args, section), exp.adapter or exp.model)
    _check_prompts(cfg)
    if args.data is None:
        if len(exp.data) != 1:
            raise ConfigError("give DATA (or one 'data:' path in the --config file).")
        args.data = exp.data[0]
    args.data = str(resolve(args.data))  # a dataset name (xor-attriqa-match:train,val,fi,ru) or a path
    compare = []
    for path in args.compare or []:
        path = Path(path)
        compare.append(BiasStudyResult.load(path / RESULTS_FILE if path.is_dir() else path))
    exp.check_device()

    if args.retriever and (args.write_requests or args.answers or args.compare):
        raise ConfigError("--retriever runs the study with the local model once per retriever and compares them in "
                          "DIR/retrievers.md; it cannot be combined with --write-requests, --answers or --compare.")
    if (args.sweep or args.sweep_k) and (args.retriever or args.write_requests or args.answers):
        raise ConfigError("--sweep-k / --sweep run the study with the local model once per value; they cannot be "
                          "combined with --retriever, --write-requests or --answers.")
    if args.reuse and (args.retriever or args.write_requests or args.answers):
        raise ConfigError("--reuse-from copies finished generations of the local model into a study; it cannot be "
                          "combined with --retriever, --write-requests or --answers.")
    if args.top_k is not None and not args.retriever:
        raise ConfigError("--top-k is the number of documents --retriever retrieves per query; give --retriever too.")
    if args.write_requests or args.answers:
        return _external(args, cfg, exp)

    @functools.cache
    def mirage() -> Mirage:  # loaded once the data has been read and checked
        return exp.load_mirage()
    rewriter = None
    if cfg.rewrite != "none" and args.rewrite_model and args.rewrite_model != exp.model:
        rewriter = load_model(args.rewrite_model, device=exp.device, dtype=exp.dtype,
                              trust_remote_code=exp.trust_remote_code)
    if args.retriever:
        return _retrievers(args, cfg, exp, mirage=mirage, rewriter=rewriter)
    if args.sweep or args.sweep_k:
        return _sweep(args, cfg, exp, mirage=mirage, rewriter=rewriter, compare=compare)
    result = run_bias_study(args.data, mirage=mirage, cfg=cfg, output_dir=args.output, limit=exp.limit,
                            split=args.split, rewriter=rewriter, progress=None if args.quiet else terminal_progress,
                            compare=compare, reuse=args.reuse or (), tuned=exp.adapter or exp.model)
    if result is None:
        from mirage.runs.sharding import report_share_done

        return report_share_done()
    if not args.quiet:
        print(side_by_side(result))
    print(f"{result.n_items} items; results in {args.output}/results.json, tables in {args.output}/tables.md.",
          file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``mirage bias``."""
    p = sub.add_parser("bias", help="attribution sensitivity (CAS) and bias (CAB) to document metadata, for "
                                    "self-citations and mirage's citations",
                       description="Tell the model who wrote each document (vanilla / informed / counterfactual / "
                                   "mixed labels) and measure how its self-citations and mirage's citations move. "
                                   "--seed seeds the items (relevant position, padding), the label draws, the "
                                   "random-citation baseline and generation.")
    add_options(p, ExperimentConfig, ["data"], unset=True, override={"data": {"nargs": "?", "help": (
        "XOR-AttriQA-match file or folder, BEIR folder (corpus.jsonl, queries.jsonl, qrels/), JSONL of prepared "
        "items, or nq / msmarco (from the hub); default: the --config file's data")}})
    add_options(p, BiasRunOptions, ["output"])
    add_options(p, BiasConfig, unset=True)  # unset: the config file's bias section, else BiasConfig's defaults
    add_options(p, ExperimentConfig, ["limit"], unset=True, override={"limit": {"help": "only the first N questions"}})
    add_options(p, BiasRunOptions, skip=["output"])
    add_experiment_args(p)
    p.set_defaults(func=cmd_bias)


RETRIEVE_HELP = "rank a BEIR corpus for each query (bm25, dense) and write a TREC run file"


def cmd_retrieve(args: argparse.Namespace) -> int:
    """Rank DATA's corpus with one retriever; write the TREC run file and report recall and MRR."""
    from mirage.bias.retrieval import (
        check_retrievers,
        check_top_k,
        load_beir_data,
        retrieval_quality,
        retrieve,
        write_run,
    )
    from mirage.data.inputs import InputError

    check_retrievers([args.retriever])
    check_top_k(args.top_k)
    out = Path(args.output)
    if out.is_dir():
        raise InputError(f"-o {args.output} is a directory; give a file path, e.g. {out / 'run.trec'}.")
    beir = load_beir_data(str(resolve(args.data)), split=args.split)
    ranking = retrieve(beir, args.retriever, top_k=args.top_k, cache_dir=out.parent)
    write_run(ranking, out, tag=args.retriever)
    q = retrieval_quality(ranking, beir.qrels, k=args.k, top_k=args.top_k)
    print(f"{len(ranking)} queries ranked by {args.retriever}, wrote {out}; over the {q.n_queries} with a relevant "
          f"document: recall@{q.k} {100 * q.recall_at_k:.1f}, recall@{q.top_k} {100 * q.recall_at_top_k:.1f}, "
          f"MRR {100 * q.mrr:.1f}.", file=sys.stderr)
    return 0


@dataclass(frozen=True)
class RetrieveOptions:
    """What ``mirage retrieve`` ranks and writes (:func:`mirage.bias.retrieval.retrieve`, ``write_run``)."""

    data: str = cli_arg(flag="data", help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/), or nq (from the hub)")
    retriever: str = cli_arg(flag="--retriever", metavar="NAME", help="bm25 or dense")
    output: str = cli_arg(flag="--output", aliases=("-o",), help="TREC run file to write")
    top_k: int = cli_arg(100, flag="--top-k", help="documents per query (default 100)")
    k: int = cli_arg(5, flag="--recall-at", dest="k", renamed_from=("--k",), help=(
        "cut-off of the recall reported on the terminal (default 5)"))
    split: str = cli_arg("test", flag="--split", help="qrels split (default test)")


def register_retrieve(sub: argparse._SubParsersAction) -> None:
    """Add ``mirage retrieve``."""
    p = sub.add_parser("retrieve", help=RETRIEVE_HELP,
                       description="Rank a BEIR corpus for each query that has qrels and write the top documents as a "
                                   "TREC run file (qid Q0 docid rank score tag), which mirage bias reads as "
                                   "DATA/run.trec. bm25: BM25 (bm25s); dense: all-MiniLM-L6-v2 cosine similarity, "
                                   "the corpus embeddings cached beside the run file.")
    add_options(p, RetrieveOptions)
    p.set_defaults(func=cmd_retrieve)


PROTOCOL_HELP = "run every study of an attribution-bias protocol file, each reusing what the others generated"


class _RefusingParser(argparse.ArgumentParser):
    """An argument parser that raises ConfigError instead of exiting (a protocol's study flags are checked before
    any study runs)."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def check_protocol_study(study: ProtocolStudy, argv: list[str]) -> StudyPlan:
    """Parse one protocol study's ``mirage bias`` arguments as the command will, check its config file's study
    settings, and say whether it can take other runs' generations. ConfigError naming the study otherwise."""
    from mirage.bias.full_protocol import StudyPlan

    parser = _RefusingParser(prog="mirage")
    register(parser.add_subparsers())
    try:
        args = parser.parse_args(argv)
        if args.output != argv[argv.index("-o") + 1] or args.config != str(study.config) or args.reuse:
            raise ConfigError("its args may not set the output folder, the config file or --reuse-from (the protocol "
                              "sets them)")
        section = read_config_file(study.config).get("bias")
        cfg_section = split_run_options(args, section)
        bias_config_from_args(args, cfg_section)
        ExperimentConfig.from_args(args, command="bias")
    except ConfigError as err:
        raise ConfigError(f"protocol study {study.name!r} ({study.config}, args {list(study.args)}): "
                          f"{str(err).rstrip('.')}. Fix its entry in the protocol file or its config file.") from err
    reuses = not (args.retriever or args.answers or args.write_requests)
    return StudyPlan(reuses=reuses, own_reuse=tuple(args.reuse or ()) if reuses else ())


def cmd_bias_protocol(args: argparse.Namespace) -> int:
    """Run the protocol's studies into DIR/NAME/ and write DIR/protocol.md and protocol.json."""
    from mirage.bias.full_protocol import finished_results, load_protocol, run_protocol, write_overview

    if args.overview_only:
        rows = write_overview(args.output, [s.name for s in load_protocol(args.protocol)])
        print(f"{finished_results(len(rows))}; overview in {args.output}/protocol.md.", file=sys.stderr)
        return 0
    extra = [*(["--model", args.model] if args.model else []),
             *loading_argv(args),  # --device, --dtype, --adapter, --device-map, --max-memory, ...
             *(["--limit", str(args.limit)] if args.limit is not None else []), *(["--quiet"] if args.quiet else []),
             *(["--keep-trained-questions"] if args.keep_trained_questions else [])]
    status = run_protocol(args.protocol, args.output, run=args.run, check=check_protocol_study,
                          only=args.only or (), extra=extra)
    failed = [name for name, code in status.items() if code != 0]
    print(f"{len(status) - len(failed)} of {len(status)} studies finished"
          + (f" ({', '.join(failed)} did not: see the errors above; a re-run resumes them)" if failed else "")
          + f"; overview in {args.output}/protocol.md.", file=sys.stderr)
    return 1 if failed else 0


@dataclass(frozen=True, kw_only=True)
class ProtocolOptions:
    """What ``mirage bias-protocol`` runs (:func:`mirage.bias.full_protocol.run_protocol`) beside the model and
    loading flags it passes to every study."""

    protocol: str = cli_arg(str(BIAS_CONFIG_DIR / "protocol.yaml"), flag="protocol", nargs="?", help=(
        "protocol file (default: configs/bias/protocol.yaml)"))
    output: str = cli_arg(flag="--output", aliases=("-o",), help="output folder; each study in DIR/NAME/")
    only: tuple[str, ...] = cli_arg((), flag="--only", metavar="NAME", help="run only these studies of the file")
    keep_trained_questions: bool = cli_arg(False, **KEEP_TRAINED_QUESTIONS)
    overview_only: bool = cli_arg(False, flag="--overview-only", help=(
        "run nothing; write DIR/protocol.md from the studies already finished there"))
    quiet: bool = cli_arg(False, flag="--quiet", help="no progress bars or tables on the terminal")


def register_protocol(sub: argparse._SubParsersAction, run: Callable[[list[str]], int]) -> None:
    """Add ``mirage bias-protocol``; ``run``: the ``mirage`` entry point that runs each study."""
    p = sub.add_parser("bias-protocol", help=PROTOCOL_HELP,
                       description="Run each study of a protocol file (configs/bias/protocol.yaml: the papers' table "
                                   "families) as mirage bias --config STUDY -o DIR/NAME, passing every study the "
                                   "generations of the studies already in DIR (--reuse-from), so each prompt is "
                                   "generated once. Resumable: a re-run continues each study where it stopped. Then "
                                   "writes DIR/protocol.md (one row per study, sweep point and retriever) and "
                                   "protocol.json.")
    add_options(p, ProtocolOptions, ["protocol", "output", "only"])
    add_options(p, ExperimentConfig, ["model"], unset=True, override={"model": {"cli_default": None, "help": (
        "model for every study (default: each study file's model)")}})
    add_device_args(p)  # every study's, like --model (float32 on a GPU resumes and reuses a CPU run's generations)
    add_options(p, ExperimentConfig, ["limit"], unset=True, override={"limit": {"help": (
        "only the first N questions of every study")}})
    add_options(p, ProtocolOptions, ["keep_trained_questions", "overview_only", "quiet"])
    p.set_defaults(func=cmd_bias_protocol, run=run)
