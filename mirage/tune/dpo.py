"""The preference stage of citation tuning: trl's ``DPOTrainer`` on SelfCite preference pairs
(:mod:`mirage.tune.pairs`: the same answer citing the best-rewarded set against citing the model's own, as many
documents on each side), training a LoRA adapter.

    run = train_preference(TuneConfig.from_yaml("configs/tune/dpo.yaml"), "out/dpo")

The starting point is ``adapter`` (e.g. the shipped follower) trained further, its reference a frozen copy of it (trl
adds a ``ref`` adapter to a peft model given no reference model); without ``adapter`` a fresh LoRA adapter starts on
the base model, whose reference is the base model itself. Each pair's prompt is mirage's inference prompt (the user
message for a chat model, which trl renders with the same chat template; the plain prompt text otherwise), so what
the stage teaches is what ``mirage tune follow`` measures. The adapter records every question of its pairs as
trained on, so ``tune eval``/``follow`` and the bias study leave them out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.models import LoadedModel, load_model
from mirage.attribution.serialization import library_versions
from mirage.config import ConfigError, MirageConfig, PromptConfig
from mirage.data.inputs import InputError
from mirage.pipeline import Mirage
from mirage.runs.store import write_atomic
from mirage.tune.adapters import check_base, read_adapter_info
from mirage.tune.config import TuneConfig
from mirage.tune.data import TrainingExample
from mirage.tune.grpo import prompt_of
from mirage.tune.pairs import PreferencePair, read_pairs
from mirage.tune.sft import (
    TrainingRun,
    check_run_dir,
    lora_stage,
    loss_curve,
    peak_rss_mb,
    train_lora_stage,
    trainable_adapter,
    trainer_arguments,
)

if TYPE_CHECKING:
    import datasets

__all__ = ["PREFERENCE_RESULT_FILE", "PreferenceRun", "pair_example", "preference_dataset", "train_preference"]

#: The run record ``train_preference`` writes in its folder.
PREFERENCE_RESULT_FILE = "preference.json"


def pair_example(pair: PreferencePair) -> TrainingExample:
    """The pair as a training example: its question, documents and supporting passages, its chosen answer."""
    return TrainingExample(id=pair.id, source="pairs", question=pair.question, docs=pair.docs, output=pair.chosen,
                           citations=[], supporting=pair.supporting, meta=pair.meta)


def preference_dataset(mirage: Mirage, pairs: Sequence[PreferencePair],
                       prompt_for: Callable[[str], PromptConfig] | None = None) -> datasets.Dataset:
    """trl's preference dataset: per pair, mirage's prompt and the chosen and rejected answers (assistant messages
    where the prompt is chat messages, text otherwise); ``prompt_for``: each pair's prompt from its id
    (:meth:`~mirage.tune.config.TuneConfig.example_prompt`; default: mirage's)."""
    import datasets as hf_datasets

    rows: list[dict[str, Any]] = []
    for pair in pairs:
        prompt = prompt_of(mirage, pair_example(pair), prompt_for(pair.id) if prompt_for else None)
        if isinstance(prompt, str):
            rows.append({"prompt": prompt, "chosen": pair.chosen, "rejected": pair.rejected})
        else:
            rows.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": pair.chosen}],
                         "rejected": [{"role": "assistant", "content": pair.rejected}]})
    return hf_datasets.Dataset.from_list(rows)


@dataclass(kw_only=True)
class PreferenceRun(TrainingRun):
    """What a ``train_preference`` run did (:class:`~mirage.tune.sft.TrainingRun`, and): the adapter it started from,
    its pairs and their distinct questions, and the logged curve per step (``loss``; ``margins``, the chosen side's
    implicit reward minus the rejected side's; ``accuracies``, the share of pairs where it is positive; ``chosen`` and
    ``rejected``, each side's implicit reward)."""

    start_adapter: str | None
    n_pairs: int
    questions: int
    curve: list[dict[str, float]]


#: What the preference stage's curve keeps of each logged step.
_PREFERENCE_CURVE = ("step", "loss", "rewards/margins", "rewards/accuracies", "rewards/chosen", "rewards/rejected")


def _quietly(quiet: bool, make: Callable[[], Any]) -> Any:
    """``make()`` with the ``datasets`` progress bars off when ``quiet`` (trl tokenizes the pairs with them), then
    as they were."""
    from datasets.utils import logging as datasets_logging

    was = datasets_logging.is_progress_bar_enabled()
    if quiet:
        datasets_logging.disable_progress_bar()
    try:
        return make()
    finally:
        if was:
            datasets_logging.enable_progress_bar()


def train_preference(cfg: TuneConfig, output_dir: str | Path, *, lm: LoadedModel | None = None,
                     pairs: Sequence[PreferencePair] | None = None, progress: bool = True) -> PreferenceRun:
    """Train the adapter with trl's DPO on the pairs of ``cfg.data`` (files ``mirage tune pairs`` wrote) and save it to
    ``DIR/adapter`` (stage ``dpo``), the run's record to ``DIR/preference.json``; resumes from the newest checkpoint
    in ``DIR/checkpoints``. ``lm``: the base model already loaded (changed in place); default ``cfg.model``."""
    cfg, out = lora_stage(cfg, output_dir, lm, stage="preference stage")
    import transformers
    from trl import DPOConfig, DPOTrainer

    check_run_dir(out, cfg, "dpo")
    bad: list[str] = []
    if pairs is None:
        if not cfg.data:
            raise ConfigError("data: no pairs file given; build one with `mirage tune pairs ... -o FILE` and name it "
                              "in the config's data or with --data.")
        pairs, bad = read_pairs(cfg.data)
    if not pairs:
        raise InputError(f"no preference pair in {', '.join(map(str, cfg.data))}"
                         f"{' (' + str(len(bad)) + ' malformed rows)' if bad else ''}; every answer agreed with its "
                         "best-rewarded citation or cited nothing: build pairs from more questions.")
    if lm is None:
        lm = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype, use_chat_template=cfg.prompt.chat_template)
    if cfg.adapter:
        check_base(read_adapter_info(cfg.adapter), lm, cfg.adapter)
    dataset = preference_dataset(Mirage(lm, config=MirageConfig(prompt=cfg.prompt)), pairs,
                                 prompt_for=cfg.example_prompt)
    transformers.set_seed(cfg.train.seed)
    model = trainable_adapter(cfg, lm)
    args = DPOConfig(**trainer_arguments(cfg, out, lm, progress=progress), beta=cfg.preference.beta,
                     loss_type=[cfg.preference.loss], max_length=cfg.train.max_length)
    trainer = _quietly(not progress, lambda: DPOTrainer(model=model, args=args, train_dataset=dataset,
                                                       processing_class=lm.tokenizer))
    done = train_lora_stage(trainer, model, cfg, out, lm, stage="dpo", examples=[pair_example(p) for p in pairs],
                            record={"pairs": len(pairs)}, progress=progress)
    run = PreferenceRun(output_dir=str(out), adapter_dir=str(done.adapter_dir), start_adapter=cfg.adapter,
                        base_model=lm.name, n_pairs=len(pairs), questions=len({p.question for p in pairs}),
                        skipped=bad, steps=done.steps, curve=loss_curve(done.log_history, _PREFERENCE_CURVE),
                        runtime_s=done.runtime_s, peak_rss_mb=peak_rss_mb(), resumed_from=done.resumed_from,
                        config=cfg.to_dict(), versions=library_versions("trl", "peft"))
    write_atomic(out / PREFERENCE_RESULT_FILE, run.to_json(indent=1) + "\n")
    return run
