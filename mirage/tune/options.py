"""The options of the ``mirage tune`` stages that have no config tree of their own: ``data``, ``eval`` and ``follow``,
``export``, ``card``, and what ``sft`` and ``reward`` take beside :class:`~mirage.tune.config.TuneConfig` (its file,
the run folder). Each field declares its flag and help (:func:`mirage.options.cli_arg`), from which ``mirage tune``'s
flags are made; like :mod:`mirage.tune.config`, this module imports neither torch nor trl.

    TrainingSetOptions(mode="gold", output="gold.jsonl", xor=("xor-attriqa-match:train",))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from mirage.checks import non_negative_int, positive_int
from mirage.config import DEFAULT_MODEL
from mirage.options import cli_arg
from mirage.runs.experiment import Half, TextView

__all__ = ["DEFAULT_CONFIG", "TEXT_VIEW", "CardOptions", "EvalOptions", "ExportOptions", "FollowOptions",
           "PairsOptions", "StageOptions", "TrainingSetOptions"]

#: The SFT stage's config file (``configs/tune/sft.yaml``); the reward stage's is ``reward.yaml`` beside it.
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "tune" / "sft.yaml"
#: The metadata of every stage's XOR-AttriQA text view (``--text``).
TEXT_VIEW = {"flag": "--text", "help": "XOR-AttriQA text view (default en)"}
_QUIET = {"flag": "--quiet", "help": "no progress bar"}


@dataclass(frozen=True, kw_only=True)
class TrainingSetOptions:
    """``mirage tune data``: which rows become training examples, and how they are presented."""

    mode: Literal["gold", "internals"] = cli_arg(flag="mode", help=(
        "gold: the annotated answers, cited with their supporting passages; internals: the model's own answers, "
        "cited with mirage's citations"))
    xor: tuple[str, ...] = cli_arg((), flag="--xor", metavar="FILE", help="XOR-AttriQA train/val JSONL files")
    eli5_demos: tuple[str, ...] = cli_arg((), flag="--eli5-demos", metavar="FILE", help=(
        "ALCE's eli5_alce_prompt.json (gold)"))
    alce: tuple[str, ...] = cli_arg((), flag="--alce", metavar="FILE", help=(
        "ALCE-format questions with documents (internals)"))
    text: TextView = cli_arg("en", **TEXT_VIEW)
    keep_unsupported: bool = cli_arg(False, flag="--keep-unsupported", help=(
        "gold: keep rows no passage supports, their answer uncited (default: left out)"))
    model: str = cli_arg(DEFAULT_MODEL, flag="--model", help="internals: the model that answers")
    mirage_config: str | None = cli_arg(None, flag="--mirage-config", metavar="FILE", help=(
        "internals: mirage's pipeline config (YAML)"))
    max_new_tokens: int = cli_arg(64, flag="--max-new-tokens", type=positive_int, help=(
        "internals: answer length in tokens"))
    ndocs: int = cli_arg(5, flag="--ndocs", type=positive_int, help="internals: documents per ALCE question")
    exclude: tuple[str, ...] = cli_arg((), flag="--exclude", metavar="FILE", help=(
        "training sets whose questions are left out, as examples and as filler passages: keeps the items an "
        "evaluation will judge unseen when training on the same split"))
    limit: int | None = cli_arg(None, flag="--limit", type=non_negative_int, help=(
        "only the first N items (after --exclude)"))
    yes_no: bool = cli_arg(False, flag="--yes-no", help=(
        "gold: add each supported XOR-AttriQA example asked again as two yes/no questions ('<question> Is it <its "
        "answer>?' answered Yes, and with another question's answer, No), both citing its supporting passages "
        "(after --exclude and --limit)"))
    shuffle_docs: int = cli_arg(0, flag="--shuffle-docs", type=non_negative_int, metavar="N", help=(
        "add N copies of each example, its documents in another order and its citations renumbered (breaks the "
        "gold sets' 'passage 1 supports' habit; default 0)"))
    spread_positions: int | None = cli_arg(None, flag="--spread-positions", type=positive_int, metavar="K", help=(
        "present each example with K documents (its own, then other questions' passages), its first supporting "
        "passage at each position 1..K in turn (--copies times) and its citations renumbered: every position "
        "supports equally often, so position cannot be learnt"))
    copies: int | None = cli_arg(None, flag="--copies", type=positive_int, help=(
        "copies per example with --spread-positions (default K)"))
    group_passages: bool = cli_arg(False, flag="--group-passages", help=(
        "gold: XOR-AttriQA's per-passage release, its rows that answer one question with one answer grouped into one "
        "item"))
    seed: int = cli_arg(0, flag="--shuffle-seed", dest="seed", renamed_from=("--seed",), help=(
        "seeds --shuffle-docs and --spread-positions (default 0)"))
    quiet: bool = cli_arg(False, **_QUIET)
    output: str = cli_arg(flag="--output", aliases=("-o",), help="training set to write (JSONL)")


@dataclass(frozen=True, kw_only=True)
class StageOptions:
    """``mirage tune sft`` and ``reward``: the tune config file their :class:`~mirage.tune.config.TuneConfig` is read
    from (its ``model``, ``data``, ``adapter`` and ``train`` flags then override it) and the run folder."""

    config: str = cli_arg(str(DEFAULT_CONFIG), flag="--tune-config", dest="config", renamed_from=("--config",), help=(
        "tune config YAML (default configs/tune/sft.yaml)"))
    quiet: bool = cli_arg(False, **_QUIET)
    output: str = cli_arg(flag="--output", aliases=("-o",), help="run folder")


@dataclass(frozen=True, kw_only=True)
class EvalOptions:
    """``mirage tune eval`` (and ``follow``): the rows, the model that answers them, and its judge."""

    data: tuple[str, ...] = cli_arg(flag="data", help="XOR-AttriQA JSONL files")
    adapter: str | None = cli_arg(None, flag="--adapter",
                                  help="an adapter folder (mirage tune sft -o DIR: DIR/adapter)")
    model: str | None = cli_arg(None, flag="--model", help="a model without adapter (default smollm2-135m-instruct)")
    prompt: str | None = cli_arg(None, flag="--prompt", help=(
        "prompt template (default: the one the adapter, or the model folder mirage fine-tuned, was trained with; "
        "else selfcitation)"))
    text: TextView = cli_arg("en", **TEXT_VIEW)
    max_new_tokens: int = cli_arg(48, flag="--max-new-tokens", type=positive_int, help="answer length in tokens")
    exclude: tuple[str, ...] = cli_arg((), flag="--exclude", metavar="FILE", help=(
        "training set(s): rows whose question is in them (with any documents) are left out, as are the questions "
        "--adapter records it was trained on"))
    limit: int | None = cli_arg(None, flag="--limit", type=non_negative_int, help=(
        "only the first N rows (after --exclude)"))
    limit_each: int | None = cli_arg(None, flag="--limit-each", type=non_negative_int, metavar="N", help=(
        "only the first N rows of each file"))
    half: Half | None = cli_arg(None, flag="--half", help=(
        "only the questions of one half of the selection protocol (a fixed half per question, by its text): "
        "choosing (compare recipes here) or confirming (report a chosen one once); applied after the trained "
        "questions are left out, before --limit"))
    judge: bool = cli_arg(False, flag="--judge", help=(
        "also attribute each answer with mirage on the same model (learned rule with the base model's shipped "
        "classifier where one ships) and run the faithfulness check: self-citation vs mirage vs the labels, and "
        "drop/keep vs random sets"))
    judge_rule: str | None = cli_arg(None, flag="--judge-rule", metavar="RULE", help=(
        "judge with this citation rule (implies --judge): reference, likelihood or a registered rule; run once per "
        "rule, each with its own -o, to set the rules side by side on the same (greedy) answers"))
    judge_learned_model: str | None = cli_arg(None, flag="--judge-learned-model", metavar="SPEC", help=(
        "with --judge-rule likelihood: the classifier (learned.json, or shipped:MODEL; default: the one shipped for "
        "the base model, which a fully fine-tuned model folder does not have)"))
    quiet: bool = cli_arg(False, **_QUIET)
    output: str = cli_arg(flag="--output", aliases=("-o",), help=(
        "JSON report to write; every answer is also stored in OUTPUT's stem + .answers.jsonl as it is done, and a "
        "rerun with the same -o reuses the answers of rows whose question and documents are unchanged (a file made "
        "with another model, prompt, --max-new-tokens or --judge is refused; one from an earlier mirage is "
        "converted once, the original kept as .answers.v0.jsonl)"))


@dataclass(frozen=True, kw_only=True)
class FollowOptions(EvalOptions):
    """``mirage tune follow``: :class:`EvalOptions` and the presentations of each row."""

    k: int = cli_arg(5, flag="--ndocs", dest="k", type=positive_int, renamed_from=("--k",), help=(
        "documents per presentation, so as many positions of the supporting passage (default 5)"))
    seed: int = cli_arg(0, flag="--order-seed", dest="seed", type=non_negative_int, renamed_from=("--seed",), help=(
        "seeds the order of the other passages (default 0)"))


@dataclass(frozen=True, kw_only=True)
class PairsOptions(FollowOptions):
    """``mirage tune pairs``: the presentations of :class:`FollowOptions` (without its judge), each answered and
    turned into a SelfCite preference pair (:mod:`mirage.tune.pairs`)."""

    max_size: int = cli_arg(2, flag="--max-size", type=positive_int, help=(
        "the most documents an answer may cite to give a pair (its own set against the best-rewarded set of the "
        "same size; default 2)"))

    #: The options of :class:`EvalOptions` that pairs do not take: a pair's side is chosen by SelfCite's reward.
    JUDGE_FIELDS: ClassVar[tuple[str, ...]] = ("judge", "judge_rule", "judge_learned_model")
    #: ``-o``'s help for pairs.
    OUTPUT_HELP: ClassVar[str] = (
        "pairs file to write (JSONL, the data of mirage tune dpo); beside it OUTPUT's stem + .json (the counts), "
        "+ .outcomes.jsonl (each answer's outcome, stored as it is done) and + .answers.jsonl (the answers): a "
        "rerun with the same -o reuses them")


@dataclass(frozen=True, kw_only=True)
class ExportOptions:
    """``mirage tune export``: the folder to copy (or to take an adapter from) and how."""

    adapter: str = cli_arg(flag="adapter", help=(
        "the adapter folder, a checkpoint folder of a mirage tune run, or a fully fine-tuned model folder (with "
        "--rank)"))
    rank: int | None = cli_arg(None, flag="--rank", type=positive_int, help=(
        "LoRA rank of each linear layer's change (a fully fine-tuned model folder only)"))
    embed_rank: int = cli_arg(0, flag="--embed-rank", type=non_negative_int, help=(
        "LoRA rank of the input embeddings' change (default 0: not carried)"))
    norms: bool = cli_arg(False, flag="--norms", help="carry the norm layers' tuned weights whole")
    base: str | None = cli_arg(None, flag="--base", help=(
        "the model the adapter goes on (default: the one the run's first stage was tuned from, following the "
        "records of a chain of fully fine-tuned folders)"))
    output: str = cli_arg(flag="--output", aliases=("-o",), help="the folder to write")
    dtype: str = cli_arg("float16", flag="--dtype", help="float16 (default), bfloat16 or float32")


@dataclass(frozen=True, kw_only=True)
class CardOptions:
    """``mirage tune card``: the adapter folder and the evaluation reports its card quotes."""

    adapter: str = cli_arg(flag="adapter", help="the adapter folder")
    name: str | None = cli_arg(None, flag="--name", help="the name it ships under (default: the folder's name)")
    follow: tuple[str, ...] = cli_arg((), flag="--follow", metavar="LABEL=FILE", help=(
        "mirage tune follow reports, e.g. val=F.json"))
    eval: tuple[str, ...] = cli_arg((), flag="--eval", metavar="LABEL=FILE", help=(
        "mirage tune eval reports, e.g. fi/ru=F.json"))
