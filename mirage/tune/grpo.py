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

The reward's permutation term compares the answers to one question presented in other document orders, so those
presentations must be judged in the same call: where the data has them (``mirage tune data --spread-positions K``),
the rows go in question order, unshuffled, and each generation batch holds whole questions
(:func:`permutation_batching`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import random
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.models import LoadedModel, load_model
from mirage.attribution.prompts import format_prompt, load_template
from mirage.attribution.serialization import library_versions
from mirage.config import ConfigError, MirageConfig, PromptConfig
from mirage.data.inputs import InputError
from mirage.pipeline import Mirage
from mirage.runs.store import write_atomic
from mirage.tune.adapters import apply_adapter, check_base, read_adapter_info
from mirage.tune.config import RewardSettings, TuneConfig
from mirage.tune.data import TrainingExample
from mirage.tune.evaluate import judge_config
from mirage.tune.reward import CitationJudge, presentation_of, question_key
from mirage.tune.sft import (
    TrainingRun,
    check_run_dir,
    lora_stage,
    loss_curve,
    peak_rss_mb,
    read_training_data,
    train_lora_stage,
    trainable_adapter,
    trainer_arguments,
)

if TYPE_CHECKING:
    import datasets

__all__ = ["RewardRun", "permutation_batching", "presentation_groups", "prompt_of", "reward_dataset", "train_reward"]

REWARD_RESULT_FILE = "reward.json"


def prompt_of(mirage: Mirage, example: TrainingExample,
              prompt: PromptConfig | None = None) -> str | list[dict[str, str]]:
    """The example's prompt as trl takes it: the chat messages whose template rendering is mirage's prompt (chat
    models), or mirage's plain prompt text; ``prompt``: another prompt section than mirage's config has."""
    cfg = mirage.config if prompt is None else dataclasses.replace(mirage.config, prompt=prompt)
    prep = mirage.prepare(example.rag_item(with_output=False), config=cfg, index=example.id)
    if prep.prompt.truncated_docs:
        raise InputError(f"the prompt does not fit the model's window with {cfg.generation.max_new_tokens} tokens "
                         "for the answer; shorten its documents.", item=example.id, field="docs")
    if prep.prompt.add_special_tokens:  # no chat template
        return prep.prompt.text
    content = format_prompt(load_template(cfg.prompt), prep.item.question, prep.item.docs).text
    system = [{"role": "system", "content": cfg.prompt.system}] if cfg.prompt.system else []
    return [*system, {"role": "user", "content": content}]


def presentation_groups(examples: Sequence[TrainingExample], *, seed: int = 0) -> list[list[int]]:
    """The examples' indices grouped by question and documents (whatever their order: the presentations
    :func:`mirage.tune.data.spread_positions` and :func:`~mirage.tune.data.shuffle_documents` make of one item), the
    groups in a seeded shuffled order, each group's members in file order."""
    groups: dict[tuple[str, frozenset[str]], list[int]] = {}
    for i, ex in enumerate(examples):
        groups.setdefault(question_key(presentation_of(ex.question, ex.docs)), []).append(i)
    out = list(groups.values())
    random.Random(seed).shuffle(out)
    return out


def permutation_batching(groups: Sequence[Sequence[int]], settings: RewardSettings, per_step: int
                         ) -> tuple[list[int] | None, int | None]:
    """How to feed the data so the permutation term has something to compare: the rows in group order and a
    generation batch of whole groups (the most common group size ``g``: ``lcm(g * num_generations, per_step)``
    answers, ``per_step`` the global batch size), or ``(None, None)`` (trl's shuffled order and batch) where the
    term is weighted 0 or no question is presented in more than one order."""
    sizes = Counter(len(g) for g in groups)
    g = max(sizes, key=lambda n: (sizes[n], n)) if sizes else 1
    if settings.permutation <= 0 or g < 2:
        return None, None
    return [i for group in groups for i in group], math.lcm(g * settings.num_generations, per_step)


def reward_dataset(mirage: Mirage, examples: Sequence[TrainingExample],
                   prompt_for: Callable[[str], PromptConfig] | None = None) -> datasets.Dataset:
    """The prompts with the columns the judge reads: ``question``, ``docs``, ``supporting``; ``prompt_for``: each
    example's prompt from its id (:meth:`~mirage.tune.config.TuneConfig.example_prompt`; default: mirage's)."""
    import datasets as hf_datasets

    rows = [{"prompt": prompt_of(mirage, ex, prompt_for(ex.id) if prompt_for else None), "question": ex.question,
             "docs": ex.docs, "supporting": ex.supporting} for ex in examples]
    return hf_datasets.Dataset.from_list(rows)


@dataclass(kw_only=True)
class RewardRun(TrainingRun):
    """What a ``train_reward`` run did (:class:`~mirage.tune.sft.TrainingRun`, and): the adapter it started from, its
    prompts, the logged curve per step (``reward``; ``reward_std``, the spread of the rewards, and
    ``frac_reward_zero_std``, the share of prompts whose answers all got the same reward and so teach nothing;
    ``kl``, ``loss``); ``questions``: the distinct questions among the prompts (each presented in one or more document
    orders), ``generation_batch_size``: the answers sampled and judged together (whole questions' presentations when
    the permutation term applies)."""

    start_adapter: str | None
    n_prompts: int
    curve: list[dict[str, float]]
    questions: int | None = None
    generation_batch_size: int | None = None


#: What the reward stage's curve keeps of each logged step.
_REWARD_CURVE = ("step", "reward", "reward_std", "frac_reward_zero_std", "kl", "loss", "completions/mean_length")


def train_reward(cfg: TuneConfig, output_dir: str | Path, *, lm: LoadedModel | None = None,
                 examples: Sequence[TrainingExample] | None = None, progress: bool = True) -> RewardRun:
    """Train the adapter with GRPO on mirage's reward (see the module docstring) and save it to ``DIR/adapter``
    (stage ``reward``), the run's record to ``DIR/reward.json``; resumes from the newest checkpoint in
    ``DIR/checkpoints``. ``lm``: the base model already loaded (changed in place); default ``cfg.model``."""
    cfg, out = lora_stage(cfg, output_dir, lm, stage="reward stage")
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    if cfg.train.loss_on != "answer":
        raise ConfigError("train.loss_on: the reward stage's loss is on the sampled answers (answer); loss_on "
                          f"{cfg.train.loss_on} is for the SFT stage.")
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
    world = int(os.environ.get("WORLD_SIZE", "1"))
    groups = presentation_groups(examples, seed=cfg.train.seed)
    order, generation_batch = permutation_batching(groups, reward, cfg.train.batch_size * world)
    if reward.permutation > 0 and order is None:
        warnings.warn("reward.permutation: no question of the data is presented in more than one document order "
                      "(build it with mirage tune data --spread-positions K), so the term never applies.",
                      stacklevel=2)
    dataset = reward_dataset(Mirage(lm, config=mirage_cfg), examples if order is None else
                             [examples[i] for i in order], prompt_for=cfg.example_prompt)
    transformers.set_seed(cfg.train.seed)
    model = trainable_adapter(cfg, lm)
    batching: dict[str, Any] = {} if order is None else {"shuffle_dataset": False,
                                                         "generation_batch_size": generation_batch}
    args = GRPOConfig(**trainer_arguments(cfg, out, lm, progress=progress), beta=reward.beta,
                      num_generations=reward.num_generations, max_completion_length=reward.max_completion_length,
                      temperature=reward.temperature, **batching)
    # trl's RewardFunc wants Callable[..., list[float | None]]: a list is invariant, so no list[float] reward fits
    trainer = GRPOTrainer(model=model, reward_funcs=judge, args=args,  # type: ignore[arg-type]
                          train_dataset=dataset, processing_class=copy.deepcopy(lm.tokenizer))
    done = train_lora_stage(trainer, model, cfg, out, lm, stage="reward", examples=examples,
                            record={"prompts": len(dataset)}, progress=progress)
    run = RewardRun(output_dir=str(out), adapter_dir=str(done.adapter_dir), start_adapter=cfg.adapter,
                    base_model=lm.name, n_prompts=len(dataset), skipped=bad, steps=done.steps,
                    questions=len(groups), generation_batch_size=args.generation_batch_size,
                    curve=loss_curve(done.log_history, _REWARD_CURVE, marker="reward"), runtime_s=done.runtime_s,
                    peak_rss_mb=peak_rss_mb(), resumed_from=done.resumed_from, config=cfg.to_dict(),
                    versions=library_versions("trl", "peft"))
    write_atomic(out / REWARD_RESULT_FILE, json.dumps(run.to_dict(), indent=1) + "\n")
    return run
