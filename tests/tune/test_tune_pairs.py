"""SelfCite preference pairs (`mirage tune pairs`, mirage/tune/pairs.py) on the embedded model and the repository's
XOR-AttriQA val slice, and the preference stage (`mirage tune dpo`, mirage/tune/dpo.py) on the tiny seeded model (a
DPO step of the embedded model is too slow for the suite; the tiny one runs the same trainer and adapter code)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mirage.attribution.citations import parse_answer
from mirage.config import ConfigError
from mirage.tune.config import TuneConfig
from mirage.tune.data import xor_examples
from mirage.tune.follow import permutation_presentations
from mirage.tune.pairs import OUTCOMES, PreferencePair, answer_pair, read_pairs, write_pairs

ROOT = Path(__file__).resolve().parents[2]
VAL = ROOT / "tests" / "data" / "xor_attriqa_match" / "val.jsonl"  # a slice of XOR-AttriQA val (tests/data/README.md)


@pytest.fixture(scope="module")
def presentation():
    examples, _bad, _ = xor_examples(VAL, for_evaluation=True)
    return permutation_presentations(examples, k=3, seed=0)[0]


def test_a_pair_cites_the_best_rewarded_set_of_the_answers_own_size(embedded_mirage, presentation):
    """The chosen side is the best same-size set by SelfCite's reward, computed independently here with
    best_citation; the two sides are the same text with marks differing, and as many documents."""
    from mirage.attribution.methods import document_inputs
    from mirage.attribution.methods.selfcite import best_citation, candidate_sets
    from mirage.attribution.tokenization import tokenize_answer

    ex = presentation
    text = parse_answer(ex.output, len(ex.docs)).text
    tokens = tokenize_answer(embedded_mirage.lm.tokenizer, text).ids
    inputs = document_inputs(embedded_mirage, ex.rag_item(with_output=False), tokens, config=embedded_mirage.config)
    singles = best_citation(inputs, candidates=[s for s in candidate_sets(len(ex.docs), 1)])
    worst = singles.sets[-1]
    pair, outcome = answer_pair(embedded_mirage, ex, f"{text} [{worst[0]}]")
    assert outcome == "pair" and pair is not None
    assert pair.chosen_set == list(singles.best) and pair.rejected_set == list(worst)
    assert pair.chosen_reward == pytest.approx(singles.rewards[0], abs=1e-5)
    assert pair.rejected_reward == pytest.approx(singles.rewards[-1], abs=1e-5)
    assert pair.rejected_reward < pair.chosen_reward
    chosen, rejected = parse_answer(pair.chosen, len(ex.docs)), parse_answer(pair.rejected, len(ex.docs))
    assert chosen.text == rejected.text == text
    assert [list(c) for c in chosen.citations] == [list(singles.best)] * len(chosen.sentences)
    assert pair.supporting == ex.supporting and pair.meta["follow"]["position"] == 1
    # the answer that already cites the best set, one citing nothing, too many, or nothing at all: no pair
    assert answer_pair(embedded_mirage, ex, f"{text} [{singles.best[0]}]") == (None, "agrees")
    assert answer_pair(embedded_mirage, ex, text) == (None, "uncited")
    assert answer_pair(embedded_mirage, ex, f"{text} [1][2][3]") == (None, "too_many")
    assert answer_pair(embedded_mirage, ex, " [1]") == (None, "empty")


def test_pairs_command_writes_pairs_counts_and_a_resumable_store(data_dir, tmp_path):
    """`mirage tune pairs` on val rows: the counts cover every presentation, the pairs file reads back, the command
    is recorded and parses back; a rerun reuses every stored answer and outcome; the judge flags are not its own."""
    out = tmp_path / "pairs.jsonl"
    argv = [sys.executable, "-m", "mirage", "tune", "pairs", str(VAL), "--model", "smollm2-135m-instruct", "--limit",
            "1", "--ndocs", "2", "--max-new-tokens", "12", "--quiet", "-o", str(out)]
    ran = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(out.with_suffix(".json").read_text())
    assert set(summary["outcomes"]) == set(OUTCOMES) and sum(summary["outcomes"].values()) == summary["n_answers"] == 2
    assert summary["n_pairs"] == summary["outcomes"]["pair"] and "pairs" not in summary
    assert summary["command"].startswith("mirage tune pairs ") and "--max-size 2" in summary["command"]
    pairs, bad = read_pairs([out]) if out.read_text() else ([], [])
    assert not bad and len(pairs) == summary["n_pairs"]
    outcomes = tmp_path / "pairs.outcomes.jsonl"
    answers = tmp_path / "pairs.answers.jsonl"
    stored = (outcomes.read_bytes(), answers.read_bytes())
    again = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    assert again.returncode == 0, again.stderr
    assert (outcomes.read_bytes(), answers.read_bytes()) == stored  # nothing answered or scored again
    assert json.loads(out.with_suffix(".json").read_text()) == summary
    refused = subprocess.run([*argv[:-2], "--judge", "-o", str(out)], capture_output=True, text=True, cwd=ROOT,
                             check=False)
    assert refused.returncode == 2 and "unrecognized arguments: --judge" in refused.stderr


def test_malformed_pairs_are_named_with_their_line(tmp_path):
    good = PreferencePair(id="q-pos1", question="Who?", docs=[{"title": "", "text": "A."}], chosen="A [1].",
                          rejected="A [2].", chosen_set=[1], rejected_set=[2], chosen_reward=0.5,
                          rejected_reward=-0.1)
    path = write_pairs([good], tmp_path / "p.jsonl")
    path.write_text(path.read_text() + '{"id": "x"}\n[1]\n{"id": "y", "question": "Q", "docs": [], "chosen": "a", '
                    '"rejected": "b", "chosen_set": [1], "rejected_set": [2], "chosen_reward": 0, '
                    '"rejected_reward": 0}\n')
    pairs, bad = read_pairs([path])
    assert pairs == [good]
    assert len(bad) == 3 and [b.split(":")[1] for b in bad] == ["2", "3", "4"]
    assert all("write pairs with mirage tune pairs" in b for b in bad)


def _pairs() -> list[PreferencePair]:
    examples, _bad, _ = xor_examples(VAL, for_evaluation=True)
    out = []
    for ex in permutation_presentations(examples, k=2, seed=0)[:2]:
        text = parse_answer(ex.output, len(ex.docs)).text
        position = ex.supporting[0]
        out.append(PreferencePair(id=ex.id, question=ex.question, docs=ex.docs, chosen=f"{text} [{position}]",
                                  rejected=f"{text} [{3 - position}]", chosen_set=[position],
                                  rejected_set=[3 - position], chosen_reward=0.2, rejected_reward=-0.2,
                                  supporting=ex.supporting))
    return out


def test_the_preference_stage_trains_an_adapter_that_records_its_pairs_questions(tiny_causal, tmp_path):
    """One DPO step (trl's DPOTrainer) of a fresh LoRA adapter on the tiny model: the adapter moves the model's
    logits, records stage dpo and every pair's question as trained on, and preference.json its curve; a full
    fine-tuning config and a pairs-less config are refused with the field and the fix."""
    import torch

    from mirage.runs.experiment import question_digest
    from mirage.tune.adapters import read_adapter_info
    from mirage.tune.dpo import PREFERENCE_RESULT_FILE, train_preference

    pairs = _pairs()
    model = copy.deepcopy(tiny_causal)
    cfg = TuneConfig(data=()).replace(lora={"r": 2, "dropout": 0.0},
                                      train={"max_steps": 1, "batch_size": 2, "learning_rate": 0.05,
                                             "max_length": 900})
    ids = model.tokenizer("Answer: 1986 [1]", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        before = model.model(ids).logits
    run = train_preference(cfg, tmp_path / "dpo", lm=model, pairs=pairs, progress=False)
    assert run.steps == 1 and run.n_pairs == 2 and run.questions == len({p.question for p in pairs})
    assert run.curve and "loss" in run.curve[0] and "margins" in run.curve[0]
    info = read_adapter_info(run.adapter_dir)
    assert info.stage == "dpo" and info.base_model == "tiny-causal"
    assert info.training["questions"] == sorted({question_digest(p.question) for p in pairs})
    record = json.loads((tmp_path / "dpo" / PREFERENCE_RESULT_FILE).read_text())
    assert record["n_pairs"] == 2 and record["config"]["preference"] == {"beta": 0.1, "loss": "sigmoid"}
    with torch.no_grad():
        assert not torch.allclose(model.model(ids).logits, before, atol=1e-5)  # the adapter moved the model
    with pytest.raises(ConfigError, match="train.method: the preference stage trains a LoRA adapter"):
        train_preference(cfg.replace(train={"method": "full"}), tmp_path / "full", lm=copy.deepcopy(tiny_causal),
                         pairs=pairs, progress=False)
    with pytest.raises(ConfigError, match="data: no pairs file given; build one with `mirage tune pairs"):
        train_preference(cfg, tmp_path / "none", lm=copy.deepcopy(tiny_causal), progress=False)
    with pytest.raises(ConfigError, match=r"preference.loss must be one of sigmoid, ipo, hinge, robust, got 'kto'"):
        cfg.replace(preference={"loss": "kto"})


def test_the_preference_and_reward_prompts_follow_also_prompts(tiny_causal):
    """With ``also_prompts`` each pair (and each reward example) is prompted in the template its id picks: the same
    text mirage's inference prompt in that template gives."""
    from mirage.config import MirageConfig
    from mirage.pipeline import Mirage
    from mirage.tune.dpo import pair_example, preference_dataset
    from mirage.tune.grpo import prompt_of, reward_dataset

    pairs = _pairs()
    pairs = [pair.__class__(**{**pair.__dict__, "id": f"{pair.id}-{i}"}) for i in range(6) for pair in pairs]
    cfg = TuneConfig(data=(), also_prompts=("standard",))
    picked = [cfg.example_prompt(pair.id).name for pair in pairs]
    assert set(picked) == {"selfcitation", "standard"}, picked
    mirage = Mirage(tiny_causal, config=MirageConfig(prompt=cfg.prompt))
    rows = preference_dataset(mirage, pairs, prompt_for=cfg.example_prompt)
    examples = [pair_example(pair) for pair in pairs]
    rewards = reward_dataset(mirage, examples, prompt_for=cfg.example_prompt)
    for pair, row, reward, name in zip(pairs, rows, rewards, picked, strict=True):
        own = prompt_of(Mirage(tiny_causal, config=MirageConfig().replace(prompt={"name": name})), pair_example(pair))
        assert row["prompt"] == own == reward["prompt"], name
    assert rows[picked.index("standard")]["prompt"] != preference_dataset(mirage, pairs)[picked.index("standard")][
        "prompt"]
