"""The reward stage of citation tuning (RAGE's second step): trl's ``GRPOTrainer`` samples answers, mirage judges
them (:class:`mirage.tune.reward.CitationJudge`), and the LoRA adapter is updated with a KL penalty (``beta``)
against the starting model.

    run = train_reward(TuneConfig.from_yaml("configs/tune/reward.yaml"), "out/reward")   # adapter: cfg.adapter (SFT)

Why GRPO rather than RAGE's PPO: PPO needs a learned value model beside the policy (a second network to train and
hold), while GRPO's baseline is the mean reward of the answers sampled for the same prompt; with a reward that costs
one attribution and a few forward passes per answer, GRPO spends the compute on answers rather than on a critic, and
trl keeps PPO only among its experimental trainers. The KL penalty against the starting model is kept (``beta``).

The starting point is the SFT adapter (``adapter``), trained further; the KL reference is a frozen copy of it (trl's
``ref`` adapter), and the judge a frozen copy of the SFT model, merged: mirage's attributions and the faithfulness
check run on the model the tuning started from. Without ``adapter`` a fresh LoRA adapter starts on the base model.
Each prompt is mirage's inference prompt: for a chat model, the user message mirage builds (trl applies the same chat
template), otherwise the plain prompt text.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.models import LoadedModel, load_model
from mirage.attribution.prompts import format_prompt, load_template
from mirage.attribution.serialization import JSONRecord, library_versions
from mirage.config import MirageConfig
from mirage.data.inputs import InputError
from mirage.pipeline import Mirage
from mirage.runs.store import write_atomic
from mirage.tune.adapters import apply_adapter, check_base, read_adapter_info, save_adapter
from mirage.tune.config import TuneConfig
from mirage.tune.data import TrainingExample
from mirage.tune.evaluate import judge_config
from mirage.tune.reward import CitationJudge
from mirage.tune.sft import (
    check_run_dir,
    last_checkpoint,
    lora_config,
    peak_rss_mb,
    read_training_data,
    require_training_libraries,
    trainer_arguments,
)

if TYPE_CHECKING:
    import datasets

RESULT_FILE = "reward.json"


def prompt_of(mirage: Mirage, example: TrainingExample) -> str | list[dict[str, str]]:
    """The example's prompt as trl takes it: the chat messages whose template rendering is mirage's prompt (chat
    models), or mirage's plain prompt text."""
    cfg = mirage.config
    prep = mirage.prepare(example.rag_item(with_output=False), index=example.id)
    if prep.prompt.truncated_docs:
        raise InputError(f"the prompt does not fit the model's window with {cfg.generation.max_new_tokens} tokens "
                         "for the answer; shorten its documents.", item=example.id, field="docs")
    if prep.prompt.add_special_tokens:  # no chat template
        return prep.prompt.text
    content = format_prompt(load_template(cfg.prompt), prep.item.question, prep.item.docs).text
    system = [{"role": "system", "content": cfg.prompt.system}] if cfg.prompt.system else []
    return [*system, {"role": "user", "content": content}]


def reward_dataset(mirage: Mirage, examples: Sequence[TrainingExample]) -> datasets.Dataset:
    """The prompts with the columns the judge reads: ``question``, ``docs``, ``supporting``."""
    import datasets as hf_datasets

    rows = [{"prompt": prompt_of(mirage, ex), "question": ex.question, "docs": ex.docs, "supporting": ex.supporting}
            for ex in examples]
    return hf_datasets.Dataset.from_list(rows)


@dataclass
class RewardRun(JSONRecord):
    """What a ``train_reward`` run did: the adapter it wrote and the one it started from, its steps, the logged
    curve (``reward``, ``reward_std``, ``kl``, ``loss`` per step), wall time, peak memory and the checkpoint it
    resumed from."""

    output_dir: str
    adapter_dir: str
    start_adapter: str | None
    base_model: str
    n_prompts: int
    skipped: list[str]
    steps: int
    curve: list[dict[str, float]]
    runtime_s: float
    peak_rss_mb: float
    resumed_from: str | None
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


def _curve(log_history: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    keys = ("step", "reward", "reward_std", "kl", "loss", "completions/mean_length")
    return [{k.split("/")[-1]: float(entry[k]) for k in keys if entry.get(k) is not None}
            for entry in log_history if "reward" in entry]


def train_reward(cfg: TuneConfig, output_dir: str | Path, *, lm: LoadedModel | None = None,
                 examples: Sequence[TrainingExample] | None = None, progress: bool = True) -> RewardRun:
    """Train the adapter with GRPO on mirage's reward (see the module docstring) and save it to ``DIR/adapter``
    (stage ``reward``), the run's record to ``DIR/reward.json``; resumes from the newest checkpoint in
    ``DIR/checkpoints``. ``lm``: the base model already loaded (changed in place); default ``cfg.model``."""
    require_training_libraries()
    import transformers
    from peft import PeftModel, get_peft_model
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    out = Path(output_dir)
    if lm is not None:
        cfg = cfg.replace(model=lm.name)
    check_run_dir(out, cfg, "reward")
    bad: list[str] = []
    if examples is None:
        examples, bad = read_training_data(cfg.data)
    if lm is None:
        lm = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype, use_chat_template=cfg.prompt.chat_template)
    reward = cfg.reward
    mirage_cfg = MirageConfig(prompt=cfg.prompt).replace(generation={"max_new_tokens": reward.max_completion_length})
    start = copy.deepcopy(lm)  # the judge: a frozen copy of the starting model
    if cfg.adapter:
        check_base(read_adapter_info(cfg.adapter), lm, cfg.adapter)
        start = apply_adapter(start, cfg.adapter, merge=True)
    judge = CitationJudge(Mirage(start, config=mirage_cfg), reward, config=judge_config(mirage_cfg, lm.name))
    dataset = reward_dataset(Mirage(lm, config=mirage_cfg), examples)
    transformers.set_seed(cfg.train.seed)
    if cfg.adapter:
        model = PeftModel.from_pretrained(lm.model, cfg.adapter, is_trainable=True)
    else:
        model = get_peft_model(lm.model, lora_config(cfg))
    args = GRPOConfig(**trainer_arguments(cfg, out, lm, progress=progress), beta=reward.beta,
                      num_generations=reward.num_generations, max_completion_length=reward.max_completion_length,
                      temperature=reward.temperature)
    trainer = GRPOTrainer(model=model, reward_funcs=judge, args=args, train_dataset=dataset,
                          processing_class=copy.deepcopy(lm.tokenizer))
    if not progress:
        trainer.remove_callback(PrinterCallback)
    resume = last_checkpoint(out / "checkpoints")
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    runtime = time.perf_counter() - t0
    model.eval()
    adapter_dir = out / "adapter"
    training = {**cfg.to_dict(), "prompts": len(dataset), "steps": trainer.state.global_step}
    save_adapter(model, adapter_dir, base_name=lm.name, prompt=cfg.prompt, stage="reward", training=training)
    run = RewardRun(output_dir=str(out), adapter_dir=str(adapter_dir), start_adapter=cfg.adapter, base_model=lm.name,
                    n_prompts=len(dataset), skipped=bad, steps=trainer.state.global_step,
                    curve=_curve(trainer.state.log_history), runtime_s=round(runtime, 2), peak_rss_mb=peak_rss_mb(),
                    resumed_from=resume, config=cfg.to_dict(), versions=library_versions())
    write_atomic(out / RESULT_FILE, json.dumps(run.to_dict(), indent=1) + "\n")
    return run
