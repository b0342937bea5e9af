"""ContextCite as a peer of mirage on XOR-AttriQA: the command line of :mod:`mirage.peers.contextcite`.

    python benchmarks/contextcite_xor.py DATA.jsonl [DATA.jsonl ...] -o DIR [--model smollm2-135m-instruct]
        [--text en|native] [--num-ablations 64] [--seed 0] [--limit N]

writes ``DIR/contextcite.jsonl``, one record per item (resumable; a file made with other settings is refused):
``{key, settings, scores, seconds, n_forward, n_docs}``; read the scores back with
:func:`mirage.peers.contextcite.contextcite_scores`. See :mod:`mirage.peers.contextcite` for what is run.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from harness import Text, UsageError, device_arg, dtype_arg, limit_arg, main, model_arg, text_arg

from mirage.options import cli_arg
from mirage.peers.contextcite import CONTEXTCITE_NUM_ABLATIONS, STORE_NAME, run_contextcite, store_settings
from mirage.runs.experiment import ExperimentConfig
from mirage.runs.progress import terminal_progress
from mirage.runs.store import ResumableJSONL
from mirage.scoring.xor_data import concat_data, load_xor_attriqa


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    data: tuple[str, ...] = cli_arg(flag="data", help="XOR-AttriQA JSONL files (match or per-passage release)")
    output: str = cli_arg(flag="--output", aliases=("-o",), help=f"output folder (writes {STORE_NAME} there)")
    model: str = model_arg()
    text: Text = text_arg()
    num_ablations: int = cli_arg(CONTEXTCITE_NUM_ABLATIONS, flag="--num-ablations", metavar="N",
                                 help="ablated contexts per item (ContextCite's own number)")
    seed: int = cli_arg(0, flag="--seed", help="mask seed (0: ContextCite's own masks)")
    limit: int | None = limit_arg(help="keep the first N rows of each file")
    device: str | None = device_arg(help="device to load the model on (default: mirage's choice)")
    dtype: str | None = dtype_arg(help="model dtype (default: mirage's choice)")
    full_head: bool = cli_arg(False, flag="--full-head", help="run the output head over every position, as "
                              "ContextCite's own code does (same scores up to float rounding; slower, most on large "
                              "vocabularies)")


def run(args: Options) -> int:
    if args.num_ablations < 1 or args.seed < 0:
        raise UsageError("--num-ablations must be >= 1 and --seed >= 0")

    # The XOR-AttriQA scorer's pipeline config (its default prompt, "standard"), as `mirage score xor-attriqa` runs.
    exp = dataclasses.replace(ExperimentConfig.from_dict({"model": args.model, "text": args.text},
                                                         command="xor-attriqa"),
                              device=args.device, dtype=args.dtype)
    data = concat_data(load_xor_attriqa(p, text=exp.text, limit=args.limit) for p in args.data)
    settings = store_settings(exp.model, exp.text, exp.pipeline.prompt, num_ablations=args.num_ablations,
                              seed=args.seed)
    store = ResumableJSONL(Path(args.output) / STORE_NAME, settings=settings)
    scores, failed = run_contextcite(exp.load_mirage, data.items, store=store, num_ablations=args.num_ablations,
                                     seed=args.seed, progress=terminal_progress, full_head=args.full_head)
    for bad in list(data.bad_rows) + failed:
        print(f"skipped {bad.file} line {bad.line}: {bad.error}", file=sys.stderr)
    n_scored = len({item.key for item in data.items} & set(scores))
    print(f"{n_scored} item(s) scored, {len(data.bad_rows) + len(failed)} skipped; {store.path}")
    return 1 if failed and not n_scored else 0


if __name__ == "__main__":
    main(Options, run)
