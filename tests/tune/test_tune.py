"""Citation fine-tuning (mirage.tune): the training-set builders on the shipped XOR-AttriQA train/val slices and ALCE's
demos, the training prompt against mirage's inference prompt, one SFT step of a tiny in-memory model end to end with
its adapter round-tripping, adapters refused on another base model, the reward terms by hand, and the judge and the
self-distillation builder on the embedded model."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

import mirage
from mirage.attribution.citations import parse_answer
from mirage.attribution.prompts import format_prompt, load_template
from mirage.attribution.tokenization import encode_plain, tokenize_answer
from mirage.config import ConfigError, MirageConfig
from mirage.data.inputs import InputError
from mirage.pipeline import Mirage
from mirage.tune.config import RewardSettings, TuneConfig
from mirage.tune.data import (
    as_asked,
    build_gold,
    eli5_demo_examples,
    insert_citations,
    internals_examples,
    read_examples,
    shuffle_documents,
    spread_positions,
    write_examples,
    xor_examples,
    yes_no_questions,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(mirage.__file__).resolve().parent
XOR = ROOT / "tests" / "data" / "xor_attriqa_match"
DEMOS = ROOT / "tests" / "data" / "eli5_alce" / "eli5_alce_prompt.json"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the data builder -------------------------------------------------------------------------------------------------


def test_gold_keeps_each_answer_once_when_the_match_subset_and_the_full_release_are_both_given():
    """The match subset's rows are rows of the per-passage release too: given both, each (question, answer) is one
    example, from the first file, and the report counts the others."""
    from mirage.tune.data import question_digest

    full = ROOT / "tests" / "data" / "xor_attriqa_full" / "train.jsonl"
    alone, _ = build_gold([full], keep_unsupported=True, group_passages=True)
    both, report = build_gold([XOR / "train.jsonl", full], keep_unsupported=True, group_passages=True)
    match = build_gold([XOR / "train.jsonl"], keep_unsupported=True, group_passages=True)[0]
    assert report.left_out["duplicate"] == len(match) + len(alone) - len(both) > 0
    assert both[: len(match)] == match  # the first file's examples are the ones kept
    keys = [(question_digest(ex.question), parse_answer(ex.output, len(ex.docs)).text) for ex in both]
    assert len(set(keys)) == len(keys)
    assert "left out (duplicate)" in report.to_text()


def test_gold_citations_land_on_the_annotated_passages():
    examples, report = build_gold([XOR / "train.jsonl", XOR / "val.jsonl"])
    rows = {f"xor-{split}-{i}": row for split in ("train", "val")
            for i, row in enumerate(_rows(XOR / f"{split}.jsonl"), start=1)}
    supported = {k for k, row in rows.items() if any(row["ais"])}
    assert {ex.id for ex in examples} == supported and len(supported) == 3
    assert report.left_out == {"unsupported": len(rows) - len(supported), "duplicate": 0} and report.bad_rows == []
    for ex in examples:
        row = rows[ex.id]
        gold = [i + 1 for i, label in enumerate(row["ais"]) if label]
        assert ex.supporting == gold
        assert [d["text"] for d in ex.docs] == [p.strip() for p in row["split_passages_en"]]
        parsed = parse_answer(ex.output, len(ex.docs))
        assert parsed.text == row["prediction_en"].strip()           # the annotated answer, marks removed
        assert [list(c) for c in parsed.citations] == [gold] * len(parsed.sentences) == ex.citations
        assert ex.question == row["query_en"].removesuffix(" [b]").strip()
        assert ex.file.endswith(".jsonl") and ex.line >= 1
    val_1 = next(ex for ex in examples if ex.id == "xor-val-1")      # two passages, the first supporting
    assert val_1.output == "yes [1]"


def test_unsupported_rows_can_be_kept_uncited():
    examples, _bad, unsupported = xor_examples(XOR / "train.jsonl", keep_unsupported=True)
    assert len(examples) == 4 and unsupported == 3
    assert [ex.citations for ex in examples if not ex.supporting] == [[[]]] * 3


def test_eli5_demos_keep_their_hand_cited_answers():
    examples, bad = eli5_demo_examples(DEMOS)
    demos = json.loads(DEMOS.read_text())["demos"]
    assert bad == [] and len(examples) == len(demos) == 4
    lines = DEMOS.read_text().splitlines()
    for ex, demo in zip(examples, demos):
        assert ex.output == demo["answer"].strip() and ex.question == demo["question"]
        assert len(ex.docs) == len(demo["docs"]) and ex.supporting is None
        assert all(ids and all(1 <= d <= len(ex.docs) for d in ids) for ids in ex.citations[:-1])
        assert lines[ex.line - 1].strip() == "{"                      # the line where the demo starts


def test_insert_citations_reads_back_onto_the_same_sentences():
    text = "The sky is blue. Water boils at 100 degrees! It is 1986"
    spans = [(0, 16), (17, 44), (45, 55)]
    cited = insert_citations(text, spans, [[2], [], [1, 3]])
    assert cited == "The sky is blue [2]. Water boils at 100 degrees! It is 1986 [1][3]"
    parsed = parse_answer(cited, 3)
    assert parsed.text == text and [list(c) for c in parsed.citations] == [[2], [], [1, 3]]


def test_shuffled_copies_move_the_documents_and_their_citations_together():
    gold, _report = build_gold([XOR / "train.jsonl", XOR / "val.jsonl"], [DEMOS])
    out = shuffle_documents(gold, 2, seed=3)
    assert out[: len(gold)] == gold                                   # the originals first, unchanged
    copies = out[len(gold):]
    one_doc = [ex for ex in gold if len(ex.docs) == 1]
    assert len(copies) == sum(min(2, math.factorial(len(ex.docs)) - 1) for ex in gold if len(ex.docs) > 1)
    by_id = {ex.id: ex for ex in gold}
    for copy_ in copies:
        original = by_id[copy_.id.rsplit("-order", 1)[0]]
        order = copy_.meta["document_order"]                          # new position -> old 1-based id
        assert sorted(order) == list(range(1, len(original.docs) + 1)) and order != sorted(order)
        assert copy_.docs == [original.docs[i - 1] for i in order]
        new_id = {old: new for new, old in enumerate(order, start=1)}
        parsed = parse_answer(copy_.output, len(copy_.docs))
        before = parse_answer(original.output, len(original.docs))
        assert parsed.text == before.text                             # same answer, marks renumbered
        # each sentence cites the same passages, wherever they moved
        assert [sorted(new_id[d] for d in c) for c in before.citations] == [list(c) for c in parsed.citations]
        assert copy_.citations == [list(c) for c in parsed.citations]
        assert original.supporting is None or copy_.supporting == sorted(new_id[d] for d in original.supporting)
        cited_text = {copy_.docs[d - 1]["text"] for c in copy_.citations for d in c}
        assert cited_text == {original.docs[d - 1]["text"] for c in original.citations for d in c}
    orders = [tuple(c.meta["document_order"]) for c in copies if c.id.startswith(gold[-1].id + "-")]
    assert len(orders) == len(set(orders)) == 2                       # two different permutations
    assert shuffle_documents(gold, 2, seed=3) == out and shuffle_documents(gold, 0) == gold
    assert all(ex.id not in {c.id.rsplit("-order", 1)[0] for c in copies} for ex in one_doc)
    with pytest.raises(ValueError, match="copies"):
        shuffle_documents(gold, -1)


def test_malformed_rows_are_reported_with_file_and_line_and_skipped(tmp_path):
    good = (XOR / "val.jsonl").read_text().splitlines()[0]
    bad_json = '{"query_en": "broken'
    no_labels = json.dumps({k: v for k, v in json.loads(good).items() if k != "ais"})
    path = tmp_path / "train.jsonl"
    path.write_text(f"{good}\n{bad_json}\n{no_labels}\n")
    examples, bad, _ = xor_examples(path)
    assert [ex.line for ex in examples] == [1]
    assert [(b.file, b.line) for b in bad] == [(str(path), 2), (str(path), 3)]
    assert "'ais'" in bad[1].error

    training = tmp_path / "gold.jsonl"
    write_examples(examples, training)
    row = json.loads(training.read_text())
    wrong = {**row, "output": "yes [7]"}                              # the row has two documents
    training.write_text("\n".join([json.dumps(row), "not json", json.dumps(wrong), json.dumps(row)]) + "\n")
    read, bad = read_examples(training)
    assert len(read) == 2 and read[0] == examples[0]
    assert [b.line for b in bad] == [2, 3] and "cites document(s) [7]" in bad[1].error

    demos = json.loads(DEMOS.read_text())
    demos["demos"][1]["answer"] = "Shia and Sunni differ [9]."
    del demos["demos"][2]["answer"]
    broken = tmp_path / "prompt.json"
    broken.write_text(json.dumps(demos, indent=2))
    examples, bad = eli5_demo_examples(broken)
    assert len(examples) == 2
    assert [b.error.split(":")[0] for b in bad] == ["demos[1]", "demos[2]"]
    assert "document(s) [9]" in bad[0].error and "'answer' is missing" in bad[1].error
    assert all(broken.read_text().splitlines()[b.line - 1].strip() == "{" for b in bad)


def test_the_test_splits_are_refused(tmp_path):
    for split in ("fi", "ru"):
        path = tmp_path / f"{split}.jsonl"
        shutil.copy(XOR / "val.jsonl", path)
        with pytest.raises(InputError, match=f"the {split} split of XOR-AttriQA is the evaluation"):
            xor_examples(path)
        with pytest.raises(InputError, match="refused"):
            build_gold([XOR / "train.jsonl", path])
        with pytest.raises(InputError, match="refused"):
            read_examples(tmp_path / f"{split}_gold.jsonl")
    # a test row under another file name is refused by its content
    shutil.copy(XOR / "val.jsonl", tmp_path / "train.jsonl")
    with pytest.raises(InputError, match="also a row of the fi/ru test split"):
        xor_examples(tmp_path / "train.jsonl")
    assert len(xor_examples(tmp_path / "fi.jsonl", for_evaluation=True)[0]) == 4  # evaluation reads them


def test_the_data_command_writes_a_training_set(tmp_path, capsys):
    from mirage.cli import main

    out = tmp_path / "gold.jsonl"
    assert main(["tune", "data", "gold", "--xor", str(XOR / "train.jsonl"), str(XOR / "val.jsonl"),
                 "--eli5-demos", str(DEMOS), "-o", str(out)]) == 0
    examples, bad = read_examples(out)
    assert bad == [] and [ex.source for ex in examples] == ["xor-attriqa"] * 3 + ["eli5-demo"] * 4
    assert "wrote 7 examples" in capsys.readouterr().err
    shuffled = tmp_path / "shuffled.jsonl"
    assert main(["tune", "data", "gold", "--xor", str(XOR / "train.jsonl"), str(XOR / "val.jsonl"),
                 "--eli5-demos", str(DEMOS), "--shuffle-docs", "1", "--shuffle-seed", "3", "-o", str(shuffled)]) == 0
    assert read_examples(shuffled)[0] == shuffle_documents(examples, 1, seed=3)
    assert main(["tune", "data", "gold", "--xor", str(XOR / "train.jsonl"), "-o", str(tmp_path / "ru.jsonl")]) == 0
    assert main(["tune", "data", "gold", "--xor", str(tmp_path / "ru.jsonl"), "-o", str(out)]) == 2
    assert "evaluation of the tuned model" in capsys.readouterr().err


def test_gold_answers_asked_again_as_yes_no_questions_keep_their_supporting_passages():
    """--yes-no: each supported XOR-AttriQA example with a short extracted answer is asked "Is it <its answer>?"
    (Yes) and "Is it <another question's answer>?" (No), both citing the passages labelled as supporting; answers
    already yes/no and ALCE's demos are not asked again."""
    full = ROOT / "tests" / "data" / "xor_attriqa_full"
    examples, _ = build_gold([full / "train.jsonl", full / "val.jsonl"], [DEMOS], group_passages=True)
    asked = yes_no_questions(examples, seed=0)
    xor = [ex for ex in examples if ex.source == "xor-attriqa"]
    answers = {ex.id: parse_answer(ex.output, len(ex.docs)).text for ex in xor}
    assert len(xor) == 5 and [ex.id for ex in asked] == [f"{ex.id}-{reply}" for ex in xor for reply in ("yes", "no")]
    for ex in xor:
        yes, no = (next(a for a in asked if a.id == f"{ex.id}-{reply}") for reply in ("yes", "no"))
        yes_q = f"{ex.question} Is it {as_asked(answers[ex.id])}?"
        assert yes.question == yes_q and yes.meta["yes_no"]["asked"] == answers[ex.id]
        wrong = no.meta["yes_no"]["asked"]
        assert (no.question == f"{ex.question} Is it {as_asked(wrong)}?"
                and wrong in set(answers.values()) - {answers[ex.id]})
        for one, reply in ((yes, "Yes"), (no, "No")):
            parsed = parse_answer(one.output, len(one.docs))
            assert parsed.text == reply and one.citations == [ex.supporting] and one.supporting == ex.supporting
            assert one.docs == ex.docs and one.file == ex.file and one.line == ex.line
    assert yes_no_questions(examples, seed=0) == asked  # seeded
    match, _ = build_gold([XOR / "train.jsonl", XOR / "val.jsonl"])
    assert [ex.output for ex in match if ex.id == "xor-val-1"] == ["yes [1]"]
    assert {ex.meta["yes_no"]["from"] for ex in yes_no_questions(match)} == {"xor-train-1", "xor-val-2"}


def test_an_answer_asked_back_keeps_only_its_names_capitalised():
    """"Is it In 1913?" was how the first yes/no data asked it: a word capitalised because it started the answer is
    written in lower case in the question, a name or an acronym is not."""
    assert [as_asked(a) for a in ("In 1913", "The Beatles", "Four", "Paris", "DVV", "New York", "In", "Inca gold",
                                  "ABOUT 5", "1913")] == \
        ["in 1913", "the Beatles", "four", "Paris", "DVV", "New York", "in", "Inca gold", "ABOUT 5", "1913"]


def test_the_data_command_adds_the_yes_no_questions_after_the_gold_examples(tmp_path, capsys):
    from mirage.cli import main

    full = ROOT / "tests" / "data" / "xor_attriqa_full"
    out = tmp_path / "gold.jsonl"
    argv = ["tune", "data", "gold", "--xor", str(full / "train.jsonl"), "--group-passages", "--yes-no", "-o", str(out)]
    assert main(argv) == 0
    examples, bad = read_examples(out)
    gold = build_gold([full / "train.jsonl"], group_passages=True)[0]
    assert bad == [] and examples == gold + yes_no_questions(gold)
    assert f"{len(examples) - len(gold)} examples from xor-attriqa yes/no" in capsys.readouterr().err
    argv = ["tune", "data", "internals", "--xor", str(full / "train.jsonl"), "--yes-no", "-o", str(out)]
    assert main(argv) == 2
    assert "--yes-no asks the gold answers again" in capsys.readouterr().err


def test_tune_help_imports_no_torch_nor_trl():
    code = ("import sys\nfrom mirage.cli import main\n"
            "for argv in (['tune', '--help'], ['tune', 'sft', '--help'], ['tune', 'data', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'trl', 'peft', 'transformers', "
            "'datasets'}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert run.stdout.strip().splitlines()[-1] == "[]"
    shown = " ".join(run.stdout.split())
    assert "usage: mirage tune sft" in shown and "resumes from the newest checkpoint" in shown


def test_the_shipped_config_loads_and_bad_values_name_their_field(tmp_path):
    cfg = TuneConfig.from_yaml(ROOT / "configs" / "tune" / "sft.yaml")
    assert cfg.model == "smollm2-135m-instruct" and cfg.prompt.name == "selfcitation" and cfg.train.seed == 42
    assert (ROOT / "mirage" / "configs" / "tune" / "sft.yaml").read_text() == \
        (ROOT / "configs" / "tune" / "sft.yaml").read_text()
    with pytest.raises(ConfigError, match=r"lora\.r must be an integer >= 1, got 0\."):
        cfg.replace(lora={"r": 0})
    with pytest.raises(ConfigError, match=r"Unknown key\(s\) \['epoch'\] in tune config section 'train'"):
        cfg.replace(train={"epoch": 2})
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: smollm2-135m-instruct\ntrain:\n  learning_rate: -1\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: train\.learning_rate must be a finite number > 0, got -1\."):
        TuneConfig.from_yaml(bad)


# -- prompts: training = inference ------------------------------------------------------------------------------------


def test_the_training_prompt_is_mirages_inference_prompt(tiny_causal):
    from mirage.tune.sft import encode_example

    (example,), _report = build_gold([XOR / "train.jsonl"])
    mirage = Mirage(tiny_causal)
    encoded = encode_example(mirage, example)
    tok = tiny_causal.tokenizer
    inference = mirage.prepare(example.rag_item(with_output=False), index=example.id)  # what generation sees
    assert list(encoded.prompt_ids) == list(inference.tokens.ids)
    content = format_prompt(load_template(mirage.config.prompt), example.question, inference.item.docs).text
    rendered = tok.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                       add_generation_prompt=True)
    assert tok.decode(list(encoded.prompt_ids)) == rendered
    assert list(encoded.completion_ids) == [*tokenize_answer(tok, example.output).ids, tok.eos_token_id]
    assert tok.decode(list(encoded.completion_ids)) == "Srikakulam [1]<|im_end|>"
    assert encoded.completion_mask == [0] * len(encoded.prompt_ids) + [1] * len(encoded.completion_ids)
    # train.loss_on marks: the loss on the mark's tokens only, the prompt and ids unchanged
    marks = encode_example(mirage, example, loss_on="marks")
    assert marks.input_ids == encoded.input_ids
    on = [i for i, m in enumerate(marks.completion_mask) if m]
    assert on and tok.decode([marks.input_ids[i] for i in on]).strip() == "[1]"
    assert on == list(range(on[0], on[-1] + 1)) and marks.completion_mask[-1] == 0  # not the end of turn
    # citations: the mark and the token that closes it, here the end of turn (the model learns to stop citing)
    cites = encode_example(mirage, example, loss_on="citations")
    assert cites.input_ids == encoded.input_ids
    assert [i for i, m in enumerate(cites.completion_mask) if m] == [*on, len(encoded.input_ids) - 1]
    # within a longer answer every mark run gets its closing token: SmolLM2 writes "]." as one token, so there it
    # is the next word's, and the end of turn after the last
    two = dataclasses.replace(example, output="Srikakulam [1]. It is a town [2][3].")
    two_cites = encode_example(mirage, two, loss_on="citations")
    answer_ids = two_cites.input_ids[len(two_cites.prompt_ids):]
    kept = tok.decode([t for t, m in zip(answer_ids, two_cites.loss_mask, strict=True) if m])
    assert kept.replace(" ", "") == "[1].It[2][3].<|im_end|>", kept
    uncited = dataclasses.replace(example, output="Srikakulam")  # no mark: the whole answer keeps its loss
    assert encode_example(mirage, uncited, loss_on="citations").completion_mask[-1] == 1

    # a model without a chat template gets the plain prompt
    plain = Mirage(dataclasses.replace(tiny_causal, use_chat_template=False))
    assert list(encode_example(plain, example).prompt_ids) == encode_plain(tok, content)


# -- SFT and adapters on a tiny in-memory model -----------------------------------------------------------------------


def _tiny(tokenizer, seed: int, hidden: int = 32):
    from transformers import LlamaConfig, LlamaForCausalLM

    from mirage.attribution.models import wrap_model

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    return wrap_model(LlamaForCausalLM(config), tokenizer, name="tiny-causal")


@pytest.fixture(scope="module")
def sft_run(tiny_causal, tmp_path_factory):
    """One SFT step of a copy of the tiny model on the shipped gold rows: the run, the trained model and a pristine
    copy of its base."""
    from mirage.tune.sft import train_sft

    examples, _ = build_gold([XOR / "train.jsonl", XOR / "val.jsonl"])
    trained, pristine = copy.deepcopy(tiny_causal), copy.deepcopy(tiny_causal)
    cfg = TuneConfig(data=()).replace(lora={"r": 2, "dropout": 0.0},
                                      train={"max_steps": 1, "gradient_accumulation_steps": 2, "batch_size": 1,
                                             "learning_rate": 0.05, "max_length": 700})
    out = tmp_path_factory.mktemp("sft")
    run = train_sft(cfg, out, lm=trained, examples=examples, progress=False)
    return run, trained, pristine, cfg, examples


def test_examples_left_out_as_too_long_are_named_by_dataset_not_by_this_machine_s_folders(sft_run, monkeypatch,
                                                                                            tmp_path):
    """A training record is published: an example over max_length from the data cache is named by its dataset
    (xor-attriqa-full:train:LINE), not by the cache's absolute path."""
    from mirage.data.fetch import data_root
    from mirage.pipeline import Mirage
    from mirage.tune.sft import build_dataset

    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "data"))
    _run, _trained, pristine, _cfg, examples = sft_run
    example = copy.deepcopy(examples[0])
    example.file, example.line = str(data_root() / "xor_attriqa_full" / "train.jsonl"), 64
    _dataset, too_long = build_dataset(Mirage(pristine), [example], max_length=4)
    assert len(too_long) == 1 and too_long[0].startswith(f"xor-attriqa-full:train:64 ({example.id}): ")
    assert str(tmp_path) not in too_long[0]


def test_training_examples_read_from_the_data_cache_name_their_dataset_not_its_folder(monkeypatch, tmp_path):
    """Training sets are written next to results and shared: an example's ``file`` is the dataset's name when its row
    came from the data cache, so no written set names this machine's folders."""
    import shutil

    from mirage.data.fetch import data_root
    from mirage.tune.data import write_examples

    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "data"))
    cached = data_root() / "xor_attriqa_match" / "train.jsonl"
    cached.parent.mkdir(parents=True)
    shutil.copy(XOR / "train.jsonl", cached)
    examples, _bad, _unsupported = xor_examples(cached)
    assert examples and {ex.file for ex in examples} == {"xor-attriqa-match:train"}
    written = write_examples(examples, tmp_path / "set.jsonl")
    assert str(tmp_path) not in Path(written).read_text(encoding="utf-8")


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def test_one_sft_step_runs_end_to_end(sft_run):
    run, _trained, _pristine, _cfg, examples = sft_run
    assert run.steps == 1 and run.n_train == len(examples) == 3 and run.too_long == []
    assert run.base_model == "tiny-causal" and run.resumed_from is None
    assert math.isfinite(run.train_loss) and run.loss_curve[0]["step"] == 1.0 and run.peak_rss_mb > 0
    out = Path(run.output_dir)
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    assert (out / "checkpoints" / "checkpoint-1").is_dir()
    assert json.loads((out / "sft.json").read_text())["steps"] == 1


def test_also_prompts_spread_the_examples_over_the_named_templates_the_same_way_every_run():
    cfg = TuneConfig(data=(), also_prompts=("selfcitation_marked", "short"))
    assert cfg.training_prompts() == ("selfcitation", "selfcitation_marked", "short")
    picked = [cfg.example_prompt(f"xor-train-{i}").name for i in range(300)]
    assert picked == [cfg.example_prompt(f"xor-train-{i}").name for i in range(300)]  # a digest, not a random draw
    counts = {name: picked.count(name) for name in cfg.training_prompts()}
    assert all(70 <= n <= 130 for n in counts.values()), counts  # about a third each
    assert cfg.example_prompt("a").chat_template == cfg.prompt.chat_template
    # the records of runs without it stay as they were; a run with it records it
    assert "also_prompts" not in TuneConfig(data=()).to_dict() and TuneConfig(data=()).example_prompt("a").name == \
        "selfcitation"
    assert cfg.to_dict()["also_prompts"] == ["selfcitation_marked", "short"]
    assert TuneConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match=r"tune\.also_prompts must be distinct prompt template names other than "
                                          r"prompt\.name \('selfcitation'\), got \['selfcitation'\]"):
        TuneConfig(data=(), also_prompts=("selfcitation",))
    with pytest.raises(ConfigError, match=r"tune\.also_prompts must be"):
        TuneConfig(data=(), also_prompts=("short", "short"))


def test_each_example_is_trained_in_the_prompt_its_id_picks(tiny_causal, tmp_path, one_line_error):
    from mirage.tune.sft import build_dataset, encode_example, train_sft

    examples, _ = build_gold([XOR / "train.jsonl", XOR / "val.jsonl"])
    cfg = TuneConfig(data=(), also_prompts=("short",))
    many = [dataclasses.replace(examples[i % len(examples)], id=f"copy-{i}") for i in range(8)]
    picked = [cfg.example_prompt(ex.id).name for ex in many]
    assert set(picked) == {"selfcitation", "short"}, picked
    mirage = Mirage(tiny_causal, config=MirageConfig(prompt=cfg.prompt))
    dataset, _ = build_dataset(mirage, many, max_length=4096, prompt_for=cfg.example_prompt)
    for row, ex, name in zip(dataset, many, picked, strict=True):
        own = encode_example(mirage, ex, config=MirageConfig().replace(prompt={"name": name}))
        assert row["input_ids"] == list(own.input_ids), name
    short = [row["input_ids"] for row, name in zip(dataset, picked, strict=True) if name == "short"]
    plain = [row["input_ids"] for row, name in zip(dataset, picked, strict=True) if name == "selfcitation"]
    assert len(short[0]) < len(plain[0])  # the one-line instruction: a shorter prompt than ALCE's
    # a training run records them; an unknown template is refused before any model loads, naming the field
    run = train_sft(cfg.replace(lora={"r": 2}, train={"max_steps": 1, "gradient_accumulation_steps": 1}),
                    tmp_path / "sft", lm=copy.deepcopy(tiny_causal), examples=examples, progress=False)
    from mirage.tune.adapters import read_adapter_info

    assert read_adapter_info(run.adapter_dir).training["also_prompts"] == ["short"]
    assert read_adapter_info(run.adapter_dir).prompt["name"] == "selfcitation"  # still the inference prompt
    line = one_line_error(["tune", "sft", "--data", str(tmp_path / "none.jsonl"), "--also-prompts", "shrot",
                           "-o", str(tmp_path / "bad")])
    assert "tune.also_prompts='shrot' is unknown; choose one of" in line and "short" in line


def test_the_adapter_round_trips_with_the_same_logits(sft_run, real_tokenizer):
    from mirage.tune.adapters import apply_adapter, read_adapter_info

    run, trained, pristine, _cfg, examples = sft_run
    info = read_adapter_info(run.adapter_dir)
    assert info.base_model == "tiny-causal" and info.stage == "sft" and info.prompt["name"] == "selfcitation"
    assert info.training["lora"]["r"] == 2
    # the questions it saw, by question whatever their documents: what tune eval/follow leave out
    from mirage.tune.data import question_digest

    assert info.training["questions"] == sorted({question_digest(ex.question) for ex in examples})
    assert len(info.training["questions"]) == 3
    ids = real_tokenizer("Document [1]: Paris is in France. Answer: Paris [1]")["input_ids"]
    expected = _logits(trained.model, ids)
    assert not torch.allclose(expected, _logits(pristine.model, ids), atol=1e-4)  # the step changed the model
    for merge in (False, True):
        loaded = apply_adapter(copy.deepcopy(pristine), run.adapter_dir, merge=merge)
        torch.testing.assert_close(_logits(loaded.model, ids), expected, atol=1e-5, rtol=1e-5)
    assert loaded.name == "tiny-causal+adapter"


def test_an_exported_fp16_adapter_gives_the_same_logits_within_fp16(sft_run, real_tokenizer, tmp_path):
    from safetensors.torch import load_file

    from mirage.tune.adapters import AdapterError, apply_adapter, export_adapter, read_adapter_info

    run, trained, pristine, _cfg, _ = sft_run
    half = export_adapter(run.adapter_dir, tmp_path / "half")
    assert {t.dtype for t in load_file(str(half / "adapter_model.safetensors")).values()} == {torch.float16}
    assert read_adapter_info(half) == read_adapter_info(run.adapter_dir)
    assert json.loads((half / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny-causal"
    ids = real_tokenizer("Document [1]: Paris is in France. Answer: Paris [1]")["input_ids"]
    loaded = apply_adapter(copy.deepcopy(pristine), half)
    assert loaded.model.dtype == torch.float32                          # cast back to the model's dtype
    torch.testing.assert_close(_logits(loaded.model, ids), _logits(trained.model, ids), atol=5e-3, rtol=1e-2)
    with pytest.raises(AdapterError, match="dtype='int8'"):
        export_adapter(run.adapter_dir, tmp_path / "int", dtype="int8")


def test_an_adapter_for_another_base_model_is_refused(sft_run, real_tokenizer, tmp_path):
    from mirage.tune.adapters import AdapterError, apply_adapter, read_adapter_info

    run = sft_run[0]
    with pytest.raises(AdapterError, match=r"trained on the base model 'tiny-causal'.*its weights differ"):
        apply_adapter(_tiny(real_tokenizer, seed=1), run.adapter_dir)
    with pytest.raises(AdapterError, match="its architecture differs .*hidden_size 48"):
        apply_adapter(_tiny(real_tokenizer, seed=0, hidden=48), run.adapter_dir)
    variant = copy.deepcopy(sft_run[2])                                # a fine-tuned variant of the base
    with torch.no_grad():
        variant.model.get_input_embeddings().weight.mul_(1.001)
    variant.name = "tiny-variant"
    with pytest.raises(AdapterError, match="its weights differ"):
        apply_adapter(variant, run.adapter_dir)
    for dtype in (torch.bfloat16, torch.float16):                      # the base in another dtype is the base
        other = copy.deepcopy(sft_run[2])
        other.model.to(dtype)
        assert apply_adapter(other, run.adapter_dir).model.dtype == dtype
    bare = tmp_path / "bare"
    shutil.copytree(run.adapter_dir, bare)
    (bare / "mirage-adapter.json").unlink()
    with pytest.raises(AdapterError, match="its base model is unknown"):
        read_adapter_info(bare)


def test_full_fine_tuning_saves_a_model_folder_that_loads_by_path_and_is_judged_on_unseen_rows(sft_run, tmp_path):
    """train.method full: every weight trained (none frozen), saved as a model folder with mirage's record (the
    base model's name and the questions it saw); load_model takes the folder, with the trained logits; tune eval
    --model FOLDER leaves out the rows whose question it was trained on; the reward stage refuses the method."""
    from mirage.attribution.models import load_model
    from mirage.tune.adapters import training_record
    from mirage.tune.data import question_digest
    from mirage.tune.grpo import train_reward
    from mirage.tune.sft import earlier_questions, train_sft

    _run, _trained, pristine, cfg, examples = sft_run
    full_cfg = cfg.replace(train={"method": "full", "learning_rate": 0.01}, prompt={"name": "selfcitation_marked"})
    model = copy.deepcopy(pristine)
    run = train_sft(full_cfg, tmp_path / "full", lm=model, examples=examples, progress=False)
    folder = Path(run.adapter_dir)
    assert folder == tmp_path / "full" / "model" and (folder / "config.json").is_file()
    assert not (tmp_path / "full" / "adapter").exists()
    record = training_record(folder)
    assert record["train"]["method"] == "full" and record["steps"] == 1
    assert record["questions"] == sorted({question_digest(ex.question) for ex in examples})
    # a stage that starts from this folder (SFT again, or the reward stage's adapter) keeps its questions
    assert sorted(earlier_questions(full_cfg.replace(model=str(folder)))) == record["questions"]
    assert earlier_questions(full_cfg) == []  # the base model by name records none
    info = json.loads((folder / "mirage-adapter.json").read_text())
    assert info["base_model"] == "tiny-causal" and info["stage"] == "sft"
    ids = model.tokenizer("Answer: 1986 [1]")["input_ids"]
    trained = _logits(model.model, ids)
    assert not torch.allclose(trained, _logits(pristine.model, ids), atol=1e-4)  # the weights moved
    loaded = load_model(str(folder), dtype="float32")
    torch.testing.assert_close(_logits(loaded.model, ids), trained)
    # a rerun finds the finished run
    again = train_sft(full_cfg, tmp_path / "full", lm=copy.deepcopy(pristine), examples=examples, progress=False)
    assert again.steps == 1 and again.runtime_s == 0.0
    # judged only on rows whose question it did not see
    val = [ex for ex in xor_examples(XOR / "val.jsonl", for_evaluation=True)[0]]
    seen = sum(question_digest(ex.question) in set(record["questions"]) for ex in val)
    assert 0 < seen < len(val)
    out = tmp_path / "eval.json"
    ran = subprocess.run([sys.executable, "-m", "mirage", "tune", "eval", str(XOR / "val.jsonl"), "--model",
                          str(folder), "--max-new-tokens", "2", "--quiet", "-o", str(out)],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert ran.returncode == 0, ran.stderr
    assert f"{seen} of {len(val)} rows ask a question of the training data (the model's)" in ran.stderr
    assert len(out.with_name("eval.answers.jsonl").read_text().splitlines()) == len(val) - seen
    stored = json.loads(out.with_name("eval.answers.jsonl").read_text().splitlines()[0])
    assert stored["settings"]["prompt"]["name"] == "selfcitation_marked"  # the prompt the folder was trained with
    from mirage.tune.adapters import AdapterError
    from mirage.tune.sft import checkpoint_adapter, last_checkpoint

    checkpoint = last_checkpoint(tmp_path / "full" / "checkpoints")
    with pytest.raises(AdapterError, match="full fine-tuning run: a model folder already"):
        checkpoint_adapter(checkpoint, tmp_path / "nothing", lm=copy.deepcopy(pristine))
    with pytest.raises(ConfigError, match="train.method"):
        train_reward(full_cfg, tmp_path / "reward", lm=copy.deepcopy(pristine), examples=examples, progress=False)
    marks_cfg = full_cfg.replace(train={"method": "lora", "loss_on": "citations"})
    with pytest.raises(ConfigError, match="train.loss_on: the reward stage"):
        train_reward(marks_cfg, tmp_path / "reward", lm=copy.deepcopy(pristine), examples=examples, progress=False)
    with pytest.raises(ConfigError, match=r"train\.loss_on must be one of answer, citations, marks, got 'tokens'"):
        full_cfg.replace(train={"loss_on": "tokens"})


def test_a_rerun_resumes_and_other_settings_are_refused(sft_run):
    from mirage.tune.sft import train_sft

    run, _trained, pristine, cfg, examples = sft_run
    with pytest.raises(ConfigError, match="other settings .*train"):
        train_sft(cfg.replace(train={"max_steps": 2}), run.output_dir, lm=copy.deepcopy(pristine), examples=examples,
                  progress=False)
    again = train_sft(cfg, run.output_dir, lm=copy.deepcopy(pristine), examples=examples, progress=False)
    assert again.resumed_from.endswith("checkpoint-1") and again.steps == 1


def test_a_checkpoint_left_incomplete_by_a_stopped_run_is_passed_over_and_kept(sft_run, tmp_path, caplog):
    """A run killed while the trainer saved step 2 left checkpoint-2 with its weights cut short and without its
    trainer_state.json (written last): the rerun resumes from checkpoint-1, says so in one line, deletes no
    checkpoint, and the trainer saves step 2 into checkpoint-2 again."""
    from mirage.tune.sft import complete_checkpoint, last_checkpoint, train_sft

    run, _trained, pristine, cfg, examples = sft_run
    out = tmp_path / "run"
    shutil.copytree(run.output_dir, out)
    (out / "sft.json").unlink()  # the stopped run never finished
    complete, broken = out / "checkpoints" / "checkpoint-1", out / "checkpoints" / "checkpoint-2"
    broken.mkdir()
    shutil.copy(complete / "adapter_config.json", broken)
    (broken / "adapter_model.safetensors").write_bytes((complete / "adapter_model.safetensors").read_bytes()[:100])
    with caplog.at_level("WARNING", logger="mirage.tune.sft"):
        again = train_sft(cfg, out, lm=copy.deepcopy(pristine), examples=examples, progress=False)
    assert again.resumed_from == str(complete) and again.steps == 2  # the trainer takes one more step on resuming
    (message,) = [r.getMessage() for r in caplog.records if r.name == "mirage.tune.sft"]
    assert "\n" not in message and str(broken) in message and "resuming from checkpoint-1" in message
    assert complete_checkpoint(complete) and complete_checkpoint(broken)  # checkpoint-2 saved whole this time
    (out / "checkpoints" / "checkpoint-3").mkdir()  # killed while writing the trainer state itself
    (out / "checkpoints" / "checkpoint-3" / "trainer_state.json").write_text('{"global_st')
    assert last_checkpoint(out / "checkpoints") == str(broken)
    for folder in (complete, broken):
        (folder / "trainer_state.json").unlink()
    assert last_checkpoint(out / "checkpoints") is None  # none complete: training starts over, nothing deleted
    assert all((out / "checkpoints" / f"checkpoint-{n}").is_dir() for n in (1, 2, 3))


def test_runs_recorded_before_a_field_existed_still_resume(tmp_path):
    """A run folder written before the reward's permutation term existed: an SFT run resumes whatever the reward
    settings (it never reads them), a reward run resumes under the behaviour it had (no permutation term)."""
    from mirage.tune.sft import RUN_FILE, check_run_dir

    cfg = TuneConfig(data=("gold.jsonl",))
    old = cfg.to_dict()
    del old["reward"]["permutation"]
    for stage in ("sft", "reward"):
        (tmp_path / stage).mkdir()
        (tmp_path / stage / RUN_FILE).write_text(json.dumps({"stage": stage, "config": old}))
    check_run_dir(tmp_path / "sft", cfg.replace(reward={"permutation": 0.9, "beta": 0.5}), "sft")
    check_run_dir(tmp_path / "reward", cfg.replace(reward={"permutation": 0.0}), "reward")
    with pytest.raises(ConfigError, match="other settings .*reward"):
        check_run_dir(tmp_path / "reward", cfg, "reward")      # the term now on: not the run's settings


# -- the reward -------------------------------------------------------------------------------------------------------


def test_reward_terms_by_hand():
    from mirage.tune.reward import agreement_score, combine, faithfulness_score, format_score, rage_score

    assert rage_score([1, 3], [1, 2]) == pytest.approx(0.5)          # P 1/2, R 1/2
    assert rage_score([1, 2, 3], [2]) == pytest.approx((1 / 3 + 1) / 2)
    assert rage_score([], [2]) == 0.0 and rage_score([], []) == 1.0 and rage_score([1], None) is None
    assert agreement_score([[1], [2, 3], []], [[1], [3], []]) == pytest.approx((1 + 0.5 + 1) / 3)
    assert faithfulness_score([2.0, None], [2, 5]) == pytest.approx((1 - math.exp(-1)) / 2)
    assert faithfulness_score([-3.0, 4.0], [1, 4], scale=2.0) == pytest.approx((0 + 1 - math.exp(-0.5)) / 2)
    # three sentences: one cites an existing document, one only a missing one, one nothing
    parsed = parse_answer("Paris is big [1]. It rains a lot [7]. Sun.", 2)
    assert format_score(parsed) == pytest.approx(1 / 3 * 1 / 2)
    assert format_score(parse_answer("Paris [1][2].", 2)) == 1.0 and format_score(parse_answer("", 2)) == 0.0
    weights = RewardSettings().weights                                  # 1, .5, .5, .5, .5
    terms = {"rage": 0.5, "agreement": None, "faithfulness": 0.2, "format": 1.0}
    assert combine(terms, weights) == pytest.approx((0.5 * 1 + 0.2 * 0.5 + 1.0 * 0.5) / 2.0)
    assert combine(terms, {**weights, "rage": 0.0}) == pytest.approx((0.1 + 0.5) / 1.0)


def test_reward_settings_are_checked():
    with pytest.raises(ConfigError, match="every term weight"):
        RewardSettings(rage=0, agreement=0, faithfulness=0, format=0, permutation=0)
    with pytest.raises(ConfigError, match=r"reward\.permutation"):
        RewardSettings(permutation=-1)
    with pytest.raises(ConfigError, match=r"reward\.num_generations must be an integer >= 2, got 1\."):
        RewardSettings(num_generations=1)


def test_the_permutation_term_pays_for_citing_the_same_passage_wherever_it_stands(tiny_causal):
    from mirage.tune.reward import CitationJudge, permutation_scores, presentation_of

    a, b, c = ({"title": t, "text": f"{t} text"} for t in "ABC")
    first = presentation_of("q", [a, b, c])
    moved = presentation_of("q", [b, a, c])     # A now second
    other = presentation_of("another q", [b, a, c])
    # answers 0/1: the same passage A ([1] then [2]); 2/3: always [1] (A, then B); 4: another question; 5: the same
    # order as answer 0 (nothing to compare with but answer 1's order)
    presentations = [first, moved, first, moved, other, first]
    cited = [[1], [2], [1], [1], [1], [1, 3]]
    scores = permutation_scores(presentations, cited)
    # answer 0 against the answers in the other order (1: A, 3: B); answer 5 ({A, C}) likewise
    assert scores[0] == pytest.approx((1 + 0) / 2) and scores[5] == pytest.approx((1 / 2 + 0) / 2)
    assert scores[1] == pytest.approx((1 + 1 + 1 / 2) / 3)          # A against answers 0, 2 (A), 5 ({A, C})
    assert scores[3] == pytest.approx((0 + 0 + 0) / 3)              # B, while the others in order 1 cite A or {A, C}
    assert scores[4] is None                                         # no other presentation of its question
    assert permutation_scores([first, moved], [[], []]) == [1.0, 1.0]  # both cite nothing: consistent
    assert permutation_scores([first, moved], [[9], [1]]) == [0.0, 0.0]  # a missing document cites nothing
    # in the judge, an empty answer scores 0 here too, however consistent its (absent) citations
    judge = CitationJudge(Mirage(tiny_causal), RewardSettings(agreement=0.0, faithfulness=0.0))  # no model pass
    docs = [a, b, c]
    items = [{"question": "q", "docs": docs, "supporting": None}, {"question": "q", "docs": [b, a, c],
                                                                     "supporting": None}]
    empty, cited_a = judge.score_batch(items, ["[1]", "Paris [2]."])
    assert empty.permutation == 0.0 and empty.total == 0.0
    assert cited_a.permutation == 0.0 and cited_a.format == 1.0  # A against an answer citing nothing
    both = judge.score_batch(items, ["Paris [1].", "Paris [2]."])
    assert [t.permutation for t in both] == [1.0, 1.0] and both[0].total == pytest.approx((1.0 * .5 + 1.0 * .5) / 1.0)


def test_reward_batches_hold_every_presentation_of_a_question():
    from mirage.tune.grpo import permutation_batching, presentation_groups

    examples, _ = build_gold([XOR / "train.jsonl", XOR / "val.jsonl"])
    spread = spread_positions(examples, k=3)                         # each question in 3 orders
    groups = presentation_groups(spread, seed=0)
    assert sorted(len(g) for g in groups) == [3, 3, 3]
    assert all(len({spread[i].question for i in g}) == 1 for g in groups)
    order, batch = permutation_batching(groups, RewardSettings(num_generations=4), per_step=8)
    assert sorted(order) == list(range(len(spread))) and batch == 24   # lcm(3 questions' orders x 4 answers, 8)
    assert [spread[i].question for i in order] == [spread[g[0]].question for g in groups for _ in g]
    assert permutation_batching(groups, RewardSettings(permutation=0), per_step=8) == (None, None)
    assert permutation_batching(presentation_groups(examples), RewardSettings(), per_step=8) == (None, None)


SHORT_ITEM = {
    "question": "In which year was the Eiffel Tower completed?",
    "docs": [{"title": "Eiffel Tower", "text": "The Eiffel Tower in Paris was completed in 1889 for the World's Fair."},
             {"title": "Big Ben", "text": "The clock tower in London was completed in 1859."}],
    "supporting": [1],
}


@pytest.mark.slow
def test_the_judge_scores_a_cited_answer_on_the_embedded_model(embedded_mirage):
    from mirage.scoring.faithfulness import faithfulness
    from mirage.tune.reward import CitationJudge, agreement_score, combine

    weights = {"rage": 1.0, "agreement": 1.0, "faithfulness": 1.0, "format": 1.0}
    judge = CitationJudge(embedded_mirage, RewardSettings(**weights))
    cited = judge.score(SHORT_ITEM, "1889 [1].")
    assert cited.error is None and cited.self_citations == [[1]]
    assert cited.rage == 1.0 and cited.format == 1.0
    assert cited.agreement == pytest.approx(agreement_score(cited.self_citations, cited.mirage_citations))
    # the faithfulness check of the same answer, by hand: removing the document holding 1889 makes it less likely
    res = embedded_mirage.attribute_item({**SHORT_ITEM, "output": "1889 [1]."})
    (sentence,) = faithfulness(embedded_mirage, res).sentences
    drop = sentence.sets["selfcitation"].drop
    assert drop > 0 and cited.faithfulness == pytest.approx(1 - math.exp(-drop / sentence.n_tokens))
    assert cited.total == pytest.approx(combine({k: getattr(cited, k) for k in weights}, weights))
    uncited = judge.score(SHORT_ITEM, "1889.")
    assert (uncited.rage, uncited.format, uncited.faithfulness) == (0.0, 0.0, 0.0) and uncited.total < cited.total
    # trl's interface, one reward per completion (terms that need no model: no attribution runs)
    labels_only = CitationJudge(embedded_mirage, RewardSettings(agreement=0.0, faithfulness=0.0))
    assert labels_only([None, None], ["1889 [1].", "1889 [2]."], question=[SHORT_ITEM["question"]] * 2,
                       docs=[SHORT_ITEM["docs"]] * 2, supporting=[[1], [1]]) == [1.0, pytest.approx(1 / 3)]


@pytest.mark.slow
def test_the_selfcite_term_is_selfcites_reward_of_each_sentences_own_citations(embedded_mirage):
    """The ``selfcite`` term, against SelfCite's reward computed by hand (:func:`citation_rewards` over the
    sentence's tokens): the document holding the answer earns more than the other; an uncited sentence earns 0;
    two sentences, the mean; weighted 0 (the default), it is not computed."""
    from mirage.attribution.aggregation import tokens_by_sentence
    from mirage.attribution.methods import document_inputs
    from mirage.attribution.methods.selfcite import citation_rewards
    from mirage.attribution.tokenization import tokenize_answer
    from mirage.tune.reward import CitationJudge

    judge = CitationJudge(embedded_mirage, RewardSettings(rage=0.0, agreement=0.0, faithfulness=0.0, format=0.0,
                                                          permutation=0.0, selfcite=1.0, selfcite_scale=0.5))
    item = {"question": SHORT_ITEM["question"], "docs": SHORT_ITEM["docs"]}
    inputs = document_inputs(embedded_mirage, item, "1889.")
    r1, r2 = citation_rewards(inputs, [[1], [2]])
    right, wrong = judge.score(SHORT_ITEM, "1889 [1]."), judge.score(SHORT_ITEM, "1889 [2].")
    assert right.selfcite == pytest.approx(1 - math.exp(-max(0.0, r1) / 0.5))
    assert wrong.selfcite == pytest.approx(1 - math.exp(-max(0.0, r2) / 0.5))
    assert r1 > r2 and right.selfcite > wrong.selfcite and right.total == right.selfcite
    assert judge.score(SHORT_ITEM, "1889.").selfcite == 0.0 and judge.score(SHORT_ITEM, "[1]").selfcite == 0.0
    text = "It was 1889. London has a clock."
    two = judge.score(SHORT_ITEM, "It was 1889 [1]. London has a clock [1][2].")
    answer = tokenize_answer(embedded_mirage.lm.tokenizer, text)
    parsed = parse_answer(text, 2)
    first, second = tokens_by_sentence(text, parsed.sentences, [a for a, _b in answer.offsets],
                                       range(len(answer.ids)))
    inputs = document_inputs(embedded_mirage, item, text)
    (a,) = citation_rewards(inputs, [[1]], tokens=first)
    (b,) = citation_rewards(inputs, [[1, 2]], tokens=second)
    assert two.selfcite == pytest.approx((1 - math.exp(-max(0.0, a) / 0.5) + 1 - math.exp(-max(0.0, b) / 0.5)) / 2)
    assert CitationJudge(embedded_mirage, RewardSettings(agreement=0.0, faithfulness=0.0)).score(
        SHORT_ITEM, "1889 [1].").selfcite is None


@pytest.mark.slow
def test_internals_examples_cite_what_mirage_attributes(embedded_mirage):
    from mirage.tune.data import TrainingExample

    item = TrainingExample(id="eiffel", source="test", question=SHORT_ITEM["question"], docs=SHORT_ITEM["docs"],
                           output="", citations=[], supporting=[1])
    cfg = MirageConfig().replace(generation={"max_new_tokens": 16})
    examples, left_out = internals_examples(embedded_mirage, [item], config=cfg)
    assert len(examples) + sum(left_out.values()) == 1
    res = embedded_mirage.attribute_item(item.rag_item(with_output=False), config=cfg)  # the same greedy answer
    for ex in examples:
        kept = res.sentences[: len(ex.citations)]       # all, or all but an unfinished last one
        assert len(kept) in (len(res.sentences), len(res.sentences) - 1)
        parsed = parse_answer(ex.output, len(ex.docs))
        assert parsed.text == res.answer[: kept[-1].end]
        assert [list(c) for c in parsed.citations] == [list(s.mirage_citations) for s in kept]
        assert ex.source == "internals" and ex.supporting == [1] and ex.meta["raw_answer"] == res.raw_answer
    if not examples:
        assert left_out["cut"] or not any(s.mirage_citations for s in res.sentences)


def test_internals_examples_resume_from_their_store(embedded_mirage, tmp_path, monkeypatch):
    from mirage.runs.store import StoreError
    from mirage.tune.data import TrainingExample, internals_cache

    items = [TrainingExample(id=f"q{i}", source="test", question=q, docs=SHORT_ITEM["docs"], output="",
                             citations=[], supporting=[1], line=i)
             for i, q in enumerate([SHORT_ITEM["question"], "Who built the Eiffel Tower?"], start=1)]
    cfg = MirageConfig().replace(generation={"max_new_tokens": 16})
    path = tmp_path / "internals.jsonl.partial"
    first, _left = internals_examples(embedded_mirage, items[:1], config=cfg,
                                      cache=internals_cache(path, embedded_mirage, cfg))
    assert len(path.read_text().splitlines()) == 1          # the outcome was stored as soon as it was known
    computed = []
    real = embedded_mirage.attribute_item
    monkeypatch.setattr(embedded_mirage, "attribute_item", lambda *a, **k: computed.append(1) or real(*a, **k))
    both, left_both = internals_examples(embedded_mirage, items, config=cfg,
                                         cache=internals_cache(path, embedded_mirage, cfg))
    assert len(computed) == 1                                # only the new item ran
    assert len(both) + sum(left_both.values()) == 2
    assert [e.to_dict() for e in both[: len(first)]] == [e.to_dict() for e in first]
    assert len(path.read_text().splitlines()) == 2
    with pytest.raises(StoreError, match="other settings"):
        internals_cache(path, embedded_mirage, cfg.replace(generation={"max_new_tokens": 8}))


# -- the reward stage on the tiny model -------------------------------------------------------------------------------


def test_the_reward_prompt_is_mirages_inference_prompt(tiny_causal):
    from mirage.tune.grpo import prompt_of

    (example,), _report = build_gold([XOR / "train.jsonl"])
    mirage = Mirage(tiny_causal)
    messages = prompt_of(mirage, example)
    rendered = tiny_causal.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                         return_dict=True)["input_ids"]  # as trl renders it
    inference = mirage.prepare(example.rag_item(with_output=False), index=example.id)
    assert list(rendered) == list(inference.tokens.ids)
    plain = Mirage(dataclasses.replace(tiny_causal, use_chat_template=False))
    assert prompt_of(plain, example) == plain.prepare(example.rag_item(with_output=False)).prompt.text


def test_one_reward_step_runs_end_to_end_from_the_sft_adapter(sft_run, tmp_path):
    from mirage.tune.adapters import apply_adapter, read_adapter_info
    from mirage.tune.grpo import train_reward

    sft, _trained, pristine, cfg, examples = sft_run
    cfg = cfg.replace(adapter=sft.adapter_dir,
                      train={"batch_size": 2, "gradient_accumulation_steps": 1, "learning_rate": 0.05},
                      reward={"num_generations": 2, "max_completion_length": 6, "beta": 0.1})
    with pytest.warns(UserWarning, match="the term never applies"):  # one question, in one order
        run = train_reward(cfg, tmp_path / "reward", lm=copy.deepcopy(pristine), examples=examples[:1],
                           progress=False)
    assert run.steps == 1 and run.start_adapter == sft.adapter_dir and run.n_prompts == 1
    (logged,) = run.curve
    assert 0.0 <= logged["reward"] <= 1.0 and "kl" in logged
    info = read_adapter_info(run.adapter_dir)
    assert info.stage == "reward" and info.base_model == "tiny-causal"
    # trained on one question, from an adapter trained on three: it has seen all three
    assert info.training["questions"] == read_adapter_info(sft.adapter_dir).training["questions"]
    assert len(info.training["questions"]) == 3
    assert not (Path(run.adapter_dir) / "ref").exists()              # trl's frozen reference is not saved
    ids = pristine.tokenizer("Answer: 1986 [1]")["input_ids"]
    after = _logits(apply_adapter(copy.deepcopy(pristine), run.adapter_dir).model, ids)
    # the stage trained the SFT adapter further (a fresh adapter would start at the base model's logits)
    assert torch.isfinite(after).all() and not torch.allclose(after, _logits(pristine.model, ids), atol=1e-4)
    # its checkpoint, as a run stopped there would leave it, becomes the same adapter (mirage tune export CHECKPOINT)
    from mirage.tune.adapters import AdapterError
    from mirage.tune.sft import checkpoint_adapter

    saved = checkpoint_adapter(tmp_path / "reward" / "checkpoints" / "checkpoint-1", tmp_path / "step1",
                               lm=copy.deepcopy(pristine))
    step1 = read_adapter_info(saved)
    assert (step1.stage, step1.base_model, step1.training["steps"], step1.training["checkpoint"]) == (
        "reward", "tiny-causal", 1, "checkpoint-1")
    assert "questions" not in step1.training  # its data was given in memory, not as files it could read again
    assert not (saved / "ref").exists()
    torch.testing.assert_close(_logits(apply_adapter(copy.deepcopy(pristine), saved).model, ids), after)
    with pytest.raises(AdapterError, match="not a checkpoint of a mirage tune run"):
        checkpoint_adapter(tmp_path / "reward" / "adapter", tmp_path / "bad", lm=copy.deepcopy(pristine))


def test_a_reward_step_judges_every_order_of_a_question_together(sft_run, tmp_path, monkeypatch):
    """With a question in two document orders, trl samples and the judge scores both presentations' answers in one
    call (no shuffling, a generation batch of whole questions), so every answer gets the permutation term."""
    from mirage.tune.grpo import train_reward
    from mirage.tune.reward import CitationJudge

    _sft, _trained, pristine, cfg, examples = sft_run
    spread = spread_positions(examples[:1], k=2, pool=examples)
    assert len(spread) == 2 and spread[0].docs != spread[1].docs
    calls = []
    real = CitationJudge.score_batch

    def spy(self, items, answers):
        scored = real(self, items, answers)
        calls.append([(item["docs"][0]["text"], terms.permutation) for item, terms in zip(items, scored)])
        return scored

    monkeypatch.setattr(CitationJudge, "score_batch", spy)
    cfg = cfg.replace(train={"batch_size": 2, "gradient_accumulation_steps": 1, "learning_rate": 0.05},
                      reward={"num_generations": 2, "max_completion_length": 6, "agreement": 0.0,
                              "faithfulness": 0.0})
    run = train_reward(cfg, tmp_path / "reward", lm=copy.deepcopy(pristine), examples=spread, progress=False)
    assert run.questions == 1 and run.n_prompts == 2 and run.generation_batch_size == 4
    (batch,) = calls                                   # one generation batch: both orders, two answers each
    assert len(batch) == 4 and len({first for first, _p in batch}) == 2
    assert all(p is not None and 0.0 <= p <= 1.0 for _f, p in batch)
    assert "frac_reward_zero_std" in run.curve[0]
    assert run.versions["trl"] == metadata.version("trl") and run.versions["peft"] == metadata.version("peft")


def test_citation_evaluation_counts_what_the_answers_cite(tiny_causal, monkeypatch):
    from mirage.attribution.generation import Generated
    from mirage.tune import evaluate

    examples, _ = build_gold([XOR / "train.jsonl", XOR / "val.jsonl"])   # supporting [1], [1], [1]
    # The tiny random model writes no citation; these are the answers a citing model would write (a stand-in for
    # generation only: prompts, parsing and scoring are the real ones).
    answers = iter(["Srikakulam [1].", "It is not banned. It is allowed [2][5].", "Two hundred."])
    monkeypatch.setattr(evaluate, "generate_answer",
                        lambda lm, ids, cfg: Generated(ids=[1, 2], text=next(answers), logits=torch.zeros(2, 1)))
    report = evaluate.evaluate_citations(Mirage(tiny_causal), examples, max_new_tokens=4)
    assert report.n_answers == 3 and report.answers_cited == pytest.approx(2 / 3)
    assert report.sentences_cited == pytest.approx(2 / 4) and report.invalid_citations == 1   # [5] of 2 documents
    assert report.precision == pytest.approx((1 + 0 + 0) / 3) and report.recall == pytest.approx(1 / 3)
    assert [a["cited"] for a in report.answers] == [[1], [2], []]
    assert report.exact_match == pytest.approx(1 / 3)                # only "Srikakulam" holds its reference


def test_the_judge_summary_counts_pairs_by_hand():
    from mirage.scoring.faithfulness import FaithfulnessResult
    from mirage.tune.evaluate import summarize_judge

    empty = FaithfulnessResult(id="x", model="m", n_docs=3, sentences=[], n_passes=0).to_dict()
    rows = [  # answer-level sets over 3 documents each
        {"cited": [1], "mirage_cited": [1, 2], "supporting": [1], "self_citations_attributed": [[1]],
         "mirage_citations": [[1, 2]], "faithfulness": empty},
        {"cited": [], "mirage_cited": [3], "supporting": [3], "self_citations_attributed": [[]],
         "mirage_citations": [[3]], "faithfulness": empty},
        {"cited": [2], "mirage_cited": [2], "supporting": None, "self_citations_attributed": [[2]],
         "mirage_citations": [[2]], "faithfulness": empty},
        {"cited": [1], "supporting": [1], "judge_error": "empty answer"},
    ]
    s = summarize_judge(rows, [3, 3, 3, 3], "learned")
    assert (s.n_attributed, s.n_labelled, s.errors) == (3, 2, 1)
    # labelled pairs: self 1 0 0 | 0 0 0 ; mirage 1 1 0 | 0 0 1 ; labels 1 0 0 | 0 0 1
    assert s.self_vs_labels["agreement"] == pytest.approx(100 * 5 / 6)
    assert s.self_vs_labels["recall"] == pytest.approx(50.0) and s.self_vs_labels["precision"] == pytest.approx(100.0)
    assert s.mirage_vs_labels["agreement"] == pytest.approx(100 * 5 / 6)
    assert s.mirage_vs_labels["recall"] == pytest.approx(100.0)
    # citing document 1 everywhere: 1 0 0 | 1 0 0 against 1 0 0 | 0 0 1
    assert s.first_vs_labels["agreement"] == pytest.approx(100 * 4 / 6) and s.first_vs_labels["precision"] == 50.0
    # self vs mirage over all 9 pairs: they differ on document 2 of the first answer and 3 of the second
    assert s.self_vs_mirage["pair_agreement"] == pytest.approx(100 * 7 / 9)
    assert s.self_vs_mirage["sentence_jaccard"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert -1.0 <= s.self_vs_mirage["kappa"] < 1.0


@pytest.mark.slow
def test_the_judged_evaluation_attributes_each_answer_and_resumes(embedded_mirage, monkeypatch, tmp_path):
    from mirage.attribution.generation import Generated
    from mirage.runs.store import StoreError
    from mirage.scoring.faithfulness import faithfulness
    from mirage.tune import evaluate
    from mirage.tune.data import TrainingExample
    from mirage.tune.evaluate import judge_config

    ex = TrainingExample(id="eiffel", source="test", question=SHORT_ITEM["question"], docs=SHORT_ITEM["docs"],
                         output="1889 [1]", citations=[[1]], supporting=[1])
    # A stand-in for generation only (the base model rarely cites): judging, faithfulness and scoring are real.
    monkeypatch.setattr(evaluate, "generate_answer",
                        lambda lm, ids, cfg: Generated(ids=[1, 2], text="1889 [1].", logits=torch.zeros(2, 1)))
    judge = judge_config(embedded_mirage.config, "smollm2-135m-instruct")
    assert judge.aggregation.rule == "likelihood"
    assert judge.aggregation.learned_model == "shipped:smollm2-135m-instruct"  # not this install's folder
    store = tmp_path / "base.answers.jsonl"
    report = evaluate.evaluate_citations(embedded_mirage, [ex], judge=judge, store=store)
    (row,) = report.answers
    assert str(ROOT) not in store.read_text(encoding="utf-8")  # the stored answers name no folder of this machine
    res = embedded_mirage.attribute_item({**SHORT_ITEM, "output": "1889 [1]."}, config=judge)
    assert row["mirage_citations"] == [list(s.mirage_citations) for s in res.sentences]
    check = faithfulness(embedded_mirage, res)
    assert row["faithfulness"]["sentences"][0]["sets"]["selfcitation"]["drop"] == pytest.approx(
        check.sentences[0].sets["selfcitation"].drop, abs=1e-4)
    assert report.judge.n_attributed == 1 and report.judge.self_vs_labels["agreement"] == 100.0
    assert "self vs mirage" in report.to_text()
    # a rerun reads the stored answer back and generates nothing
    monkeypatch.setattr(evaluate, "generate_answer", lambda *a, **k: pytest.fail("regenerated a stored answer"))
    again = evaluate.evaluate_citations(embedded_mirage, [ex], judge=judge, store=store)
    assert again.answers == report.answers and again.judge == report.judge
    with pytest.raises(StoreError, match="other settings"):
        evaluate.evaluate_citations(embedded_mirage, [ex], max_new_tokens=7, store=store)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m-cite", "smollm2-135m-cite-follow"])
def test_a_shipped_citing_adapter_loads_offline_by_its_embedded_name(smollm2, name):
    from safetensors.torch import load_file

    from mirage.attribution.models import ModelLoadError, embedded_adapters, embedded_names, load_model
    from mirage.tune.adapters import apply_adapter, read_adapter_info, trained_prompt, training_record

    spec = embedded_adapters()[name]
    assert spec.base == "smollm2-135m-instruct" and name in embedded_names()
    info = read_adapter_info(spec.path)
    assert info.base_model == spec.base and info.training.get("questions")
    # shipped in fp16 and without the base model's own matrices (peft saves the embeddings an adapter targets)
    weights = load_file(str(spec.path / "adapter_model.safetensors"))
    assert {w.dtype for w in weights.values()} == {torch.float16} and not any("base_layer" in k for k in weights)
    # by its name, the records of its folder: the prompt it was trained with, the questions it saw
    assert trained_prompt(name) == trained_prompt(spec.path) and training_record(name) == info.training
    cite = load_model(name)
    assert cite.name == name and cite.use_chat_template
    by_hand = apply_adapter(copy.deepcopy(smollm2), spec.path)
    ids = smollm2.tokenizer("The Eiffel Tower was completed in 1889 [1].")["input_ids"]
    tuned = _logits(cite.model, ids)
    assert torch.equal(tuned, _logits(by_hand.model, ids))          # by name = the folder applied by hand
    assert not torch.allclose(tuned, _logits(smollm2.model, ids), atol=1e-3)   # and it is not the base model
    with pytest.raises(ModelLoadError, match=name):   # unknown names list it among the embedded ones
        load_model("no such model")


def test_a_lora_taken_from_a_full_fine_tuning_change_keeps_what_its_rank_holds(tiny_causal):
    """lora_from_change (mirage tune export DIR/model --rank R): each linear layer's change, tuned minus base, as a LoRA
    by truncated SVD. A change of rank 2 comes back whole at rank 2 (the merged weights are the tuned ones) and in part
    at rank 1; the base model's weights stay as they were."""
    from mirage.tune.adapters import lora_from_change

    base = copy.deepcopy(tiny_causal.model)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    tuned = {}
    for name, module in base.named_modules():
        if isinstance(module, torch.nn.Linear) and name != "lm_head":
            out_dim, in_dim = module.weight.shape
            change = torch.randn(out_dim, 2, generator=generator) @ torch.randn(2, in_dim, generator=generator)
            tuned[name + ".weight"] = module.weight.detach() + 0.01 * change
    assert len(tuned) == 14  # seven linear layers in each of the two blocks
    whole, kept = lora_from_change(copy.deepcopy(base), tuned, rank=2)
    assert kept == pytest.approx(1.0, abs=1e-6)
    merged = whole.merge_and_unload().state_dict()
    for key, weight in tuned.items():
        torch.testing.assert_close(merged[key], weight, atol=1e-5, rtol=1e-4)
    part, kept_1 = lora_from_change(copy.deepcopy(base), tuned, rank=1)
    assert 0.3 < kept_1 < 0.99
    merged_1 = part.merge_and_unload().state_dict()
    assert not all(torch.allclose(merged_1[k], w, atol=1e-5) for k, w in tuned.items())
    assert all(torch.equal(base.state_dict()[k], v) for k, v in before.items())


def _tiny_tied(tokenizer):
    """A tiny seeded Llama whose input and output embeddings are tied, as SmolLM2's are."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def _tuned_change(base, seed: int, *, rank: int = 6, embed_rank: int = 2) -> dict[str, torch.Tensor]:
    """``base``'s weights with a low-rank change on every linear layer and the embeddings, and changed norms."""
    generator = torch.Generator().manual_seed(seed)
    tuned = {}
    for name, module in base.named_modules():
        if isinstance(module, torch.nn.Linear) and name != "lm_head":
            out_dim, in_dim = module.weight.shape
            change = torch.randn(out_dim, rank, generator=generator) @ torch.randn(rank, in_dim, generator=generator)
            tuned[name + ".weight"] = module.weight.detach() + 0.01 * change
        elif type(module).__name__.endswith("RMSNorm"):
            tuned[name + ".weight"] = module.weight.detach() + 0.1 * torch.randn(module.weight.shape,
                                                                                 generator=generator)
    embed = base.model.embed_tokens.weight.detach()
    tuned["model.embed_tokens.weight"] = embed + 0.01 * (torch.randn(len(embed), embed_rank, generator=generator)
                                                         @ torch.randn(embed_rank, embed.shape[1], generator=generator))
    return tuned


def test_a_lora_taken_from_a_change_carries_tied_embeddings_and_norms(real_tokenizer, tmp_path):
    """lora_from_change with ``embed_rank`` and ``norms``, on a tiny model whose input and output embeddings are tied
    (as SmolLM2's): a rank-2 embedding change comes back whole in both, the norms' tuned weights whole, and the
    adapter survives save_adapter / apply_adapter (merged), without the base embedding matrix in its file."""
    from safetensors.torch import load_file

    from mirage.attribution.models import wrap_model
    from mirage.tune.adapters import apply_adapter, lora_from_change, save_adapter

    base = _tiny_tied(real_tokenizer)
    tuned = _tuned_change(base, 1)

    model, _kept = lora_from_change(copy.deepcopy(base), tuned, rank=6, embed_rank=2, norms=True)
    folder = tmp_path / "adapter"
    save_adapter(model, folder, base_name="tiny-tied")
    saved = load_file(str(folder / "adapter_model.safetensors"))
    assert not any("base_layer" in key for key in saved)            # the base embedding matrix is not shipped
    assert any("lora_embedding_A" in key for key in saved) and any("norm" in key for key in saved)
    lm = apply_adapter(wrap_model(copy.deepcopy(base), real_tokenizer, name="tiny-tied"), folder)
    merged = lm.model.state_dict()
    for key, weight in tuned.items():
        torch.testing.assert_close(merged[key], weight, atol=1e-5, rtol=1e-4)
    assert lm.model.lm_head.weight is lm.model.model.embed_tokens.weight     # still tied: the head changed too


def test_tune_export_takes_a_shippable_adapter_from_a_chain_of_full_fine_tuning_runs(real_tokenizer, tmp_path, capsys):
    """``mirage tune export DIR/model --rank R``: a LoRA on the model the chain's first stage was tuned from (a base
    folder here, as an embedded name is in use), not on the stage before, in fp16, with the chain and the share kept
    recorded; merged into the base it gives the last stage's weights. An adapter folder with --rank, or a model
    folder without it, is a one-line error."""
    from mirage.attribution.models import load_model
    from mirage.cli import main
    from mirage.tune.adapters import apply_adapter, base_record, read_adapter_info, save_tuned_model

    base = _tiny_tied(real_tokenizer)
    base.save_pretrained(tmp_path / "base")
    real_tokenizer.save_pretrained(tmp_path / "base")
    folders = {}
    previous = str(tmp_path / "base")
    for stage, seed in (("one", 1), ("two", 2)):   # stage two starts from stage one's model, as the shipped chain does
        lm = load_model(previous, dtype="float32")
        record = base_record(lm.model, previous)
        change = _tuned_change(base, seed, rank=2, embed_rank=1)
        start = lm.model.state_dict()
        lm.model.load_state_dict({k: start[k] + (v - base.state_dict()[k]) for k, v in change.items()}, strict=False)
        folders[stage] = save_tuned_model(lm, tmp_path / stage / "model", base=record,
                                          training={"questions": [stage]})
        previous = str(folders[stage])
    out = tmp_path / "ship"
    assert main(["tune", "export", str(folders["two"]), "--rank", "4", "--embed-rank", "2", "--norms",
                 "-o", str(out)]) == 0
    info = read_adapter_info(out)
    assert info.base_model == str(tmp_path / "base") and info.training["questions"] == ["two"]
    assert info.training["extracted"]["chain"] == [str(folders["one"]), str(tmp_path / "base")]
    assert info.training["extracted"]["linear_change_kept"] == pytest.approx(1.0, abs=1e-4)
    assert "1.000 of the linear layers' change kept" in capsys.readouterr().err
    merged = apply_adapter(load_model(str(tmp_path / "base"), dtype="float32"), out).model.state_dict()
    final = load_model(str(folders["two"]), dtype="float32").model.state_dict()
    for key in final:   # fp16 weights: equal to the last stage within fp16's rounding
        torch.testing.assert_close(merged[key], final[key], atol=2e-3, rtol=1e-3)
    assert main(["tune", "export", str(out), "--rank", "4", "-o", str(tmp_path / "again")]) == 2
    assert "is not one (no model.safetensors)" in capsys.readouterr().err
    assert main(["tune", "export", str(folders["two"]), "-o", str(tmp_path / "again")]) == 2
    assert "give --rank" in capsys.readouterr().err


def test_tune_card_writes_the_figures_of_the_reports_beside_cite_first_and_keeps_a_hand_written_readme(tmp_path,
                                                                                                     capsys):
    """``mirage tune card``: the card of a shipped adapter, every figure read from the reports it names (a follow
    report of the benchmarks, a tune eval report built here), cite-[1]'s on the same answers beside; a README it did
    not write stays; a --follow without LABEL= is a one-line error."""
    from mirage.cli import main

    folder = tmp_path / "adapter"
    shutil.copytree(ROOT / "mirage" / "assets" / "adapters" / "smollm2-135m-cite", folder)
    follow = ROOT / "benchmarks" / "results" / "tune_follow_smollm2" / "shipped_firu.json"
    report = json.loads(follow.read_text(encoding="utf-8"))
    answers = [{"cited": [2], "supporting": [2]}, {"cited": [1, 2], "supporting": [1]}, {"cited": [], "supporting": []}]
    evaluation = tmp_path / "eval.json"
    evaluation.write_text(json.dumps({"n_answers": 3, "precision": 0.75, "recall": 1.0, "f1": 0.8333,
                                      "exact_match": 0.5, "answers": answers}), encoding="utf-8")
    (folder / "README.md").write_text("# my notes\n", encoding="utf-8")
    judged = ROOT / "benchmarks" / "results" / "tune_follow_smollm2" / "base_val_judged.json"  # made with --judge
    args = ["tune", "card", str(folder), "--name", "smollm2-135m-cite", "--follow", f"fi/ru={follow}",
            f"judged={judged}", "--eval", f"toy={evaluation}"]
    assert main(args) == 2 and "was not written by mirage" in capsys.readouterr().err
    assert (folder / "README.md").read_text(encoding="utf-8") == "# my notes\n"
    (folder / "README.md").unlink()
    assert main(args) == 0
    card = (folder / "README.md").read_text(encoding="utf-8")
    own, first = report["self_citation"], report["cite_first"]
    assert (f"| fi/ru | {report['n_items']} | {100 * own['follow_rate']:.1f} ({100 * first['follow_rate']:.1f}) | "
            f"{100 * own['first_when_not_supporting']:.1f} ({100 * first['first_when_not_supporting']:.1f}) |") in card
    # mirage's citations of the same answers: from a judged report only
    row = next(line for line in card.splitlines() if line.startswith("| fi/ru |"))
    assert row.split(" | ")[-3] == "–"
    mirage_rate = json.loads(judged.read_text(encoding="utf-8"))["mirage"]["follow_rate"]
    row = next(line for line in card.splitlines() if line.startswith("| judged |"))
    assert row.split(" | ")[-3] == f"{100 * mirage_rate:.1f}" and "mirage follows" in card
    # cite-[1] on the two supported answers: P (0 + 1) / 2, R (0 + 1) / 2, F1 (0 + 1) / 2
    assert "| toy | 3 | 75.0 / 100.0 / 83.3 | 50.0 / 50.0 / 50.0 | 50.0 | `eval.json` |" in card
    assert '--model smollm2-135m-cite --prompt selfcitation' in card
    assert main(args) == 0   # its own card it replaces
    assert main(["tune", "card", str(folder), "--follow", str(follow)]) == 2
    assert "give LABEL=FILE" in capsys.readouterr().err


def test_a_tuned_model_is_prompted_in_its_trained_template_unless_a_prompt_is_chosen(tmp_path, capsys):
    """``smollm2-135m-cite-follow`` was trained in ``selfcitation_marked`` and follows the content only there (its
    permutation test in the plain prompt, ``cite_follow_plainprompt_val.json``): by its name, with no prompt chosen,
    ``mirage attribute`` and ``Mirage.from_pretrained`` use that template and say so; a ``--prompt``, a config
    file's prompt or a config of one's own wins, and the benchmark and bias commands keep their own prompts."""
    from mirage.attribution.models import trained_prompt_name
    from mirage.cli import build_parser
    from mirage.runs.experiment import ExperimentConfig

    name = "smollm2-135m-cite-follow"
    assert trained_prompt_name(name) == "selfcitation_marked"
    assert trained_prompt_name("smollm2-135m-cite") == "selfcitation"
    assert trained_prompt_name("smollm2-135m-instruct") is None and trained_prompt_name(str(tmp_path)) is None

    def prompt(*flags: str, command: str = "attribute") -> str:
        args = build_parser().parse_args(["attribute", "in.json", "-o", "o.jsonl", "--model", name, *flags])
        return ExperimentConfig.from_args(args, command=command).pipeline.prompt.name

    assert prompt() == "selfcitation_marked"
    assert "trained in the selfcitation_marked prompt" in capsys.readouterr().err
    assert prompt("--prompt", "selfcitation") == "selfcitation"
    config = tmp_path / "exp.yaml"
    config.write_text("prompt:\n  name: standard\n", encoding="utf-8")
    assert prompt("--config", str(config)) == "standard"
    assert prompt(command="xor-attriqa") == "standard"     # the XOR-AttriQA scorer's own prompt
    assert Mirage.from_pretrained(name).config.prompt.name == "selfcitation_marked"
    assert Mirage.from_pretrained(name, config=MirageConfig()).config.prompt.name == "selfcitation"


def test_tune_eval_with_an_adapter_and_no_peft_is_a_one_line_error(one_line_error, tmp_path, monkeypatch):
    """peft is installed here: the test makes its import fail in this process (``sys.modules["peft"] = None``)."""
    import sys

    monkeypatch.setitem(sys.modules, "peft", None)
    adapter = PACKAGE / "assets" / "adapters" / "smollm2-135m-cite"
    for command in ("eval", "follow"):
        line = one_line_error(["tune", command, "rows.jsonl", "--adapter", str(adapter),
                                        "-o", str(tmp_path / f"{command}.json")])
        assert "needs peft" in line and "pip install 'mirage-rag[tune]'" in line
