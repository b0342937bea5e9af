"""A probe, not a shipped feature: a LoRA adapter on the embedded base model taken from the weight change of a fully
fine-tuned model folder (``mirage tune sft`` with ``train.method: full``), by truncated SVD of each linear layer's
change (tuned minus base), so that a model trained in full can be judged in the form mirage ships (adapters).

    python benchmarks/extract_lora.py out/tune/sft_marked_yesno_trainval/model --rank 64 -o out/tune/lora64_marked_yesno
    mirage tune follow xor-attriqa-match:val --adapter out/tune/lora64_marked_yesno --limit 16 --text en --k 5 \
        --seed 0 --max-new-tokens 48 -o benchmarks/results/tune_follow_smollm2/lora64_marked_yesno_val.json

Only the linear layers of every block are carried (peft's ``all-linear``); the change of the embeddings and of the
norms is left out, and the share of the linear layers' change the rank keeps (the squared singular values kept over
all) is printed. The adapter records the tuned folder's prompt and training questions, so ``mirage tune follow``
and ``eval`` leave out what the model was trained on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from safetensors.torch import load_file

    from mirage.attribution.models import load_model
    from mirage.tune.adapters import lora_from_change, save_adapter, trained_prompt, training_record

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a fully fine-tuned model folder (DIR/model of mirage tune sft)")
    parser.add_argument("--base", default="smollm2-135m-instruct", help="the embedded model it was tuned from")
    parser.add_argument("--rank", type=int, default=64, help="LoRA rank (default 64)")
    parser.add_argument("-o", "--output", required=True, type=Path, help="the adapter folder to write")
    args = parser.parse_args(argv)
    if not (args.model / "model.safetensors").is_file():
        raise SystemExit(f"{args.model}: no model.safetensors; give the model folder of a full fine-tuning run")
    if args.output.exists():
        raise SystemExit(f"-o {args.output} exists; give a new folder")
    base = load_model(args.base, dtype="float32").model
    model, kept = lora_from_change(base, load_file(args.model / "model.safetensors"), args.rank)
    save_adapter(model, args.output, base_name=args.base, prompt=trained_prompt(args.model),
                 training=training_record(args.model))
    print(f"rank {args.rank}: {kept:.3f} of the linear layers' change kept; adapter in {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
