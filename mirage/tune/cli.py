"""``mirage tune``: citation fine-tuning (training data, SFT with a LoRA adapter, and its evaluation).

    mirage tune data gold --xor train.jsonl val.jsonl [--eli5-demos eli5_alce_prompt.json] [--spread-positions K] -o OUT
    mirage tune data internals --xor train.jsonl [--alce FILE] [--model NAME] [--max-new-tokens N] -o internals.jsonl
    mirage tune sft [--tune-config configs/tune/sft.yaml] [--model NAME] [--data FILE...] -o DIR
    mirage tune reward [--tune-config configs/tune/reward.yaml] [--adapter SFT_DIR/adapter] -o DIR
    mirage tune eval DATA... [--adapter DIR | --model NAME] [--limit-each N] [--judge] [--max-new-tokens N] -o OUT.json
    mirage tune follow DATA... [--adapter DIR | --model NAME] [--ndocs 5] [--judge] -o OUT.json
    mirage tune export DIR/adapter -o SHIP_DIR [--dtype float16]
    mirage tune export DIR/model --rank 64 [--embed-rank 64] [--norms] -o SHIP_DIR    (from a full fine-tuning)
    mirage tune card ADAPTER_DIR [--name NAME] [--follow LABEL=FILE...] [--eval LABEL=FILE...]

Parsing imports neither torch nor trl: each handler imports what it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.config import DEFAULT_MODEL, ConfigError, MirageConfig, PromptConfig
from mirage.data import resolve_files
from mirage.data.inputs import InputError
from mirage.options import add_options, option_fields, options_argv, options_from_args
from mirage.runs.experiment import add_device_args, loading_args
from mirage.runs.progress import terminal_progress
from mirage.runs.store import write_atomic
from mirage.tune.config import TrainSettings, TuneConfig
from mirage.tune.options import (
    DEFAULT_CONFIG,
    CardOptions,
    EvalOptions,
    ExportOptions,
    FollowOptions,
    PairsOptions,
    StageOptions,
    TrainingSetOptions,
)

if TYPE_CHECKING:
    from mirage.tune.data import TrainingExample

__all__ = ["register", "report_command"]

TUNE_HELP = ("citation fine-tuning: build training data, train a LoRA adapter (SFT, then a reward or a preference "
             "stage), evaluate its citations")


def _print_bad(rows: list[str]) -> None:
    for row in rows:
        print(f"skipped {row}", file=sys.stderr)


def cmd_data(args: argparse.Namespace) -> int:
    """``mirage tune data {gold,internals}``: write the training set
    :func:`~mirage.tune.training_set.build_training_set` builds."""
    from mirage.tune.data import write_examples
    from mirage.tune.training_set import build_training_set

    options = options_from_args(TrainingSetOptions, args)
    result = build_training_set(options, loading=loading_args(args),
                                progress=None if options.quiet else terminal_progress,
                                say=lambda line: print(line, file=sys.stderr))
    path = write_examples(result.examples, options.output)
    _print_bad(result.report.bad_rows)
    print(f"{result.summary()}\nwrote {len(result.examples)} examples to {path}", file=sys.stderr)
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    """``mirage tune sft``: train the LoRA adapter."""
    from mirage.tune.sft import train_sft

    cfg = TuneConfig.from_yaml(args.config)
    train = {**({"max_steps": args.max_steps} if args.max_steps else {}),
             **({"method": args.method} if args.method else {}),
             **({"loss_on": args.loss_on} if args.loss_on else {})}
    cfg = cfg.replace(model=args.model, data=args.data or None, device=args.device, dtype=args.dtype,
                      also_prompts=args.also_prompts, train=train or None)
    run = train_sft(cfg, args.output, progress=not args.quiet)
    _print_bad(run.skipped)
    for row in run.too_long:
        print(f"left out (too long): {row}", file=sys.stderr)
    print(f"{run.n_train} of {run.n_examples} examples, {run.steps} steps, final loss "
          f"{run.loss_curve[-1]['loss'] if run.loss_curve else float('nan'):.3f}, {run.runtime_s:.0f} s, peak "
          f"{run.peak_rss_mb:.0f} MB; {'model' if cfg.train.method == 'full' else 'adapter'} in {run.adapter_dir}",
          file=sys.stderr)
    return 0


def _later_stage_config(args: argparse.Namespace) -> TuneConfig:
    """The config of ``tune reward`` or ``tune dpo``: the config file, with the model, adapter, data, device, dtype,
    training prompts and ``--max-steps`` the flags give."""
    cfg = TuneConfig.from_yaml(args.config)
    return cfg.replace(model=args.model, adapter=args.adapter, data=args.data or None, device=args.device,
                       dtype=args.dtype, also_prompts=args.also_prompts,
                       train={"max_steps": args.max_steps} if args.max_steps else None)


def cmd_reward(args: argparse.Namespace) -> int:
    """``mirage tune reward``: the GRPO stage with mirage's reward."""
    from mirage.tune.grpo import train_reward

    run = train_reward(_later_stage_config(args), args.output, progress=not args.quiet)
    _print_bad(run.skipped)
    last = run.curve[-1] if run.curve else {}
    print(f"{run.n_prompts} prompts, {run.steps} steps, last reward {last.get('reward', float('nan')):.3f}, "
          f"{run.runtime_s:.0f} s, peak {run.peak_rss_mb:.0f} MB; adapter in {run.adapter_dir}", file=sys.stderr)
    return 0


def _require_peft(args: argparse.Namespace) -> None:
    """``--adapter`` applies a LoRA adapter with peft: ConfigError naming the install when it is missing (checked
    before the data is read or a model loads)."""
    if not getattr(args, "adapter", None):
        return
    try:
        import peft  # noqa: F401
    except ImportError:
        raise ConfigError(f"--adapter {args.adapter} needs peft to apply the LoRA adapter, and peft is not "
                          "installed: pip install 'mirage-rag[tune]' (or pip install peft).") from None


def _eval_mirage(args: argparse.Namespace) -> tuple[Any, MirageConfig | None]:
    """The model ``tune eval`` and ``tune follow`` answer with (``--adapter`` on its base, or ``--model``), with its
    prompt (the adapter's unless ``--prompt``), and the judge's config (:func:`_judge`; checked before the model
    loads)."""
    from mirage.attribution.models import load_model
    from mirage.pipeline import Mirage
    from mirage.tune.adapters import load_tuned, read_adapter_info, trained_prompt

    if args.adapter and args.model:
        raise ConfigError("--adapter loads its own base model; give --adapter or --model, not both.")
    prompt = PromptConfig(name=args.prompt or "selfcitation")
    base = read_adapter_info(args.adapter).base_model if args.adapter else args.model or DEFAULT_MODEL
    tuned = args.adapter or args.model
    if args.prompt is None and tuned:  # the prompt the adapter, or a model folder mirage fine-tuned, was trained with
        prompt = trained_prompt(tuned) or prompt
    config = MirageConfig(prompt=prompt)
    judge = _judge(args, config, base)
    if args.adapter:
        lm = load_tuned(args.adapter, **loading_args(args, adapter=False))
    else:
        lm = load_model(base, **loading_args(args, adapter=False))
    return Mirage(lm, config=config), judge


def _judge(args: argparse.Namespace, config: MirageConfig, base: str) -> MirageConfig | None:
    """The judge's config (:func:`~mirage.tune.evaluate.judge_config` with ``--judge-rule`` and
    ``--judge-learned-model``, which checks that they go together), or None without any of the judge's flags."""
    from mirage.tune.evaluate import judge_config, judged_base

    if not (args.judge or args.judge_rule or args.judge_learned_model):
        return None
    return judge_config(config, judged_base(base), rule=args.judge_rule, learned_model=args.judge_learned_model)


def _leave_out_trained(args: argparse.Namespace, examples: list[TrainingExample]) -> list[TrainingExample]:
    """``examples`` less those whose question the tuned model records it was trained on (``--adapter``, or a
    ``--model`` folder of a full fine-tuning run) or an ``--exclude`` file holds, with the count said on stderr."""
    from mirage.tune.adapters import training_record
    from mirage.tune.training_set import held_out_questions, leave_out_questions

    trained: set[str] = set()
    sources = []
    tuned = args.adapter or args.model
    record = training_record(tuned) if tuned else None
    if record is not None:  # a model mirage tuned: an adapter, or a fully fine-tuned model's folder
        if record.get("questions") is not None:
            trained |= set(record["questions"])
            sources.append(f"{'the adapter' if args.adapter else 'the model'}'s")
        else:
            print(f"{tuned} records no training questions (saved before mirage recorded them): rows it was "
                  "trained on are left out only through --exclude.", file=sys.stderr)
    if args.exclude:
        trained |= held_out_questions(args.exclude)
        sources += [str(path) for path in args.exclude]
    if sources:
        examples, said = leave_out_questions(examples, trained, f"the training data ({', '.join(sources)})", "rows")
        print(said, file=sys.stderr)
    return examples


def _read_eval_rows(args: argparse.Namespace) -> list[TrainingExample]:
    """Every XOR-AttriQA row ``tune eval`` and ``tune follow`` read: each file's (``--limit-each``)."""
    from mirage.tune.data import xor_examples

    examples = []
    for path in resolve_files(args.data):
        found, skipped, _ = xor_examples(path, text=args.text, for_evaluation=True)
        examples += found[: args.limit_each] if args.limit_each is not None else found
        _print_bad([str(b) for b in skipped])
    return examples


def _eval_examples(args: argparse.Namespace, rows: list[TrainingExample], *,
                   usable: Callable[[list[TrainingExample]], list[TrainingExample]] | None = None
                   ) -> list[TrainingExample]:
    """The rows ``tune eval`` and ``tune follow`` answer, of those read (:func:`_read_eval_rows`): less the rows
    whose question the model was trained on (the questions ``--adapter`` records, and those of the ``--exclude``
    training sets, with any documents in any order), then those of ``--half`` (:func:`question_half`), then (of
    those ``usable`` keeps) the first ``--limit``."""
    examples = _leave_out_trained(args, rows)
    if args.half is not None:
        from mirage.runs.experiment import question_half

        kept = [ex for ex in examples if question_half(ex.question) == args.half]
        print(f"{len(kept)} of {len(examples)} rows ask a question of the {args.half} half "
              f"({len({ex.question for ex in kept})} questions).", file=sys.stderr)
        examples = kept
    if usable is not None:
        examples = usable(examples)
    if args.limit is not None:
        examples = examples[: args.limit]
    return examples


def cmd_eval(args: argparse.Namespace) -> int:
    """``mirage tune eval``: how often a (tuned) model cites."""
    from mirage.tune.evaluate import evaluate_citations

    _require_peft(args)
    examples = _eval_examples(args, _read_eval_rows(args))
    if not examples:
        raise InputError(f"data: no row of {' '.join(args.data)} is left to answer (every question is one the model "
                         "was trained on, or --limit is 0); judge it on a split it did not see.")
    mirage, judge = _eval_mirage(args)
    out = Path(args.output)
    report = evaluate_citations(mirage, examples, max_new_tokens=args.max_new_tokens,
                                progress=None if args.quiet else terminal_progress, judge=judge,
                                store=out.with_name(out.stem + ".answers.jsonl"))
    report.command = report_command(args, "eval")
    write_atomic(out, json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n")
    print(report.to_text(), file=sys.stderr)
    return 0


def cmd_follow(args: argparse.Namespace) -> int:
    """``mirage tune follow``: the permutation test (does the self-citation follow the supporting passage?)."""
    from mirage.tune.follow import evaluate_follow, single_supporting

    _require_peft(args)
    pool = _read_eval_rows(args)  # fillers: every row read, so an item's presentations are the same for any model
    examples = _eval_examples(args, pool, usable=single_supporting)
    if not examples:
        raise InputError(f"data: no row of {' '.join(args.data)} has exactly one supporting passage and a question "
                         "the model was not trained on; judge it on a split it did not see (e.g. "
                         "xor-attriqa-match:fi,ru).")
    mirage, judge = _eval_mirage(args)
    out = Path(args.output)
    report = evaluate_follow(mirage, examples, k=args.k, seed=args.seed, max_new_tokens=args.max_new_tokens,
                             judge=judge, store=out.with_name(out.stem + ".answers.jsonl"),
                             progress=None if args.quiet else terminal_progress, pool=pool)
    report.command = report_command(args, "follow")
    write_atomic(out, json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n")
    print(report.to_markdown(), file=sys.stderr)
    return 0


def report_command(args: argparse.Namespace, verb: str) -> str:
    """The ``mirage tune eval``, ``follow`` or ``pairs`` (``verb``) line that reproduces a report: every option of the
    command's options class that is set (:func:`mirage.options.options_argv`; paths as given, machine paths made
    relative), neither the device nor ``--quiet``, which change no answer."""
    from mirage.runs.files import portable_command

    options = {"follow": FollowOptions, "pairs": PairsOptions}.get(verb, EvalOptions)
    skip = ["quiet", *(PairsOptions.JUDGE_FIELDS if verb == "pairs" else ())]
    return portable_command(["tune", verb, *options_argv(options, args, skip=skip)])


def cmd_pairs(args: argparse.Namespace) -> int:
    """``mirage tune pairs``: SelfCite preference pairs from the model's own answers to the follow presentations."""
    from mirage.tune.follow import permutation_presentations, single_supporting
    from mirage.tune.pairs import build_pairs, write_pairs

    _require_peft(args)
    pool = _read_eval_rows(args)  # fillers: every row read, as tune follow takes them
    examples = _eval_examples(args, pool, usable=single_supporting)
    if not examples:
        raise InputError(f"data: no row of {' '.join(args.data)} has exactly one supporting passage and a question "
                         "the model was not trained on; give train/val rows it did not see.")
    presentations = permutation_presentations(examples, k=args.k, seed=args.seed, pool=pool)
    mirage, _judge = _eval_mirage(args)
    out = Path(args.output)
    report = build_pairs(mirage, presentations, max_new_tokens=args.max_new_tokens, max_size=args.max_size,
                         store=out.with_name(out.stem + ".outcomes.jsonl"),
                         progress=None if args.quiet else terminal_progress)
    report.command = report_command(args, "pairs")
    write_pairs(report.pairs, out)
    write_atomic(out.with_suffix(".json"), json.dumps(report.summary(), indent=1, ensure_ascii=False) + "\n")
    print(report.to_text(), file=sys.stderr)
    return 0


def cmd_dpo(args: argparse.Namespace) -> int:
    """``mirage tune dpo``: the preference stage on SelfCite pairs."""
    from mirage.tune.dpo import train_preference

    run = train_preference(_later_stage_config(args), args.output, progress=not args.quiet)
    _print_bad(run.skipped)
    last = run.curve[-1] if run.curve else {}
    print(f"{run.n_pairs} pairs of {run.questions} questions, {run.steps} steps, last loss "
          f"{last.get('loss', float('nan')):.3f}, margin {last.get('margins', float('nan')):.3g}, "
          f"{run.runtime_s:.0f} s, peak {run.peak_rss_mb:.0f} MB; adapter in {run.adapter_dir}", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``mirage tune export``: copy an adapter folder with its weights in another dtype (fp16 for shipping); a
    training checkpoint becomes an adapter folder first."""
    import tempfile

    from mirage.tune.adapters import export_adapter
    from mirage.tune.sft import checkpoint_adapter

    source = Path(args.adapter)
    full = (source / "model.safetensors").is_file()
    if full != (args.rank is not None):
        raise ConfigError(f"{source} is a fully fine-tuned model folder: give --rank (and --embed-rank, --norms) to "
                          "take an adapter from its change" if full else
                          f"--rank takes an adapter from a fully fine-tuned model folder (DIR/model), and {source} "
                          "is not one (no model.safetensors); leave --rank out to export an adapter folder.")
    if full:  # DIR/model of a full fine-tuning run: a LoRA of its change from the base model, then the copy
        from mirage.tune.adapters import adapter_from_model

        with tempfile.TemporaryDirectory() as tmp:
            taken, kept = adapter_from_model(source, Path(tmp) / "adapter", rank=args.rank,
                                             embed_rank=args.embed_rank, norms=args.norms, base=args.base)
            print(f"rank {args.rank}: {kept:.3f} of the linear layers' change kept", file=sys.stderr)
            dest = export_adapter(taken, args.output, dtype=args.dtype)
    elif (source / "trainer_state.json").is_file():  # DIR/checkpoints/checkpoint-N of a run stopped partway
        with tempfile.TemporaryDirectory() as tmp:
            dest = export_adapter(checkpoint_adapter(source, Path(tmp) / "adapter"), args.output, dtype=args.dtype)
    else:
        dest = export_adapter(source, args.output, dtype=args.dtype)
    size = (dest / "adapter_model.safetensors").stat().st_size / 1e6
    print(f"wrote {dest} ({size:.1f} MB of {args.dtype} weights)", file=sys.stderr)
    return 0


def _labelled(values: Sequence[str] | None, flag: str) -> list[tuple[str, str]]:
    """``LABEL=FILE`` values as (label, file) pairs; a one-line ConfigError for any other form."""
    pairs = []
    for value in values or []:
        label, sep, path = value.partition("=")
        if not sep or not label or not path:
            raise ConfigError(f"{flag} {value!r}: give LABEL=FILE, e.g. {flag} val=benchmarks/results/x.json.")
        pairs.append((label, path))
    return pairs


def cmd_card(args: argparse.Namespace) -> int:
    """``mirage tune card``: write an adapter folder's model card from its records and evaluation reports."""
    from mirage.tune.card import adapter_card, write_card

    text = adapter_card(args.adapter, name=args.name or Path(args.adapter).name,
                        follow=_labelled(args.follow, "--follow"), evals=_labelled(args.eval, "--eval"))
    print(f"wrote {write_card(args.adapter, text)}", file=sys.stderr)
    return 0


def _add_eval_args(ev: argparse.ArgumentParser, options: type[EvalOptions] = EvalOptions, *,
                   skip: Sequence[str] = (), output_help: str | None = None) -> None:
    """The arguments ``tune eval``, ``follow`` and ``pairs`` share (``options``' own come after, less ``skip``): the
    rows, the model, the answers (``output_help``: ``-o``'s help, where the command writes something else)."""
    shared = [opt.field.name for opt in option_fields(EvalOptions) if opt.field.name not in ("output", *skip)]
    add_options(ev, options, shared)
    add_device_args(ev, adapter=False)  # its own --adapter above
    add_options(ev, options, ["output"], override={"output": {"help": output_help}} if output_help else None)
    add_options(ev, options, skip=[*shared, "output", *skip])


def _add_training_stage(stages: argparse._SubParsersAction, name: str, *, help: str, description: str,
                        tune: Sequence[str], train: Sequence[str], run: Callable[[argparse.Namespace], int],
                        config_file: str | None = None) -> None:
    """A training stage (``tune sft``, ``reward``, ``dpo``), its arguments in this order: the config file
    (``config_file``: its default beside ``sft.yaml``, else ``sft.yaml``), the config's fields ``tune`` (of
    :class:`TuneConfig`) and ``train`` (of its ``train`` section) that flags set (unset: the config's value stays),
    ``--quiet``, the device (training runs on one) and the output folder; ``run`` handles it."""
    stage = stages.add_parser(name, help=help, description=description)
    config = {"cli_default": str(DEFAULT_CONFIG.with_name(config_file)),
              "help": f"tune config YAML (default configs/tune/{config_file})"} if config_file else None
    add_options(stage, StageOptions, ["config"], override={"config": config} if config else None)
    add_options(stage, TuneConfig, tune, unset=True)
    add_options(stage, TrainSettings, train, unset=True)
    add_options(stage, StageOptions, ["quiet"])
    add_device_args(stage, placement=False)  # training: one device
    add_options(stage, StageOptions, ["output"])
    stage.set_defaults(func=run)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``mirage tune {data,sft,reward,eval,follow,pairs,dpo,export,card}``."""
    tune = sub.add_parser("tune", help=TUNE_HELP, description=TUNE_HELP)
    stages = tune.add_subparsers(dest="stage", required=True)

    data = stages.add_parser(
        "data", help="write a training set (JSONL of RAG items with cited answers)",
        description="gold: XOR-AttriQA train/val rows, the annotated answer cited with the passages the annotators "
                    "marked as supporting, and ALCE's hand-cited ELI5 demos. internals: answers the model generates, "
                    "cited per sentence with mirage's citations. The fi and ru test splits are refused. Malformed "
                    "rows are reported with file and line and skipped.")
    add_options(data, TrainingSetOptions, skip=["output"])
    add_device_args(data)
    add_options(data, TrainingSetOptions, ["output"])
    data.set_defaults(func=cmd_data)

    _add_training_stage(
        stages, "sft", help="supervised fine-tuning of a LoRA adapter on cited answers (trl SFTTrainer)",
        description="Train a LoRA adapter on the training set's cited answers, loss on the answer only, each "
                    "example in the model's own inference prompt. Writes DIR/adapter (with its base model named in "
                    "mirage-adapter.json), DIR/sft.json (loss curve, time, peak memory) and DIR/checkpoints; "
                    "running again with the same -o resumes from the newest checkpoint.",
        tune=["model", "data", "also_prompts"], train=["max_steps", "method", "loss_on"], run=cmd_sft)
    _add_training_stage(
        stages, "reward", help="the reward stage: GRPO on mirage's citation reward, KL penalty against the start (trl)",
        description="Sample answers from the model (the SFT adapter in the config's adapter), reward each with RAGE's "
                    "citation precision/recall against the human labels, its agreement with mirage's citations of the "
                    "same answer, the faithfulness drop of its cited documents, a format term and a permutation term "
                    "(the same passages cited when the question's documents come in another order: data made with "
                    "--spread-positions) (weights in the config's reward section), and train the adapter with GRPO and "
                    "a KL penalty (reward.beta) against the starting model. Writes DIR/adapter, DIR/reward.json and "
                    "DIR/checkpoints; running again with the same -o resumes.",
        tune=["model", "adapter", "data", "also_prompts"], train=["max_steps"], run=cmd_reward,
        config_file="reward.yaml")

    ev = stages.add_parser(
        "eval", help="how often a model (or base + adapter) cites, on XOR-AttriQA rows",
        description="Generate a greedy answer per row with the self-citation prompt and report the share of answers "
                    "and sentences with [n] citations, their precision/recall against the human labels and the "
                    "exact match of the reference answer.")
    _add_eval_args(ev)
    ev.set_defaults(func=cmd_eval)

    fo = stages.add_parser(
        "follow", help="the permutation test: does the self-citation follow the supporting passage when it moves?",
        description="For each row with exactly one supporting passage, present the question K times with that "
                    "passage at position 1..K (the other passages in one fixed shuffled order), generate a greedy "
                    "answer to each and report how often its self-citations follow the passage (cite its new "
                    "number and at most one other document), per position, and how often [1] is cited when it "
                    "does not support; beside cite-[1], a random citer with the model's citation count and, with "
                    "--judge, mirage's citations of the same answers.")
    _add_eval_args(fo, FollowOptions)
    fo.set_defaults(func=cmd_follow)

    pairs = stages.add_parser(
        "pairs", help="SelfCite preference pairs from the model's own cited answers (the data of tune dpo)",
        description="Present each row with exactly one supporting passage K times (as tune follow does), answer "
                    "greedily, and score every citation set of the size the answer cites by SelfCite's reward (the "
                    "answer's mean log-probability with only those documents minus without them; no label is read). "
                    "Where the best-rewarded set is not the model's own, write a pair: chosen, the answer citing the "
                    "best set; rejected, the answer citing its own; the same text and as many documents on each "
                    "side. Answers that cite nothing, more than --max-size documents, or the best set already give "
                    "no pair and are counted.")
    _add_eval_args(pairs, PairsOptions, skip=PairsOptions.JUDGE_FIELDS, output_help=PairsOptions.OUTPUT_HELP)
    pairs.set_defaults(func=cmd_pairs, **dict.fromkeys(PairsOptions.JUDGE_FIELDS))

    _add_training_stage(
        stages, "dpo", help="the preference stage: DPO on SelfCite pairs (trl), from an adapter or the base model",
        description="Train a LoRA adapter (the config's adapter trained further, its frozen copy the reference; or a "
                    "fresh one on the base model) with trl's DPO on the pairs of mirage tune pairs, each in the "
                    "model's inference prompt. Writes DIR/adapter (recording every pair's question as trained on), "
                    "DIR/preference.json (loss and reward margins per step, time, peak memory) and DIR/checkpoints; "
                    "running again with the same -o resumes.",
        tune=["model", "adapter", "data", "also_prompts"], train=["max_steps"], run=cmd_dpo, config_file="dpo.yaml")

    ex = stages.add_parser("export", help="copy an adapter folder with its weights in fp16 (for shipping), or take "
                                          "one from a fully fine-tuned model",
                           description="Copy an adapter folder (DIR/adapter of mirage tune sft or reward) to OUTPUT "
                                       "with its LoRA weights cast to --dtype. Given a training checkpoint "
                                       "(DIR/checkpoints/checkpoint-N of a run stopped partway), write that step's "
                                       "adapter, with the run's base model recorded, so it can be evaluated and "
                                       "loaded like a finished run's. Given a fully fine-tuned model folder (DIR/model "
                                       "of a run with train.method: full) and --rank, write a LoRA adapter of its "
                                       "change from the base model: each linear layer's change truncated to --rank "
                                       "by SVD, the input embeddings' to --embed-rank, the norms carried whole with "
                                       "--norms.")
    add_options(ex, ExportOptions)
    ex.set_defaults(func=cmd_export)

    card = stages.add_parser("card", help="write an adapter folder's model card (README.md) from its evaluations",
                             description="Write ADAPTER/README.md from the adapter's mirage-adapter.json and the "
                                         "reports of mirage tune follow (--follow) and mirage tune eval (--eval), "
                                         "each figure beside cite-[1]'s on the same answers. A README mirage did "
                                         "not write is not replaced.")
    add_options(card, CardOptions)
    card.set_defaults(func=cmd_card)
