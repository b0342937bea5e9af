"""ContextCite as a peer of mirage on XOR-AttriQA: the command line of :mod:`mirage.peers.contextcite`.

    python benchmarks/contextcite_xor.py DATA.jsonl [DATA.jsonl ...] -o DIR [--model smollm2-135m-instruct]
        [--text en|native] [--num-ablations 64] [--seed 0] [--limit N]

writes ``DIR/contextcite.jsonl``, one record per item (resumable; a file made with other settings is refused):
``{key, settings, scores, seconds, n_forward, n_docs}``; read the scores back with
:func:`mirage.peers.contextcite.contextcite_scores`. See :mod:`mirage.peers.contextcite` for what is run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mirage.config import DEFAULT_MODEL
from mirage.peers.contextcite import CONTEXTCITE_NUM_ABLATIONS, STORE_NAME, run_contextcite, store_settings
from mirage.runs.experiment import ExperimentConfig
from mirage.runs.progress import terminal_progress
from mirage.runs.store import ResumableJSONL
from mirage.scoring.xor_data import concat_data, load_xor_attriqa


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", nargs="+", help="XOR-AttriQA JSONL files (match or per-passage release)")
    parser.add_argument("-o", "--output", required=True, help=f"output folder (writes {STORE_NAME} there)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="embedded model name, Hugging Face id or local path")
    parser.add_argument("--text", choices=["en", "native"], default="en", help="English translations or native text")
    parser.add_argument("--num-ablations", type=int, default=CONTEXTCITE_NUM_ABLATIONS,
                        help=f"ablated contexts per item (ContextCite's default: {CONTEXTCITE_NUM_ABLATIONS})")
    parser.add_argument("--seed", type=int, default=0, help="mask seed (0: ContextCite's own masks)")
    parser.add_argument("--limit", type=int, help="keep the first N rows of each file")
    parser.add_argument("--device", help="device to load the model on (default: mirage's choice)")
    parser.add_argument("--dtype", help="model dtype (default: mirage's choice)")
    parser.add_argument("--full-head", action="store_true",
                        help="run the output head over every position, as ContextCite's own code does (same scores "
                             "up to float rounding; slower, most on large vocabularies)")
    args = parser.parse_args(argv)
    if args.num_ablations < 1 or args.seed < 0:
        parser.error("--num-ablations must be >= 1 and --seed >= 0")

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
    sys.exit(main())
