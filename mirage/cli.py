"""Command line: parses arguments and calls the library.

    mirage attribute INPUT.json -o OUTPUT.jsonl [--model NAME] [--config FILE] [--prompt selfcitation|standard]
                     [--cti-std K] [--cci-top-k N | --cci-top-percent P]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import ConfigError, MirageConfig
from .inputs import InputError, read_items
from .models import ModelLoadError
from .runs import StoreError, item_keys
from .sharding import ShardError, StoreFor, in_shards, report_share_done

#: CLI flag → (config section, field, type, help). Each option's help is written once, here.
CONFIG_FLAGS: dict[str, tuple[str, str, type, str]] = {
    "--prompt": ("prompt", "name", str, "prompt template: selfcitation (ALCE, asks for [n] citations) or standard"),
    "--max-new-tokens": ("generation", "max_new_tokens", int, "tokens to generate when an item has no output"),
    "--seed": ("generation", "seed", int, "generation seed"),
    "--cti-metric": ("cti", "metric", str, "kl_noctx_ctx (reference, default), kl_ctx_noctx (paper), js, prob_diff"),
    "--cti-std": ("cti", "std_k", float, "CTI: keep tokens with score >= mean + K*std (MIRAGE-EX); default 1"),
    "--cti-threshold": ("cti", "threshold", float, "CTI: calibrated fixed threshold (MIRAGE-CAL)"),
    "--cci-method": ("cci", "method", str, "saliency (default), input_x_gradient, integrated_gradients"),
    "--cci-top-k": ("cci", "top_k", int, "CCI: keep the N most salient context tokens"),
    "--cci-top-percent": ("cci", "top_percent", float, "CCI: keep the top P%% of context tokens (default 5)"),
    "--cci-percent-rule": ("cci", "percent_rule", str, "range (max - p(max-min), reference code) or percentile"),
    "--cci-batch-size": ("cci", "batch_size", int, "selected tokens per backward pass (default: fit free memory)"),
    "--max-citations": ("aggregation", "max_citations", int, "at most N documents cited per sentence (default 3)"),
}


def add_config_args(parser: argparse.ArgumentParser) -> None:
    """Model and pipeline options shared by every command."""
    parser.add_argument("--model", default="smollm2-135m-instruct",
                        help="embedded model name, Hugging Face id or local path (default: smollm2-135m-instruct)")
    parser.add_argument("--config", help="YAML config file (sections prompt, generation, cti, cci, aggregation)")
    parser.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--dtype", help="float32, bfloat16 or float16 (default: bf16/fp16 on GPU, fp32 on CPU)")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow model code from the hub")
    for flag, (_section, _field, kind, help_text) in CONFIG_FLAGS.items():
        parser.add_argument(flag, type=kind, default=None, help=help_text)


def config_from_args(args: argparse.Namespace) -> MirageConfig:
    """The config file (if any) with the command-line flags applied on top."""
    cfg = MirageConfig.from_yaml(args.config) if args.config else MirageConfig()
    changes: dict[str, dict] = {}
    for flag, (section, field, _kind, _help) in CONFIG_FLAGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            changes.setdefault(section, {})[field] = value
    if "top_k" in changes.get("cci", {}):
        changes["cci"].setdefault("top_percent", None)
    elif "top_percent" in changes.get("cci", {}):
        changes["cci"].setdefault("top_k", None)
    if "threshold" in changes.get("cti", {}):
        changes["cti"].setdefault("selector", "threshold")
    return cfg.replace(**changes)


def _progress(iterable, total: int | None, desc: str):
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, dynamic_ncols=True)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give 0 or more")
    return value


def check_output_file(output: str | Path, inputs: list[str | Path]) -> None:
    """Refuse an output that is a directory or one of the inputs (writing results there would destroy it)."""
    out = Path(output)
    if out.is_dir():
        raise InputError(f"-o {output} is a directory; give a file path, e.g. {Path(output) / 'attributed.jsonl'}.")
    for inp in inputs:
        same = out.resolve() == Path(inp).resolve()
        if not same and out.exists() and Path(inp).exists():
            same = os.path.samefile(out, inp)
        if same:
            raise InputError(f"-o {output} is the input file; results go to a new file (e.g. "
                             f"{out.with_name(out.stem + '.attributed.jsonl')}), never over the input.")


def check_device_args(args: argparse.Namespace) -> None:
    """Validate --device and --dtype before anything slow happens."""
    from .models import resolve_device, resolve_dtype

    device = resolve_device(args.device)
    resolve_dtype(args.dtype, device)


def attribute_settings(model: str, cfg: MirageConfig) -> dict[str, Any]:
    """What an attribution record depends on: a results file made with other settings is not resumed."""
    return {"model": model, "config": cfg.to_dict()}


def cmd_attribute(args: argparse.Namespace) -> int:
    """Attribute every item of INPUT; one JSON line per item in OUTPUT, resumable."""
    from .inputs import make_item
    from .pipeline import Mirage
    from .rendering import result_to_text

    check_output_file(args.output, [args.input])
    cfg = config_from_args(args)
    check_device_args(args)
    items = list(read_items(args.input))
    if args.limit is not None:
        items = items[: args.limit]
    keys = item_keys(raw for _index, raw in items)
    settings = attribute_settings(args.model, cfg)
    loaded: list[Mirage] = []

    def compute(store_for: StoreFor) -> int:
        out = store_for(args.output, settings=settings)
        errors = store_for(Path(str(args.output) + ".errors.jsonl"), settings=settings)
        todo = [(key, i, raw) for key, (i, raw) in zip(keys, items) if key not in out.done and out.owns(key)]
        where = f"rank {out.shard.rank} of {out.shard.world}: " if out.shard.world > 1 else ""
        failed = 0

        def fail(key: str, index: int, err: Exception) -> None:
            nonlocal failed
            failed += 1
            message = str(err) if isinstance(err, InputError) else f"item {index}: {type(err).__name__}: {err}"
            errors.write_once({"key": key, "index": index, "error": message})
            print(f"skipped: {message}", file=sys.stderr)

        valid = []
        for key, index, raw in todo:  # what needs no model is checked before the model loads
            try:
                if isinstance(raw, Exception):
                    raise raw
                make_item(raw, item=index)
            except InputError as err:
                fail(key, index, err)
                continue
            valid.append((key, index, raw))
        print(f"{where}{len(items) - len(todo)} of {len(items)} items already in {args.output}"
              f"{' or in other ranks’ shares' if where else ''}; {failed} invalid; attributing {len(valid)}.",
              file=sys.stderr)
        if valid and not loaded:
            loaded.append(Mirage.from_pretrained(args.model, config=cfg, device=args.device, dtype=args.dtype,
                                                 trust_remote_code=args.trust_remote_code))
        for key, index, raw in _progress(valid, len(valid), "attribute") if valid else ():
            try:
                res = loaded[0].attribute_item(raw, index=index)
            except Exception as err:  # one bad item never stops the batch
                logging.getLogger(__name__).info("item %s failed", index, exc_info=True)
                fail(key, index, err)
                continue
            out.write({"key": key, "index": index, **res.to_dict()})
            if not args.quiet:
                print(result_to_text(res))
        if todo:
            print(f"done: {len(todo) - failed} attributed, {failed} skipped (see {errors.path}).", file=sys.stderr)
        return failed

    failed = in_shards(compute)
    if failed is None:
        return report_share_done(f"merges into {args.output}")
    return 0 if failed == 0 else 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mirage", description="Model-internals-based RAG answer attribution.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True)
    att = sub.add_parser("attribute", help="attribute answers of a JSON/JSONL file of items")
    att.add_argument("input", help='JSON list or JSONL of {"question", "docs": [{"title", "text"}], "output"?}')
    att.add_argument("-o", "--output", required=True, help="output JSONL (re-running skips finished items)")
    att.add_argument("--limit", type=non_negative_int, help="only the first N items")
    att.add_argument("--quiet", action="store_true", help="do not print the attributed answers")
    add_config_args(att)
    att.set_defaults(func=cmd_attribute)
    for register in EXTRA_COMMANDS:
        register(sub)
    return parser


#: Other modules add subcommands here (score, bias, view) with a function taking the subparsers object.
EXTRA_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = []


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mirage`` command."""
    _load_extra_commands()
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if not args.verbose:
        warnings.filterwarnings("default", module="mirage")
    try:
        return args.func(args)
    except (ConfigError, InputError, ModelLoadError, ShardError, StoreError) as err:
        print(f"mirage: error: {err}", file=sys.stderr)
        return 2


def _load_extra_commands() -> None:
    import importlib

    for module in ("mirage.scoring.cli", "mirage.bias.cli", "mirage.report"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name is None or not err.name.startswith("mirage"):
                raise


if __name__ == "__main__":
    # Run the importable module's main: extra commands register into ``mirage.cli``, not into ``__main__``.
    from mirage.cli import main as _main

    sys.exit(_main())
