"""Supervised fine-tuning for citations (RAGE's first step): a LoRA adapter learns to write the cited answers of a
training set, with trl's ``SFTTrainer`` and the loss on the answer only.

    run = train_sft(TuneConfig.from_yaml("configs/tune/sft.yaml"), "out/sft")   # the adapter in out/sft/adapter

Each example is rendered by mirage's own prompt builder (:meth:`mirage.pipeline.Mirage.prepare`, chat template
applied as mirage applies it), so the model learns on the very prompt it is asked with at inference; the answer
follows as mirage force-decodes one (:func:`mirage.attribution.tokenization.tokenize_answer`), then the end-of-turn
token. Examples longer than ``train.max_length`` tokens are left out and listed, never cut. Checkpoints go to
``DIR/checkpoints``; running again with the same ``-o`` resumes from the newest complete one (one a stopped run
left half-saved is passed over, :func:`last_checkpoint`), and refuses other settings.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.citations import mark_spans
from mirage.attribution.models import LoadedModel, load_model
from mirage.attribution.prompts import load_template
from mirage.attribution.serialization import JSONRecord, library_versions
from mirage.attribution.tokenization import tokenize_answer
from mirage.config import ConfigError, MirageConfig, PromptConfig
from mirage.data.fetch import data_label
from mirage.data.inputs import InputError
from mirage.pipeline import Mirage
from mirage.runs.files import read_json
from mirage.runs.store import write_atomic
from mirage.tune.adapters import (
    ADAPTER_INFO,
    AdapterError,
    base_record,
    read_adapter_info,
    save_adapter,
    save_tuned_model,
    training_record,
)
from mirage.tune.config import TuneConfig
from mirage.tune.data import TrainingExample, read_examples, trained_questions

if TYPE_CHECKING:
    import datasets

__all__ = ["RUN_FILE", "SFTRun", "StageTraining", "TrainingRun", "build_dataset", "check_run_dir", "checkpoint_adapter",
           "complete_checkpoint", "earlier_questions", "encode_example", "last_checkpoint", "lora_config", "lora_stage",
           "loss_curve", "peak_rss_mb", "read_training_data", "require_training_libraries", "train_lora_stage",
           "train_sft", "trainable_adapter", "trainer_arguments"]

RUN_FILE = "run.json"
#: Where a full fine-tuning run (``train.method: full``) saves its model, beside the adapter folder a LoRA run saves.
TUNED_MODEL_DIR = "model"
SFT_RESULT_FILE = "sft.json"


@dataclass(frozen=True)
class EncodedExample:
    """An example as token ids: the inference prompt, then the answer with its end-of-turn token; ``loss_mask``:
    1 on the answer tokens the loss is computed on (None: all of them)."""

    id: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    loss_mask: tuple[int, ...] | None = None

    @property
    def input_ids(self) -> list[int]:
        return [*self.prompt_ids, *self.completion_ids]

    @property
    def completion_mask(self) -> list[int]:
        """1 on the tokens the loss is computed on (the answer and its end-of-turn token, or ``loss_mask``'s)."""
        answer = list(self.loss_mask) if self.loss_mask is not None else [1] * len(self.completion_ids)
        return [0] * len(self.prompt_ids) + answer


def citation_token_mask(offsets: Sequence[tuple[int, int]], text: str) -> tuple[int, ...] | None:
    """1 on the answer tokens that overlap a citation mark of ``text`` (``[3]``, ``[1][2]``), by their character
    ``offsets``; None when the answer has no mark (its lesson, citing nothing, is in every token)."""
    spans = mark_spans(text)
    if not spans:
        return None
    return tuple(int(any(start < end_mark and end > start_mark for start_mark, end_mark in spans))
                 for start, end in offsets)


def with_citation_ends(mask: Sequence[int]) -> tuple[int, ...]:
    """``mask`` (over an answer's tokens and its end of turn) with the token after each run of mark tokens set too:
    the token that closes a citation (the stop, the next words, the end of turn) is where the model learns that
    no further mark follows."""
    return tuple(int(bool(m or (i > 0 and mask[i - 1]))) for i, m in enumerate(mask))


def end_of_turn_id(lm: LoadedModel) -> int:
    """The token that ends an answer: the tokenizer's end-of-sequence token (a chat model's end of turn,
    ``<|im_end|>`` for SmolLM2), else the model config's."""
    eos = lm.tokenizer.eos_token_id
    if eos is None:
        eos = getattr(lm.model.config, "eos_token_id", None)
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    if eos is None:
        raise ConfigError(f"model {lm.name!r} has no end-of-sequence token, so an answer cannot be taught to end; "
                          "use a model whose tokenizer or config defines eos_token_id.")
    return int(eos)


def encode_example(mirage: Mirage, example: TrainingExample, *, config: MirageConfig | None = None,
                   loss_on: str = "answer") -> EncodedExample:
    """The example's prompt ids as :meth:`Mirage.prepare` builds them for inference (room kept for the answer, as
    mirage keeps it when it force-decodes one) and its answer's ids, end-of-turn token appended; ``loss_on``
    (``train.loss_on``): ``citations`` puts the loss on the citation marks' tokens and the token that closes each
    run of marks, ``marks`` on the marks' tokens only (the first rule, kept for the runs trained with it)."""
    answer = tokenize_answer(mirage.lm.tokenizer, example.output)
    prep = mirage.prepare(example.rag_item(), config=config, index=example.id, reserve_tokens=len(answer.ids) + 1)
    mask = citation_token_mask(answer.offsets, example.output) if loss_on != "answer" else None
    if mask is not None:  # the end of turn is off, unless citations sets it as the token closing the last mark
        mask = with_citation_ends((*mask, 0)) if loss_on == "citations" else (*mask, 0)
    return EncodedExample(id=example.id, prompt_ids=tuple(prep.tokens.ids),
                          completion_ids=(*answer.ids, end_of_turn_id(mirage.lm)), loss_mask=mask)


def build_dataset(mirage: Mirage, examples: Sequence[TrainingExample], *, max_length: int,
                  config: MirageConfig | None = None, loss_on: str = "answer",
                  prompt_for: Callable[[str], PromptConfig] | None = None) -> tuple[datasets.Dataset, list[str]]:
    """A ``datasets.Dataset`` of ``input_ids`` and ``completion_mask`` (trl's tokenized format), and the examples
    left out because prompt and answer exceed ``max_length`` tokens (``FILE:LINE (id): N tokens``, FILE as
    :func:`~mirage.data.fetch.data_label` names it: a dataset's name, never this machine's cache folder);
    ``loss_on`` as :func:`encode_example` takes it; ``prompt_for``: each example's prompt from its id
    (:meth:`~mirage.tune.config.TuneConfig.example_prompt`; default: ``config``'s, or the model's)."""
    import datasets as hf_datasets

    base = config or mirage.config
    rows, too_long = [], []
    for example in examples:
        own = base if prompt_for is None else dataclasses.replace(base, prompt=prompt_for(example.id))
        encoded = encode_example(mirage, example, config=own, loss_on=loss_on)
        n = len(encoded.prompt_ids) + len(encoded.completion_ids)
        if n > max_length:
            too_long.append(f"{data_label(example.file) if example.file else example.file}:{example.line} "
                            f"({example.id}): {n} tokens > train.max_length {max_length}")
            continue
        rows.append({"input_ids": encoded.input_ids, "completion_mask": encoded.completion_mask})
    return hf_datasets.Dataset.from_list(rows), too_long


@dataclass(kw_only=True)
class TrainingRun(JSONRecord):
    """What every training stage's run records: its folder, where the adapter is (``adapter_dir``; with
    ``train.method: full``, the model folder ``DIR/model``), the model it tuned, the rows it skipped, its steps, the
    wall time of this invocation, its peak resident memory, the checkpoint it resumed from, its config and the
    library versions."""

    output_dir: str
    adapter_dir: str
    base_model: str
    skipped: list[str]
    steps: int
    runtime_s: float
    peak_rss_mb: float
    resumed_from: str | None
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class SFTRun(TrainingRun):
    """What a ``train_sft`` run did (:class:`TrainingRun`, and): the examples it used (``skipped``: malformed rows;
    ``too_long``: over ``max_length``), its epochs and its loss curve (``{"step", "epoch", "loss",
    "learning_rate"}`` per log)."""

    n_examples: int
    n_train: int
    too_long: list[str]
    epochs: float
    train_loss: float | None
    loss_curve: list[dict[str, float]]


def read_training_data(paths: Sequence[str | Path]) -> tuple[list[TrainingExample], list[str]]:
    """The examples of every training file and their malformed rows (``FILE:LINE: reason``, skipped)."""
    if not paths:
        raise ConfigError("data: no training file given; build one with `mirage tune data gold ... -o FILE` and "
                          "name it in the config's data or with --data.")
    examples, bad = [], []
    for path in paths:
        found, skipped = read_examples(path)
        examples += found
        bad += [str(b) for b in skipped]
    if not examples:
        raise InputError(f"no usable training example in {', '.join(map(str, paths))}"
                         f"{' (' + str(len(bad)) + ' malformed rows)' if bad else ''}.")
    return examples, bad


def require_training_libraries() -> None:
    """ConfigError naming the fix when trl or peft is not installed."""
    import importlib.util

    missing = [name for name in ("trl", "peft") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"mirage tune trains with {' and '.join(missing)}, which is not installed: "
                          "pip install 'mirage-rag[tune]' (or pip install trl peft).")


#: Fields added to a tune config after runs were recorded without them, and the value that gives the behaviour of
#: those runs (a run resumes under it): before the permutation term existed, the reward had none; before full
#: fine-tuning existed, every run trained a LoRA adapter; before loss_on existed, the loss was on the whole answer.
_ADDED_TUNE_FIELDS = {("reward", "permutation"): 0.0, ("train", "method"): "lora", ("train", "loss_on"): "answer"}


#: Per stage, the config sections it never reads, so a run folder's settings do not depend on them.
_UNREAD_SECTIONS = {"sft": ("reward", "preference"), "reward": ("preference",), "dpo": ("reward",)}


def _run_settings(config: dict[str, Any], stage: str) -> dict[str, Any]:
    """What a run's checkpoints depend on: the config without its device and without the sections the stage never
    reads (:data:`_UNREAD_SECTIONS`); fields recorded before they existed get their old behaviour
    (:data:`_ADDED_TUNE_FIELDS`)."""
    unread = _UNREAD_SECTIONS.get(stage, ())
    config = {k: v for k, v in config.items() if k != "device" and k not in unread}
    for (section, name), old in _ADDED_TUNE_FIELDS.items():
        if isinstance(config.get(section), dict) and name not in config[section]:
            config[section] = {**config[section], name: old}
    return {"stage": stage, "config": config}


def check_run_dir(output_dir: Path, cfg: TuneConfig, stage: str) -> None:
    """Record the run's settings in ``DIR/run.json``, or refuse when the folder holds a run of other settings (its
    checkpoints would be resumed under the wrong ones). A template ``also_prompts`` names that does not exist is
    refused here, before any model loads."""
    for name in cfg.also_prompts:
        load_template(PromptConfig(name=name), name_field="tune.also_prompts")
    settings = _run_settings(cfg.to_dict(), stage)
    path = output_dir / RUN_FILE
    if path.exists():
        raw = read_json(path, fix="give another -o, or delete the folder to start over.")
        stored = _run_settings(raw.get("config", {}), raw.get("stage"))
        if stored != settings:
            changed = sorted(k for k in set(stored.get("config", {})) | set(settings["config"])
                             if stored.get("config", {}).get(k) != settings["config"].get(k))
            raise ConfigError(f"{output_dir} holds a {stored.get('stage')} run with other settings (differing: "
                              f"{', '.join(changed) or 'stage'}); give another -o, or the same settings to resume.")
        return
    write_atomic(path, json.dumps(settings, indent=1) + "\n")


def complete_checkpoint(checkpoint: Path) -> bool:
    """Whether a trainer's ``checkpoint-N`` folder was saved whole: the trainer writes its ``trainer_state.json``
    last, so a run stopped while saving leaves none, or one cut short."""
    try:
        state = read_json(checkpoint / "trainer_state.json")
    except (OSError, ValueError):
        return False
    return isinstance(state, dict) and "global_step" in state


def last_checkpoint(folder: Path) -> str | None:
    """The newest complete ``checkpoint-N`` folder under ``folder`` (:func:`complete_checkpoint`), or None. Newer
    ones left incomplete (the run was stopped while saving one) are passed over, said on stderr, and left as they
    are: the trainer saves that step into its folder again."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    if not folder.is_dir():
        return None
    steps = {}
    for path in folder.iterdir():  # one folder's entries: the trainer's checkpoints, a few
        step = path.name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-")
        if step.isascii() and step.isdigit() and path.is_dir():
            steps[int(step)] = path
    newest = next((step for step in sorted(steps, reverse=True) if complete_checkpoint(steps[step])), None)
    skipped = [str(steps[step]) for step in sorted(steps) if newest is None or step > newest]
    if skipped:
        logging.getLogger(__name__).warning(
            "mirage: skipping incomplete checkpoint %s (no readable trainer_state.json: the run was stopped while "
            "saving it); %s.", ", ".join(skipped),
            f"resuming from {steps[newest].name}" if newest is not None else "training starts from step 0")
    return None if newest is None else str(steps[newest])


def checkpoint_adapter(checkpoint: str | Path, dest: str | Path, *, lm: LoadedModel | None = None) -> Path:
    """A mirage adapter folder at ``dest`` from a training checkpoint (``DIR/checkpoints/checkpoint-N`` of ``mirage
    tune sft`` or ``reward``): step N's LoRA weights with the run's base model, prompt and stage recorded, as the
    finished run's ``DIR/adapter`` has them; so a long run stopped partway can be evaluated and loaded like a
    finished one (and resumed later). ``lm``: the base model already loaded; default the run's ``model``, loaded
    to fingerprint it. AdapterError when the folder is not a checkpoint of a mirage tune run."""
    from peft import PeftModel

    checkpoint = Path(checkpoint)
    run_dir = checkpoint.parent.parent
    state, record = checkpoint / "trainer_state.json", run_dir / RUN_FILE
    weights = (checkpoint / "adapter_config.json").is_file() or (checkpoint / "config.json").is_file()
    if not complete_checkpoint(checkpoint) or not record.is_file() or not weights:
        raise AdapterError(f"{checkpoint} is not a checkpoint of a mirage tune run (DIR/checkpoints/checkpoint-N "
                           f"with a readable trainer_state.json and its adapter, and DIR/{RUN_FILE}); a checkpoint a "
                           "stopped run left half-saved is not one: take an earlier one.")
    stored = read_json(record)
    cfg = TuneConfig.from_dict(stored["config"])
    if cfg.train.method == "full":
        raise AdapterError(f"{checkpoint} is a checkpoint of a full fine-tuning run: a model folder already, which "
                           "--model (and load_model) take by path; there is no adapter to export.")
    step = int(read_json(state)["global_step"])
    if lm is None:
        lm = load_model(cfg.model, dtype=cfg.dtype, use_chat_template=cfg.prompt.chat_template)
    model = PeftModel.from_pretrained(lm.model, str(checkpoint))
    training = {**cfg.to_dict(), "steps": step, "checkpoint": checkpoint.name}
    try:  # the questions it saw, where the run's data files can still be read from here
        training["questions"] = trained_questions(read_training_data(cfg.data)[0], earlier_questions(cfg))
    except (ConfigError, InputError, OSError, AdapterError):
        pass
    save_adapter(model, dest, base_name=lm.name, prompt=cfg.prompt, stage=stored["stage"], training=training)
    return Path(dest)


def earlier_questions(cfg: TuneConfig) -> list[str]:
    """The questions what a run starts from was trained on, as mirage recorded them: the adapter's
    (``cfg.adapter``) and, when ``cfg.model`` is a model folder mirage fine-tuned (``train.method: full``), the
    model's. A model trained further, or an adapter trained on top of it, keeps them all, so an evaluation never
    judges it on a question any of its stages saw."""
    questions = list(read_adapter_info(cfg.adapter).training.get("questions", [])) if cfg.adapter else []
    record = training_record(cfg.model) if cfg.model else None
    return questions + list((record or {}).get("questions") or [])


def finished_run(output_dir: Path, resume: str | None) -> SFTRun | None:
    """The record of a run that finished in ``output_dir`` (its adapter saved after the step of ``resume``, the
    newest complete checkpoint), or None. Resuming a finished run trains no further (the trainer would take one
    more step)."""
    record = output_dir / SFT_RESULT_FILE
    saved = ((output_dir / "adapter" / "adapter_config.json").is_file()
             or (output_dir / TUNED_MODEL_DIR / ADAPTER_INFO).is_file())
    if not record.is_file() or resume is None or not saved:
        return None
    run = SFTRun.from_dict(read_json(record))
    state = read_json(Path(resume) / "trainer_state.json")
    if state.get("global_step") != run.steps:
        return None
    run.resumed_from, run.runtime_s = resume, 0.0
    return run


def lora_config(cfg: TuneConfig) -> Any:
    """peft's ``LoraConfig`` of the config's ``lora`` section, for a causal language model."""
    from peft import LoraConfig

    modules = cfg.lora.target_modules
    return LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=modules if isinstance(modules, str) else list(modules), task_type="CAUSAL_LM")


def lora_stage(cfg: TuneConfig, output_dir: str | Path, lm: LoadedModel | None, *, stage: str
               ) -> tuple[TuneConfig, Path]:
    """The start of a stage that trains a LoRA adapter further (the reward and the preference stage): the training
    libraries checked, ``cfg`` on ``lm``'s model when one is given, ``train.method`` lora (a ConfigError naming
    ``stage`` otherwise); the config and the run folder."""
    require_training_libraries()
    if lm is not None:
        cfg = cfg.replace(model=lm.name)
    if cfg.train.method != "lora":
        raise ConfigError(f"train.method: the {stage} trains a LoRA adapter (method lora); to start it from a "
                          "fully fine-tuned model, give that model's folder as model (DIR/model).")
    return cfg, Path(output_dir)


def trainable_adapter(cfg: TuneConfig, lm: LoadedModel) -> Any:
    """The peft model a LoRA stage trains: ``cfg.adapter`` loaded trainable on ``lm``'s model, or a fresh adapter
    of the config's ``lora`` section."""
    from peft import PeftModel, get_peft_model

    if cfg.adapter:
        return PeftModel.from_pretrained(lm.model, cfg.adapter, is_trainable=True)
    return get_peft_model(lm.model, lora_config(cfg))


@dataclass(frozen=True)
class StageTraining:
    """What :func:`train_lora_stage` did: the adapter's folder, the steps, the wall time of this invocation, the
    checkpoint it resumed from and the trainer's log."""

    adapter_dir: Path
    steps: int
    runtime_s: float
    resumed_from: str | None
    log_history: list[dict[str, Any]]


def train_lora_stage(trainer: Any, model: Any, cfg: TuneConfig, out: Path, lm: LoadedModel, *, stage: str,
                     examples: Sequence[TrainingExample], record: Mapping[str, Any], progress: bool) -> StageTraining:
    """Train a LoRA stage's ``trainer`` (resumed from the newest checkpoint in ``out/checkpoints``) and save
    ``model``'s adapter to ``out/adapter`` (stage ``stage``), recording the config, ``record``, the steps and the
    questions of ``examples`` with those the start was trained on (:func:`earlier_questions`)."""
    from transformers.trainer_callback import PrinterCallback

    if not progress:
        trainer.remove_callback(PrinterCallback)
    resume = last_checkpoint(out / "checkpoints")
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    runtime = time.perf_counter() - t0
    model.eval()
    adapter_dir = out / "adapter"
    training = {**cfg.to_dict(), **record, "steps": trainer.state.global_step,
                "questions": trained_questions(examples, earlier_questions(cfg))}
    save_adapter(model, adapter_dir, base_name=lm.name, prompt=cfg.prompt, stage=stage, training=training)
    return StageTraining(adapter_dir=adapter_dir, steps=trainer.state.global_step, runtime_s=round(runtime, 2),
                         resumed_from=resume, log_history=list(trainer.state.log_history))


def trainer_arguments(cfg: TuneConfig, output_dir: Path, lm: LoadedModel, *, progress: bool) -> dict[str, Any]:
    """The ``transformers``/``trl`` training arguments both stages share."""
    import torch

    train = cfg.train
    return {"output_dir": str(output_dir / "checkpoints"), "num_train_epochs": train.epochs,
            "max_steps": train.max_steps or -1, "learning_rate": train.learning_rate,
            "per_device_train_batch_size": train.batch_size,
            "gradient_accumulation_steps": train.gradient_accumulation_steps, "seed": train.seed,
            "data_seed": train.seed, "logging_steps": train.logging_steps, "save_strategy": "steps",
            "save_steps": train.save_steps, "save_total_limit": train.save_total_limit,
            "warmup_steps": train.warmup_ratio, "weight_decay": train.weight_decay,
            "lr_scheduler_type": train.lr_scheduler, "report_to": "none", "disable_tqdm": not progress,
            "use_cpu": lm.device.type == "cpu", "bf16": lm.dtype == torch.bfloat16, "fp16": lm.dtype == torch.float16,
            "dataloader_pin_memory": lm.device.type == "cuda", "dataloader_num_workers": 0}


def loss_curve(log_history: Sequence[dict[str, Any]],
               keys: Sequence[str] = ("step", "epoch", "loss", "learning_rate", "grad_norm"), *,
               marker: str = "loss") -> list[dict[str, float]]:
    """The entries of a trainer's ``state.log_history`` that log ``marker`` (the SFT loss; the reward stage's reward),
    each with its ``keys`` that are there, named by their last ``/`` part (``rewards/margins``: ``margins``)."""
    return [{k.split("/")[-1]: float(entry[k]) for k in keys if entry.get(k) is not None}
            for entry in log_history if marker in entry]


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (``ru_maxrss``: KB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def train_sft(cfg: TuneConfig, output_dir: str | Path, *, lm: LoadedModel | None = None,
              examples: Sequence[TrainingExample] | None = None, progress: bool = True) -> SFTRun:
    """Fine-tune a LoRA adapter on the cited answers of ``cfg.data`` (or ``examples``) and save it to
    ``DIR/adapter`` (:func:`mirage.tune.adapters.save_adapter`), the run's record to ``DIR/sft.json``. With
    ``train.method: full`` every weight is trained instead and the model saved to ``DIR/model``
    (:func:`mirage.tune.adapters.save_tuned_model`: ``load_model``, ``--model`` and ``tune eval`` take that path).

    ``lm``: a model already loaded (its modules get the adapter injected, or with ``full`` its weights trained, in
    place); by default ``cfg.model`` is
    loaded on ``cfg.device`` in ``cfg.dtype`` (fp32 on a CPU). Resumes from the newest complete checkpoint in
    ``DIR/checkpoints``. ``progress``: the trainer's progress bar.
    """
    require_training_libraries()
    import transformers
    from peft import get_peft_model
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    out = Path(output_dir)
    if lm is not None:
        cfg = cfg.replace(model=lm.name)  # what is recorded is the model trained
    check_run_dir(out, cfg, "sft")
    resume = last_checkpoint(out / "checkpoints")
    finished = finished_run(out, resume)
    if finished is not None:
        return finished
    bad: list[str] = []
    if examples is None:
        examples, bad = read_training_data(cfg.data)
    if lm is None:
        lm = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype, use_chat_template=cfg.prompt.chat_template)
    mirage = Mirage(lm, config=MirageConfig(prompt=cfg.prompt))
    dataset, too_long = build_dataset(mirage, examples, max_length=cfg.train.max_length, loss_on=cfg.train.loss_on,
                                      prompt_for=cfg.example_prompt)
    if len(dataset) == 0:
        raise InputError(f"every training example is longer than train.max_length={cfg.train.max_length} tokens; "
                         "raise it.")
    transformers.set_seed(cfg.train.seed)  # the adapter's initial weights too
    full = cfg.train.method == "full"
    if full:  # every weight trained, in place: the base model's record is taken before
        base = base_record(lm.model, lm.name)
        model = lm.model
        model.requires_grad_(True)
    else:
        model = get_peft_model(lm.model, lora_config(cfg))
    args = SFTConfig(**trainer_arguments(cfg, out, lm, progress=progress), max_length=cfg.train.max_length,
                     completion_only_loss=True, packing=False)
    # trl sets the tokenizer's pad token when it has none: give it a copy, never the caller's
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=copy.deepcopy(lm.tokenizer))
    if not progress:
        trainer.remove_callback(PrinterCallback)  # it prints each log line when there is no bar
    t0 = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=resume)
    runtime = time.perf_counter() - t0
    model.eval()
    training = {**cfg.to_dict(), "examples": len(dataset), "steps": trainer.state.global_step,
                "questions": trained_questions(examples, earlier_questions(cfg))}
    if full:
        model.requires_grad_(False)
        adapter_dir = out / TUNED_MODEL_DIR
        save_tuned_model(lm, adapter_dir, base=base, prompt=cfg.prompt, stage="sft", training=training)
    else:
        adapter_dir = out / "adapter"
        save_adapter(model, adapter_dir, base_name=lm.name, prompt=cfg.prompt, stage="sft", training=training)
    run = SFTRun(output_dir=str(out), adapter_dir=str(adapter_dir), base_model=lm.name, n_examples=len(examples),
                 n_train=len(dataset), skipped=bad, too_long=too_long, steps=trainer.state.global_step,
                 epochs=float(trainer.state.epoch or 0.0), train_loss=result.training_loss,
                 loss_curve=loss_curve(trainer.state.log_history), runtime_s=round(runtime, 2),
                 peak_rss_mb=peak_rss_mb(), resumed_from=resume, config=cfg.to_dict(),
                 versions=library_versions("trl", "peft"))
    write_atomic(out / SFT_RESULT_FILE, run.to_json(indent=1) + "\n")
    return run
