"""The permutation test (`mirage tune follow`): presentations, the follow rule, the baselines' exact expectations,
and a real run of the shipped citation adapter on XOR-AttriQA val rows."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mirage.tune.data import TrainingExample, xor_examples
from mirage.tune.follow import (
    FollowReport,
    follows,
    permutation_presentations,
    random_follow_probability,
    random_side,
    side_of,
    single_supporting,
)

ROOT = Path(__file__).resolve().parents[2]
VAL = ROOT / "tests" / "data" / "xor_attriqa_match" / "val.jsonl"  # a slice of XOR-AttriQA val (tests/data/README.md)
ADAPTER = ROOT / "mirage" / "assets" / "adapters" / "smollm2-135m-cite"


def _example(i: int, n_docs: int, support: list[int] | None) -> TrainingExample:
    docs = [{"title": "", "text": f"passage {i}.{d}"} for d in range(1, n_docs + 1)]
    return TrainingExample(id=f"q{i}", source="xor-attriqa", question=f"question {i}?", docs=docs,
                           output="Helsinki [1].", citations=[[1]], supporting=support)


def test_follows_needs_the_passage_and_at_most_one_other():
    assert follows({3}, 3) and follows({1, 3}, 3)
    assert not follows({1, 2, 3}, 3)
    assert not follows({1}, 3) and not follows(set(), 3)


def test_random_citer_expectation_matches_sampling():
    rng = random.Random(0)
    k = 5
    for c in range(k + 1):
        hits = sum(follows(set(rng.sample(range(1, k + 1), c)), rng.randint(1, k)) for _ in range(20000))
        assert abs(hits / 20000 - random_follow_probability(c, k)) < 0.015, c


def test_random_side_expectations_match_sampling():
    rng = random.Random(1)
    k, counts = 4, [1, 2, 3, 1, 0, 2]
    positions = [1, 2, 3, 4, 2, 3]
    expected = random_side(counts, positions, k)
    sampled = [side_of([set(rng.sample(range(1, k + 1), c)) for c in counts], positions, k) for _ in range(4000)]
    for name in ("follow_rate", "precision", "recall", "f1"):
        mean = sum(getattr(s, name) for s in sampled) / len(sampled)
        assert abs(mean - getattr(expected, name)) < 0.02, name


def test_cite_first_follows_only_at_position_one():
    positions = [p for _ in range(3) for p in range(1, 6)]
    side = side_of([{1}] * len(positions), positions, 5)
    assert side.follow_rate == pytest.approx(0.2)
    assert side.per_position == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert side.first_when_not_supporting == 1.0


def test_presentations_move_the_supporting_passage_and_keep_the_others_in_order():
    examples = [_example(0, 5, [2]), _example(1, 2, [1]), _example(2, 3, [1, 2]), _example(3, 4, None)]
    pres = permutation_presentations(examples, k=5, seed=7)
    assert {p.meta["follow"]["item"] for p in pres} == {"q0", "q1"}  # one supporting passage each
    for item in ("q0", "q1"):
        mine = [p for p in pres if p.meta["follow"]["item"] == item]
        assert [p.meta["follow"]["position"] for p in mine] == [1, 2, 3, 4, 5]
        support_text = next(e for e in examples if e.id == item).docs[next(
            e for e in examples if e.id == item).supporting[0] - 1]["text"]
        orders = []
        for p in mine:
            pos = p.meta["follow"]["position"]
            assert p.supporting == [pos] and p.docs[pos - 1]["text"] == support_text
            assert p.citations == [[pos]] and f"[{pos}]" in p.output
            orders.append([d["text"] for d in p.docs if d["text"] != support_text])
        assert all(o == orders[0] for o in orders)  # the other passages keep one order
    q1 = next(p for p in pres if p.meta["follow"]["item"] == "q1")
    assert q1.meta["follow"]["fillers"] == 3  # two passages of its own, three of other questions
    assert sum(not d["text"].startswith("passage 1.") for d in q1.docs) == 3
    # deterministic
    again = permutation_presentations(examples, k=5, seed=7)
    assert [p.docs for p in again] == [p.docs for p in pres]


def test_answer_kind_reads_yes_and_no_as_whole_words():
    from mirage.tune.follow import answer_kind

    assert [answer_kind(a) for a in ("Yes [1].", "no", " No, it is not.", "Nobel Prize", "1913", "yesterday")] == [
        "yes/no", "yes/no", "yes/no", "other", "other", "other"]


def test_the_report_splits_each_citers_row_by_answer_kind():
    """Two items, one answered yes, one by a name; a citer that follows the named one and cites [1] on the other:
    each kind's row is the follow rule over that kind's presentations, and the overall row holds both."""
    from mirage.tune.evaluate import CitationEval
    from mirage.tune.follow import follow_report

    yes = _example(0, 5, [2])
    yes.output = "Yes [1]."
    named = _example(1, 5, [3])
    pres = permutation_presentations([yes, named], k=5)
    cited = [[1] if p.meta["follow"]["item"] == "q0" else [p.meta["follow"]["position"]] for p in pres]
    answers = [{"id": p.id, "cited": c, "mirage_cited": [p.meta["follow"]["position"]]} for p, c in zip(pres, cited)]
    evaluation = CitationEval(model="m", n_answers=10, answers_cited=1.0, sentences_cited=1.0, invalid_citations=0,
                              precision=None, recall=None, f1=None, exact_match=None, seconds_per_answer=0.0,
                              max_new_tokens=8, answers=answers)
    report = follow_report(evaluation, pres, k=5, seed=0, mirage_rule="reference")
    assert report.item_kinds == {"q0": "yes/no", "q1": "other"}
    own = report.by_answer_kind["self_citation"]
    assert own["other"].follow_rate == 1.0
    assert own["yes/no"].follow_rate == pytest.approx(0.2)
    assert own["yes/no"].first_when_not_supporting == 1.0
    # the random citer of the same counts (one document each): 1/k on either kind
    assert report.by_answer_kind["random"]["yes/no"].follow_rate == pytest.approx(0.2)
    assert report.self_citation.follow_rate == pytest.approx(0.6)
    again = FollowReport.from_dict(json.loads(report.to_json()))
    assert again.by_answer_kind == report.by_answer_kind
    assert "| self-citation, yes/no answers (1 items) | 20.0 |" in again.to_markdown()
    # mirage's citations of the same answers, split the same way
    assert {kind: side.follow_rate for kind, side in again.by_answer_kind["mirage"].items()} == {"yes/no": 1.0,
                                                                                                "other": 1.0}
    assert "| mirage (reference), yes/no answers (1 items) | 100.0 |" in again.to_markdown()


def test_missed_citations_are_told_apart_by_where_the_answer_words_are():
    """A miss (a cited answer naming no supporting passage) whose words a cited passage holds answered from that
    passage; one whose words only an uncited passage holds cited the wrong one; one whose words no passage holds made
    its answer up; a yes/no answer has no words to look for. Hits, uncited answers and unlabelled rows are not
    checked."""
    from mirage.tune.evaluate import CitationEval, citation_misses, passages_holding

    texts = ["Helsinki is the capital of Finland.", "Turku was the capital until 1812.",
             "The Finnish parliament meets in Helsinki.", "Tampere lies between two lakes."]
    docs = [{"title": "", "text": t} for t in texts]

    def row(i: int, answer: str, cited: list[int], supporting: list[int] | None) -> tuple[dict, TrainingExample]:
        ex = TrainingExample(id=f"q{i}", source="xor-attriqa", question="What is the capital of Finland?", docs=docs,
                             output="Helsinki [1].", citations=[[1]], supporting=supporting)
        return {"id": ex.id, "answer": answer, "cited": cited, "supporting": supporting}, ex

    pairs = [row(0, "Helsinki [1].", [1], [1]),        # a hit
             row(1, "Turku [2].", [2], [1]),           # answered from passage 2 and cited it
             row(2, "The capital is Turku [4].", [4], [1, 3]),  # a sentence no passage holds
             row(3, "Turku [4].", [4], [3]),           # Turku is in passage 2 only, passage 4 cited
             row(4, "Oulu [2].", [2], [1]),            # in no passage
             row(5, "Yes [4].", [4], [1]),             # yes/no
             row(6, "Helsinki.", [], [1]),             # cites nothing: not checked
             row(7, "Turku [2].", [2], None)]          # no label: not checked
    answers, examples = [a for a, _ in pairs], [e for _, e in pairs]
    assert passages_holding("Helsinki [3]", docs) == [1, 3] and passages_holding("the Finnish parliament", docs) == [3]
    misses = citation_misses(answers, examples)
    assert (misses.n_checked, misses.n_missed, misses.first_supports) == (6, 5, 4)
    assert misses.ids == {"from_cited": ["q1"], "elsewhere": ["q3"], "nowhere": ["q2", "q4"], "yes_no": ["q5"]}
    assert (misses.from_cited, misses.elsewhere, misses.nowhere, misses.yes_no) == (1, 1, 2, 1)
    assert "5 of 6 cited answers name no supporting passage (4 where passage 1 supports)" in misses.to_text()
    evaluation = CitationEval(model="m", n_answers=8, answers_cited=0.875, sentences_cited=0.875,
                              invalid_citations=0, precision=None, recall=None, f1=None, exact_match=None,
                              seconds_per_answer=0.0, max_new_tokens=8, answers=answers, misses=misses)
    assert json.loads(evaluation.to_json())["misses"]["ids"]["elsewhere"] == ["q3"]
    assert "answer's words are in a cited passage in 1" in evaluation.to_text()


def test_too_few_passages_to_fill_is_an_error():
    with pytest.raises(ValueError, match="smaller k"):
        permutation_presentations([_example(0, 2, [1])], k=5)


def test_real_xor_val_rows_are_presented():
    examples, _, _ = xor_examples(VAL, for_evaluation=True)
    usable = single_supporting(examples)
    assert len(usable) == 2
    pres = permutation_presentations(usable, k=5, pool=examples)
    assert len(pres) == 10
    for p in pres:
        assert len(p.docs) == 5 and len({d["text"] for d in p.docs}) == 5


def _unseen_copy(tmp_path: Path) -> Path:
    """The shipped adapter with an empty record of training questions: it was trained on XOR-AttriQA val's supported
    answers, so tune eval/follow leave every usable row of the val slice out (as they should); the tests of the
    commands' mechanics judge it on them anyway."""
    import shutil

    adapter = tmp_path / "adapter"
    shutil.copytree(ADAPTER, adapter)
    info = json.loads((adapter / "mirage-adapter.json").read_text())
    info["training"]["questions"] = []
    (adapter / "mirage-adapter.json").write_text(json.dumps(info))
    return adapter


def test_the_shipped_adapter_leaves_out_the_val_questions_it_was_trained_on():
    from mirage.tune.adapters import read_adapter_info
    from mirage.tune.data import question_digest

    seen = set(read_adapter_info(ADAPTER).training["questions"])
    usable = single_supporting(xor_examples(VAL, for_evaluation=True)[0])
    assert usable and all(question_digest(ex.question) in seen for ex in usable)


@pytest.mark.slow
def test_follow_command_on_the_shipped_adapter(tmp_path, one_thread):
    out = tmp_path / "follow.json"
    adapter = _unseen_copy(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "mirage", "tune", "follow", str(VAL), "--adapter", str(adapter),
         "--limit", "2", "--ndocs", "3", "--judge", "--quiet", "-o", str(out)], capture_output=True, text=True,
        cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr
    report = FollowReport.from_dict(json.loads(out.read_text()))
    assert report.n_items == 2 and report.n_presentations == 6 and report.k == 3
    # judged: mirage's citations of the same answers, and the faithfulness check beside the table
    assert report.mirage is not None and report.judge is not None and report.judge.n_attributed == 6
    assert {"selfcitation", "random_selfcitation", "mirage"} <= set(report.judge.faithfulness["methods"])
    assert report.judge.to_text() in report.to_markdown()
    answers = [json.loads(line) for line in out.with_name("follow.answers.jsonl").read_text().splitlines()]
    assert len(answers) == 6
    # the self-citation row is the follow rule applied to the stored answers
    by_id = {a["id"]: a for a in answers}
    hits = [follows(by_id[i]["cited"], int(i.rsplit("pos", 1)[1])) for i in by_id]
    assert report.self_citation.follow_rate == pytest.approx(sum(hits) / 6)
    assert report.cite_first.follow_rate == pytest.approx(1 / 3)
    # the row split by the kind of reference answer covers every presentation once
    counts = Counter(report.item_kinds.values())
    assert sum(counts.values()) == 2
    for citer in ("self_citation", "random", "mirage"):
        overall = getattr(report, citer).follow_rate
        assert sum(side.follow_rate * counts[kind] for kind, side in report.by_answer_kind[citer].items()) == (
            pytest.approx(2 * overall))
    assert "| self-citation |" in run.stderr
    # a rerun reuses every answer
    again = subprocess.run(
        [sys.executable, "-m", "mirage", "tune", "follow", str(VAL), "--adapter", str(adapter),
         "--limit", "2", "--ndocs", "3", "--judge", "--quiet", "-o", str(out)], capture_output=True, text=True,
        cwd=ROOT, check=False)
    assert again.returncode == 0, again.stderr
    assert FollowReport.from_dict(json.loads(out.read_text())).to_dict() == report.to_dict()
    # the other rule on the same (greedy) answers, in its own report: the rules side by side
    ref_out = tmp_path / "follow_reference.json"
    ref = subprocess.run(
        [sys.executable, "-m", "mirage", "tune", "follow", str(VAL), "--adapter", str(adapter),
         "--limit", "2", "--ndocs", "3", "--judge-rule", "reference", "--quiet", "-o", str(ref_out)],
        capture_output=True, text=True, cwd=ROOT, check=False)
    assert ref.returncode == 0, ref.stderr
    by_rule = FollowReport.from_dict(json.loads(ref_out.read_text()))
    assert (report.mirage_rule, by_rule.mirage_rule) == ("likelihood", "reference")
    assert "--judge-rule reference" in by_rule.command and by_rule.judge.n_attributed == 6
    ref_answers = [json.loads(line) for line in ref_out.with_name("follow_reference.answers.jsonl").read_text()
                   .splitlines()]
    assert [a["answer"] for a in ref_answers] == [a["answer"] for a in answers]
    assert by_rule.self_citation.to_dict() == report.self_citation.to_dict()


def test_the_judge_rule_is_chosen_and_checked_before_a_model_loads():
    """judge_config: the default (the shipped classifier of the base model), each rule by name, the likelihood rule
    with another classifier, and one-line errors naming the flag where no classifier is known."""
    from mirage.config import ConfigError, MirageConfig
    from mirage.tune.evaluate import judge_config

    base = MirageConfig()
    assert judge_config(base, "smollm2-135m-instruct").aggregation.rule == "likelihood"
    assert judge_config(base, "out/tune/run/model") == base  # a tuned folder: no classifier ships, the config's rule
    assert judge_config(base, "smollm2-135m-instruct", rule="reference").aggregation.rule == "reference"
    # a tuned model's default judge is its base model's classifier: named BASE+ADAPTER, or an adapter shipped by name
    from mirage.tune.evaluate import judged_base

    assert judged_base("smollm2-135m-instruct+adapter") == judged_base("smollm2-135m-cite-follow") == \
        "smollm2-135m-instruct" == judged_base("smollm2-135m-instruct")
    assert judged_base("out/tune/run/model") == "out/tune/run/model"
    tuned = judge_config(base, "out/tune/run/model", rule="learned",  # the old name of the rule
                         learned_model="shipped:smollm2-135m-instruct")
    assert (tuned.aggregation.rule, tuned.aggregation.learned_model) == ("likelihood", "shipped:smollm2-135m-instruct")
    with pytest.raises(ConfigError, match="--judge-learned-model shipped:MODEL"):
        judge_config(base, "out/tune/run/model", rule="likelihood")
    with pytest.raises(ConfigError, match="goes with --judge-rule likelihood"):
        judge_config(base, "smollm2-135m-instruct", rule="reference", learned_model="shipped:smollm2-135m-instruct")
    with pytest.raises(ConfigError, match="aggregation.rule"):
        judge_config(base, "smollm2-135m-instruct", rule="no-such-rule")
    run = subprocess.run([sys.executable, "-m", "mirage", "tune", "follow", str(VAL), "--model", "no/such/folder",
                          "--limit", "1", "--judge-learned-model", "shipped:smollm2-135m-instruct", "-o",
                          "unused.json"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode != 0 and "Traceback" not in run.stderr and "--judge-rule likelihood" in run.stderr
    assert not (ROOT / "unused.json").exists()


def test_spread_positions_balances_the_supporting_passage_over_positions():
    from collections import Counter

    from mirage.tune.data import spread_positions

    examples = []
    for i in range(12):
        ex = _example(i, 1 + i % 4, [1 + i % (1 + i % 4)])
        ex.output, ex.citations = f"Helsinki [{ex.supporting[0]}].", [list(ex.supporting)]
        examples.append(ex)
    examples.append(_example(99, 3, []))  # supported by nothing: stays uncited
    examples[-1].output, examples[-1].citations = "Helsinki.", [[]]
    out = spread_positions(examples, k=5, seed=3)
    assert len(out) == 5 * len(examples)
    firsts = Counter(ex.supporting[0] for ex in out if ex.supporting)
    assert firsts == Counter({p: 12 for p in range(1, 6)})  # every position equally often
    for ex in out:
        assert len(ex.docs) == 5 and len({d["text"] for d in ex.docs}) == 5
        source = next(e for e in examples if e.question == ex.question)
        if source.supporting:
            moved = ex.docs[ex.supporting[0] - 1]["text"]
            assert moved == source.docs[source.supporting[0] - 1]["text"]  # the citation follows the passage
            assert ex.citations == [ex.supporting] and f"[{ex.supporting[0]}]" in ex.output
        else:
            assert ex.citations == [[]] and "[" not in ex.output
    uncited = [ex for ex in out if ex.question == "question 99?"]
    assert len({tuple(d["text"] for d in ex.docs) for ex in uncited}) > 1  # shuffled orders


def test_tune_data_spread_positions_command(tmp_path):
    out = tmp_path / "spread.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "mirage", "tune", "data", "gold", "--xor", str(ROOT / "tests" / "data" /
         "xor_attriqa_match" / "train.jsonl"), "--spread-positions", "3", "-o", str(out)],
        capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and len(rows) % 3 == 0
    assert all(len(r["docs"]) == 3 for r in rows)
    assert {r["supporting"][0] for r in rows} == {1, 2, 3}


def test_tune_data_exclude_keeps_the_held_out_questions_unseen(tmp_path):
    """Training on the split an evaluation judges: `--exclude` leaves the held-out questions out, as examples and as
    the filler passages of --spread-positions, and says how many it left out."""
    held, out = tmp_path / "held.jsonl", tmp_path / "train.jsonl"
    mirage = [sys.executable, "-m", "mirage", "tune", "data", "gold", "--xor", str(VAL)]
    first = subprocess.run([*mirage, "--limit", "1", "-o", str(held)], capture_output=True, text=True, cwd=ROOT,
                           check=False)
    assert first.returncode == 0, first.stderr
    run = subprocess.run([*mirage, "--exclude", str(held), "--spread-positions", "3", "-o", str(out)],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr
    held_rows = [json.loads(line) for line in held.read_text().splitlines()]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(held_rows) == 1 and rows
    assert "1 of " in run.stderr and "ask a question of --exclude and are left out" in run.stderr
    held_questions = {r["question"] for r in held_rows}
    held_passages = {d["text"] for r in held_rows for d in r["docs"]}
    assert not held_questions & {r["question"] for r in rows}
    assert not held_passages & {d["text"] for r in rows for d in r["docs"]}
    everything = subprocess.run([*mirage, "--spread-positions", "3", "-o", str(tmp_path / "all.jsonl")],
                                capture_output=True, text=True, cwd=ROOT, check=False)
    assert everything.returncode == 0, everything.stderr
    assert len((tmp_path / "all.jsonl").read_text().splitlines()) == len(rows) + 3


def test_tune_data_exclude_of_a_file_that_is_no_training_set_says_so(tmp_path):
    bad = tmp_path / "notes.jsonl"
    bad.write_text('{"question": 3}\n')
    run = subprocess.run([sys.executable, "-m", "mirage", "tune", "data", "gold", "--xor", str(VAL), "--exclude",
                          str(bad), "-o", str(tmp_path / "out.jsonl")], capture_output=True, text=True, cwd=ROOT,
                         check=False)
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert "--exclude" in run.stderr and "no example in it" in run.stderr
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.slow
def test_eval_leaves_out_the_questions_the_adapter_was_trained_on(tmp_path, one_thread):
    """An adapter records the questions it saw (mirage-adapter.json's training.questions): tune eval and follow
    leave them out, so a model is never judged on its training questions. Here a copy of the shipped adapter is
    told it saw the slice's first two questions (with other documents, as spread training data presents them)."""
    from mirage.tune.data import question_digest

    rows = xor_examples(VAL, for_evaluation=True)[0]
    adapter = _unseen_copy(tmp_path)
    info = json.loads((adapter / "mirage-adapter.json").read_text())
    info["training"]["questions"] = [question_digest(ex.question) for ex in rows[:2]]
    (adapter / "mirage-adapter.json").write_text(json.dumps(info))
    out = tmp_path / "eval.json"
    run = subprocess.run(
        [sys.executable, "-m", "mirage", "tune", "eval", str(VAL), "--adapter", str(adapter), "--max-new-tokens", "2",
         "--quiet", "-o", str(out)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr
    assert f"2 of {len(rows)} rows ask a question of the training data (the adapter's)" in run.stderr
    answered = [json.loads(line)["id"] for line in out.with_name("eval.answers.jsonl").read_text().splitlines()]
    assert answered == [ex.id for ex in rows[2:]]


def test_follow_on_rows_the_adapter_was_all_trained_on_says_so_in_one_line():
    """The shipped adapter saw every supported answer of the val slice: nothing is left to judge, and the command
    says which field and what to do, before loading any model."""
    run = subprocess.run([sys.executable, "-m", "mirage", "tune", "follow", str(VAL), "--adapter", str(ADAPTER), "-o",
                          "unused.json"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert "no row of" in run.stderr and "was not trained on" in run.stderr and "fi,ru" in run.stderr
    assert not (ROOT / "unused.json").exists()


def test_the_selection_halves_split_the_questions_once_and_eval_and_follow_take_them():
    """The selection protocol's halves: every question in exactly one, fixed by its text (not its whitespace, file or
    documents), both halves used; ``--half`` keeps one half's rows, said on stderr, before any model loads."""
    from mirage.runs.experiment import HALVES, question_half

    rows = xor_examples(VAL, for_evaluation=True)[0]
    halves = {h: [ex for ex in rows if question_half(ex.question) == h] for h in HALVES}
    assert all(halves.values()) and sum(map(len, halves.values())) == len(rows)
    assert {question_half(f"  {ex.question}\n") for ex in rows} <= set(HALVES)
    assert all(question_half(f"  {ex.question}\n") == question_half(ex.question) for ex in rows)
    for verb in ("eval", "follow"):
        for half in HALVES:
            run = subprocess.run([sys.executable, "-m", "mirage", "tune", verb, str(VAL), "--model", "no/such/folder",
                                  "--half", half, "-o", "unused.json"], capture_output=True, text=True, cwd=ROOT,
                                 check=False)
            assert run.returncode != 0 and "Traceback" not in run.stderr
            assert f"{len(halves[half])} of {len(rows)} rows ask a question of the {half} half" in run.stderr
    bad = subprocess.run([sys.executable, "-m", "mirage", "tune", "follow", str(VAL), "--half", "first", "-o",
                          "unused.json"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert bad.returncode != 0 and "--half" in bad.stderr and "choosing" in bad.stderr
    assert not (ROOT / "unused.json").exists()


FOLLOW_RUNS = ROOT / "benchmarks" / "results" / "tune_follow_smollm2"


def _answers(name: str) -> list[dict]:
    return [json.loads(line) for line in (FOLLOW_RUNS / f"{name}.answers.jsonl").read_text().splitlines()]


def test_compare_follow_reads_the_reports_and_pairs_their_items():
    """Two published runs on the same 16 val items: each run's rates are its report's (every item has k
    presentations, so the mean over items is the mean over presentations), the change is their difference, the
    interval holds the point, and a run against itself changes by exactly 0."""
    from mirage.tune.follow import compare_follow

    ref, other = _answers("full2ep_spread5_val"), _answers("full_spread5_val")
    row = compare_follow(ref, other, name="one epoch", reference_name="two epochs")
    ref_report = json.loads((FOLLOW_RUNS / "full2ep_spread5_val.json").read_text())["self_citation"]
    report = json.loads((FOLLOW_RUNS / "full_spread5_val.json").read_text())["self_citation"]
    assert row.n_items == 16
    for measure in ("follow_rate", "first_when_not_supporting", "f1"):
        assert row.values[measure] == pytest.approx(report[measure])
        assert row.changes[measure] == pytest.approx(report[measure] - ref_report[measure])
        lo, hi = row.intervals[measure]
        assert lo <= row.values[measure] <= hi and lo < hi
        lo, hi = row.change_intervals[measure]
        assert lo <= row.changes[measure] <= hi
    same = compare_follow(ref, ref)
    assert same.changes["follow_rate"] == 0 and same.change_intervals["follow_rate"] == [0.0, 0.0]
    assert compare_follow(ref, other[:5]).n_items == 1  # only the items both answered are paired


def test_the_same_answer_is_read_without_its_citations():
    """answer_stable: the share of an item's presentations giving its most frequent answer, the citation marks,
    case and spacing aside (a model reading the content moves only its citation)."""
    from mirage.tune.follow import compare_follow

    def presentation(item: str, position: int, answer: str) -> dict:
        return {"id": f"{item}-pos{position}", "supporting": [position], "cited": [position], "answer": answer}

    moved = [presentation("a", p, f"Helsinki [{p}]") for p in range(1, 6)]
    moved[1]["answer"] = "helsinki  [2]"
    changing = [presentation("b", 1, "Helsinki [1]"), presentation("b", 2, "Turku [2]"),
                presentation("b", 3, "Turku [3]"), presentation("b", 4, "Oulu [4]"),
                presentation("b", 5, "Helsinki [5]")]
    row = compare_follow(moved + changing, moved + changing)
    assert row.values["answer_stable"] == pytest.approx((1.0 + 0.4) / 2)
    assert row.values["follow_rate"] == 1.0


def test_compare_follow_refuses_answers_that_are_no_permutation_test():
    from mirage.tune.follow import compare_follow

    ref = _answers("full2ep_spread5_val")
    with pytest.raises(ValueError, match="not a permutation-test presentation"):
        compare_follow(ref, [{"id": "xor-val-1", "cited": [1], "supporting": [1]}])
    with pytest.raises(ValueError, match="share no item"):
        compare_follow(ref, [{"id": "other-pos2", "cited": [2], "supporting": [2]}])


def test_the_follow_page_shows_the_paired_changes(tmp_path):
    """benchmarks/compare_follow.py writes the comparison, and the folder's page (mirage report) shows it."""
    import shutil

    from mirage.views.pages import write_page

    for name in ("full2ep_spread5_val", "full_spread5_val"):
        for suffix in (".json", ".answers.jsonl"):
            shutil.copy(FOLLOW_RUNS / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_follow.py"),
                          str(tmp_path / "full2ep_spread5_val.json"), str(tmp_path / "full_spread5_val.json"),
                          "--out", str(tmp_path / "changes.json")], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    page = write_page(tmp_path).read_text()
    assert "## Paired changes (`changes.json`)" in page
    row = next(line for line in page.splitlines() if line.startswith("| `full_spread5_val.json` | all | 16 |"))
    assert row.count("[") == 8  # every measure and every change has its interval
    # reports written before the split carry no item kinds: the overall rows alone
    assert len(json.loads((tmp_path / "changes.json").read_text())["follow_changes"]) == 2


def test_the_paired_changes_are_split_by_answer_kind(tmp_path):
    """Reports that carry their items' answer kinds: compare_follow.py adds each kind's rows, on that kind's items
    alone, and a run's rate there is its report's row for that kind."""
    names = ("trainval_spread5_full_val", "marked_gentle_trainval_val")
    out = tmp_path / "changes.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_follow.py"),
                          *[str(FOLLOW_RUNS / f"{n}.json") for n in names], "--out", str(out)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())["follow_changes"]
    report = FollowReport.from_dict(json.loads((FOLLOW_RUNS / f"{names[1]}.json").read_text()))
    counts = Counter(report.item_kinds.values())
    assert [(r["name"], r["answer_kind"]) for r in rows] == [
        (f"{n}.json", kind) for kind in ("all", "other", "yes/no") for n in names]
    for row in rows[2:]:
        assert row["n_items"] == counts[row["answer_kind"]]
        if row["name"] == f"{names[1]}.json":
            side = report.by_answer_kind["self_citation"][row["answer_kind"]]
            assert row["values"]["follow_rate"] == pytest.approx(side.follow_rate)
            assert row["values"]["first_when_not_supporting"] == pytest.approx(side.first_when_not_supporting)


def test_compare_follow_names_a_first_file_that_is_no_report(tmp_path):
    import shutil

    shutil.copy(FOLLOW_RUNS / "base_val.answers.jsonl", tmp_path / "x.answers.jsonl")
    (tmp_path / "x.json").write_text('{"follow_changes": []}')
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_follow.py"), str(tmp_path / "x.json"),
                          "--out", str(tmp_path / "out.json")], capture_output=True, text=True, check=False)
    assert run.returncode != 0 and "x.json is not a permutation-test report" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("verb", ["eval", "follow"])
def test_a_reports_command_parses_back_to_the_options_it_ran_with(verb):
    """The command a ``tune eval`` / ``follow`` report records is made from the options class (no hand-kept flag
    list): parsed by mirage's own parser it gives every option the run had, defaults explicit; the device and
    ``--quiet``, which change no answer, are left out, and machine paths are made relative."""
    import shlex

    from mirage.cli import build_parser
    from mirage.options import options_from_args
    from mirage.tune.cli import report_command
    from mirage.tune.options import EvalOptions, FollowOptions

    argv = ["tune", verb, "xor-attriqa-match:train", "xor-attriqa-match:val", "--adapter", "out/a b/adapter",
            "--limit", "3", "--half", "choosing", "--exclude", "t1.jsonl", "t2.jsonl", "--judge-rule",
            "selfcite_answer", "--quiet", "--device", "cpu", "-o", "runs/r.json"]
    args = build_parser(argv).parse_args(argv)
    words = shlex.split(report_command(args, verb))
    assert words[:3] == ["mirage", "tune", verb] and "--quiet" not in words and "--device" not in words
    again = build_parser(words[1:]).parse_args(words[1:])
    options = FollowOptions if verb == "follow" else EvalOptions
    assert options_from_args(options, again) == options_from_args(options, args, quiet=False)
    assert ["--max-new-tokens", "48"] == words[words.index("--max-new-tokens"):][:2]  # a default, explicit
