"""``mirage methods``: the registered document attribution methods, and the training of the one that learns
(AT2's head weights) on XOR-AttriQA answers.

    mirage methods list
    mirage methods train-at2 xor-attriqa-full:train --group-passages --model smollm2-135m-instruct [-o FILE]

``train-at2`` prepares each answer of DATA (its passages as documents) with the XOR-AttriQA scorer's prompt, measures
the ablation effects of random passage subsets and fits one weight per attention head
(:func:`mirage.attribution.methods.train_head_weights`); answers with a single passage teach nothing and are left
out. The weights go to ``FILE``, by default to the cache (``$MIRAGE_CACHE_DIR/at2/MODEL.json``), where ``at2``
finds them for that model.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

from mirage.checks import positive_int
from mirage.config import ConfigError
from mirage.options import add_options, cli_arg, options_from_args
from mirage.runs.benchmark_options import XOR_PIPELINE_SKIP
from mirage.runs.experiment import ExperimentConfig, add_experiment_args
from mirage.runs.progress import terminal_progress

__all__ = ["register"]

METHODS_HELP = "document attribution methods: list them, train AT2's head weights"


@dataclass(frozen=True)
class TrainAT2Options:
    """What ``mirage methods train-at2`` chooses beyond its experiment (the model, the data, its text view and
    limit, the prompt): :func:`mirage.attribution.methods.train_head_weights`'s settings and where the weights go."""

    output: str | None = cli_arg(None, flag="--output", aliases=("-o",), metavar="FILE", help=(
        "the head weights file to write (default: the cache, $MIRAGE_CACHE_DIR/at2/MODEL.json, where at2 finds the "
        "model's weights)"))
    masks: int = cli_arg(32, flag="--masks", type=positive_int, help=(
        "random passage subsets per answer, each one forward pass (default 32, as the AT2 authors)"))
    keep: float = cli_arg(0.5, flag="--keep", help="probability of keeping each passage in a subset (default 0.5)")
    iterations: int = cli_arg(1000, flag="--iterations", type=positive_int, help="optimiser steps (default 1000)")
    learning_rate: float = cli_arg(1e-3, flag="--learning-rate", help="Adam's learning rate (default 0.001)")
    seed: int = cli_arg(0, flag="--subset-seed", dest="seed", renamed_from=("--seed",), help=(
        "seeds the subsets (default 0)"))
    held_out: int = cli_arg(5, flag="--held-out", metavar="K", help=(
        "hold out every K-th answer and keep the weights that correlate best on them (default 5; 0: none)"))
    group_passages: bool = cli_arg(False, flag="--group-passages", help=(
        "rows of the per-passage release (xor-attriqa-full) with the same question and answer become one answer "
        "with all their passages, as a match row"))

    def __post_init__(self) -> None:
        if not 0.0 < self.keep < 1.0:
            raise ConfigError(f"keep must be in (0, 1) (the chance a passage stays in a subset), got {self.keep}.")
        if self.held_out < 0 or self.held_out == 1:
            raise ConfigError(f"held_out must be 0 (none) or at least 2 (every K-th answer), got {self.held_out}.")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate must be > 0, got {self.learning_rate}.")


def _command(exp: ExperimentConfig, options: TrainAT2Options, data: list[str]) -> str:
    argv = ["mirage", "methods", "train-at2", *data, "--model", exp.model, "--text", exp.text]
    argv += ["--limit", str(exp.limit)] if exp.limit is not None else []
    defaults = TrainAT2Options()
    for f in fields(TrainAT2Options):
        value = getattr(options, f.name)
        if f.name != "output" and value != getattr(defaults, f.name):
            argv += [f.metadata["flag"]] if isinstance(value, bool) else [f.metadata["flag"], str(value)]
    return shlex.join(argv)


def cmd_list_methods(args: argparse.Namespace) -> int:
    from mirage.scoring.xor_methods import resolve_methods

    methods = resolve_methods(["all"])
    width = max(len(method.name) for method in methods)
    for method in methods:
        summary = " ".join((type(method).__doc__ or "").split("\n\n")[0].split())
        summary = summary if len(summary) <= 100 else summary[:99].rstrip() + "…"
        settings = json.dumps(method.options()) if method.options() else "none"
        print(f"{method.name:<{width}}  {summary}  Settings: {settings}")
    return 0


def cmd_train_at2(args: argparse.Namespace) -> int:
    from mirage.attribution.methods import HeadWeights, train_head_weights
    from mirage.attribution.methods.heads import cached_weights_dir, head_file_name
    from mirage.data import data_label, resolve_files
    from mirage.scoring.xor_data import concat_data, load_xor_attriqa
    from mirage.scoring.xor_methods import xor_document_inputs

    exp = ExperimentConfig.from_args(args, command="xor-attriqa")
    if not exp.data:
        raise ConfigError("give at least one XOR-AttriQA file or dataset name (DATA…), e.g. xor-attriqa-match:train.")
    options = options_from_args(TrainAT2Options, args)
    out = Path(options.output) if options.output else cached_weights_dir() / head_file_name(exp.model)
    if out.is_dir():
        raise ConfigError(f"-o {out} is a directory; give the weights file's path, e.g. {out / 'weights.json'}.")
    if out.exists():
        try:
            HeadWeights.read(out)
        except ValueError:
            raise ConfigError(f"-o {out} exists and is not a head weights file; give a new path (nothing is "
                              "written over a file this command did not write).") from None
    files = resolve_files(exp.data)
    data = concat_data(load_xor_attriqa(p, text=exp.text, limit=exp.limit, group=options.group_passages)
                       for p in files)
    items = [item for item in data.items if len(item.passages) > 1]
    print(f"loading {exp.model} …", file=sys.stderr)
    exp.check_device()
    mirage = exp.load_mirage()
    examples = (xor_document_inputs(mirage, item, config=exp.pipeline) for item in items)

    labels = [data_label(p) for p in files]
    weights = train_head_weights(examples, model=exp.model, masks=options.masks, keep=options.keep,
                                 iterations=options.iterations, learning_rate=options.learning_rate,
                                 seed=options.seed, held_out=options.held_out, data=labels,
                                 progress=terminal_progress, total=len(items))
    training = {**weights.training, "text": exp.text, "limit": exp.limit,
                "single_passage_left_out": len(data.items) - len(items), "command": _command(exp, options, labels)}
    weights = replace(weights, training=training)
    weights.write(out)
    t = weights.training
    before, after = t["correlation_before"], t["correlation_after"]
    print(f"wrote {out}: {weights.n_layers} x {weights.n_heads} head weights from {t['answers']} answers "
          f"({t['forward_passes']} forward passes, {t['seconds']} s); correlation with the ablation effects, "
          f"uniform -> trained: {before['fitted']} -> {after['fitted']} on the {t['fitted_answers']} fitted answers, "
          f"{before['held_out']} -> {after['held_out']} on the {t['held_out_answers']} held out (step "
          f"{t['best_iteration']} kept).", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``mirage methods {list,train-at2}``."""
    methods = sub.add_parser("methods", help=METHODS_HELP, description=METHODS_HELP + ".")
    verbs = methods.add_subparsers(dest="verb", required=True)
    lst = verbs.add_parser("list", help="the registered document attribution methods and their settings")
    lst.set_defaults(func=cmd_list_methods)
    train = verbs.add_parser("train-at2", help="train AT2's head weights on XOR-AttriQA answers",
                             description="Fit one weight per attention head so that the heads' attention to each "
                                         "passage predicts what removing passages does to the answer (AT2).")
    add_options(train, ExperimentConfig, ["data", "text"], unset=True, override={
        "data": {"nargs": "*", "help": "XOR-AttriQA JSONL files or dataset names (e.g. xor-attriqa-match:train)"}})
    add_options(train, ExperimentConfig, ["limit"], unset=True)
    add_options(train, TrainAT2Options)
    add_experiment_args(train, skip=set(XOR_PIPELINE_SKIP), benchmark="xor-attriqa")
    train.set_defaults(func=cmd_train_at2)
