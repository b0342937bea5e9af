"""Citation fine-tuning: teach a model to write ``[n]`` citations of the documents it used, with mirage as a training
signal and as the judge (RAGE's two steps: supervised fine-tuning, then a reward stage; LoRA adapters).

    from mirage.tune import TuneConfig, build_gold, train_sft, load_tuned
    examples, report = build_gold(["train.jsonl", "val.jsonl"], ["eli5_alce_prompt.json"])
    run = train_sft(TuneConfig(data=("gold.jsonl",)), "out/sft")
    lm = load_tuned(run.adapter_dir)                    # Mirage(lm) attributes with the tuned model
    Mirage.from_pretrained("smollm2-135m-cite-follow",  # the adapter mirage ships, by its embedded name,
                           config=MirageConfig().replace(prompt={"name": "selfcitation_marked"}))  # its prompt

Stages, each a module: :mod:`~mirage.tune.config` (the settings), :mod:`~mirage.tune.data` (training sets;
:mod:`~mirage.tune.training_set` builds one as ``mirage tune data`` does, from its options),
:mod:`~mirage.tune.sft`, :mod:`~mirage.tune.reward` (the reward terms and the judge), :mod:`~mirage.tune.grpo` (the
reward stage), :mod:`~mirage.tune.adapters` (saving, loading, refusing adapters; an adapter taken from a fully
fine-tuned model), :mod:`~mirage.tune.evaluate` (does the model cite, and does it cite what mirage sees it used?),
:mod:`~mirage.tune.follow` (does the citation move with the supporting passage?), :mod:`~mirage.tune.card` (an
adapter's model card from its evaluations) and :mod:`~mirage.tune.cli` (``mirage tune``).
Training needs the ``tune`` extra (trl, peft).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mirage.runs.lazy import lazy_exports

if TYPE_CHECKING:
    from mirage.tune.adapters import AdapterError, AdapterInfo, apply_adapter, export_adapter, load_tuned, save_adapter
    from mirage.tune.config import LoraSettings, RewardSettings, TrainSettings, TuneConfig
    from mirage.tune.data import (
        TrainingExample,
        build_gold,
        internals_examples,
        read_examples,
        shuffle_documents,
        write_examples,
    )
    from mirage.tune.evaluate import CitationEval, JudgeSummary, evaluate_citations
    from mirage.tune.grpo import RewardRun, train_reward
    from mirage.tune.reward import CitationJudge, RewardTerms
    from mirage.tune.sft import SFTRun, train_sft

#: Imported on first access: training brings torch, trl and peft, and ``mirage tune --help`` should not.
__getattr__, __dir__ = lazy_exports(__name__, {
    "AdapterError": "adapters", "AdapterInfo": "adapters", "apply_adapter": "adapters", "export_adapter": "adapters",
    "load_tuned": "adapters", "save_adapter": "adapters",
    "LoraSettings": "config", "RewardSettings": "config", "TrainSettings": "config", "TuneConfig": "config",
    "TrainingExample": "data", "build_gold": "data", "internals_examples": "data", "read_examples": "data",
    "shuffle_documents": "data", "write_examples": "data",
    "CitationEval": "evaluate", "JudgeSummary": "evaluate", "evaluate_citations": "evaluate",
    "RewardRun": "grpo", "train_reward": "grpo", "CitationJudge": "reward", "RewardTerms": "reward",
    "SFTRun": "sft", "train_sft": "sft",
})

__all__ = [
    "AdapterError",
    "AdapterInfo",
    "CitationEval",
    "CitationJudge",
    "JudgeSummary",
    "LoraSettings",
    "RewardRun",
    "RewardSettings",
    "RewardTerms",
    "SFTRun",
    "TrainSettings",
    "TrainingExample",
    "TuneConfig",
    "apply_adapter",
    "build_gold",
    "evaluate_citations",
    "export_adapter",
    "internals_examples",
    "load_tuned",
    "read_examples",
    "save_adapter",
    "shuffle_documents",
    "train_reward",
    "train_sft",
    "write_examples",
]
