"""mkdocs hooks: what the site can generate, it generates, so the pages cannot drift from the code and the results.

- The CLI reference renders ``mirage.cli.build_parser()`` (every command of ``cli.commands()``, every flag).
- The configuration reference renders the config dataclasses' fields, defaults, flags and help.
- Each command's cost, the benchmark tables and the README's headline table are read from ``benchmarks/results``.
- The notebooks come in with their outputs: the executed copies ``tests/docs/test_notebooks.py`` writes to
  ``out/notebooks/`` when they match the stored notebook cell for cell, the stored (output-free) ones otherwise.
- Every run folder of ``benchmarks/results`` joins the site under ``results/`` with its page (``README.md``, written
  by ``mirage report DIR``) and its files.

A page asks for generated text with a marker on a line of its own, e.g. ``<!-- mirage:cli -->``,
``<!-- mirage:config -->``, ``<!-- mirage:cost attribute -->``, ``<!-- mirage:bench attribution -->``,
``<!-- mirage:headline -->``, ``<!-- mirage:compare fidelity/fields_val.json -->``,
``<!-- mirage:self-match self_match -->``, ``<!-- mirage:card smollm2-135m-cite-follow -->``,
``<!-- mirage:bias-follow DIR DIR -->``, ``<!-- mirage:methods DIR -->``,
``<!-- mirage:methods-faithfulness DIR -->``, ``<!-- mirage:methods-cost -->``,
``<!-- mirage:modules -->``. ``tests/docs/test_docs_site.py`` builds
the site and reads these pages back.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import inspect
import json
import logging
import re
import statistics
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = ROOT / "out" / "notebooks"
#: Where a run folder's files land in the site: ``results/<folder>/``.
RESULTS_URI = "results"
MARKER = re.compile(r"^<!-- mirage:([a-z-]+)(?: ([^>]*?))? -->$", re.MULTILINE)

log = logging.getLogger("mkdocs.hooks.mirage")


# ---------------------------------------------------------------------------------------------------------------- util
def _cell(text: Any) -> str:
    """A value as one markdown table cell (pipes escaped, newlines folded)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    """Inline code that may hold ``|`` (a markdown table would split a code span there, or show its escape)."""
    return f"<code>{html.escape(text).replace('|', '&#124;')}</code>"


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _read(rel: str) -> Any:
    return json.loads((RESULTS / rel).read_text(encoding="utf-8"))


def _num(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}f}{unit}"


def _source(rel: str) -> str:
    """A link to a results file from a page at the site's top level."""
    return f"[`{rel}`]({RESULTS_URI}/{rel})"


# ------------------------------------------------------------------------------------------------------------ the CLI
def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("mirage",)):
    """``(path, parser, help)`` for every command and subcommand, depth first, in ``--help`` order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield path + (name,), sub, helps.get(name) or ""
                yield from _parsers(sub, path + (name,))


def _argument_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            name = ", ".join(f"`{o}`" for o in action.option_strings)
            if action.nargs != 0:
                name += " " + _code(formatter._format_args(action,
                                                           formatter._get_default_metavar_for_optional(action)))
        else:
            name = _code(formatter._format_args(action, formatter._get_default_metavar_for_positional(action)))
        what = formatter._expand_help(action) if action.help else ""
        if action.choices is not None and not isinstance(action.choices, dict):
            what += f" (one of: {', '.join(map(str, action.choices))})"
        rows.append([name, _shown_default(action), what])
    return rows


#: A default the help states: ``… (default: 200)``, ``…; default: X``, ``Default on a CPU: …``,
#: ``en: … (…, default)``.
HELP_DEFAULT = re.compile(r"\(default:? ((?:[^()]|\([^()]*\))+)\)|[;,] default:? (.+?)\)?$|Default (on .*)$"
                          r"|^(\w+):? [^;()]*\([^()]*, default\)")


def _shown_default(action: argparse.Action) -> str:
    """An option's default for the CLI reference: argparse's; else, where the flag stands for a config field
    (``config_default``, :func:`mirage.runs.experiment.add_experiment_args`), the field's; else what the help says.
    Empty for a switch, a required argument, or an option whose default is "not given"."""
    if action.nargs == 0 or action.required:
        return ""
    default = action.default
    if default is None:
        default = getattr(action, "config_default", None)
    if default is None or default == argparse.SUPPRESS:
        said = HELP_DEFAULT.search(" ".join((action.help or "").split()))
        return next((g for g in said.groups() if g), "") if said else ""
    if isinstance(default, (str, Path)) and str(default).startswith(f"{ROOT}/"):
        default = Path(default).relative_to(ROOT).as_posix()  # a packaged file, not this machine's path
    if isinstance(default, (list, tuple)):
        return f"`{' '.join(map(str, default))}`" if default else ""
    return f"`{default}`"


def cli_reference() -> str:
    """Every ``mirage`` command and subcommand with its arguments, from the parser itself, and what it costs."""
    from mirage.cli import build_parser

    parser = build_parser()
    out = ["`mirage --help` lists the commands; `mirage COMMAND --help` the options below. Top-level options:", "",
           table(["argument", "default", "what"], _argument_rows(parser))]
    for path, sub, help_text in _parsers(parser):
        depth = len(path)
        out += ["", f"{'#' * min(depth, 4)} `{' '.join(path)}`", ""]
        if help_text:
            out += [help_text[0].upper() + help_text[1:] + ("" if help_text.endswith(".") else "."), ""]
        usage = " ".join(sub.format_usage().split())
        out += ["```text", usage.removeprefix("usage: "), "```", ""]
        rows = _argument_rows(sub)
        if rows:
            out.append(table(["argument", "default", "what"], rows))
        if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):  # a command, not a group
            out += ["", f"**What it costs.** {COSTS.get(' '.join(path[1:]), _not_measured)()}"]
    renamed = renamed_flags()
    if renamed:
        note = ("One name per concept across commands: these old spellings still work, say on stderr that they are "
                "renamed, and will go.")
        out += ["", "## Renamed flags", "", note, "", table(["command", "old", "now"], renamed)]
    return "\n".join(out)


def renamed_flags() -> list[list[str]]:
    """``[command, old spelling, flag]`` of every old spelling a command still takes (``renamed_from``,
    :class:`mirage.options.RenamedFlag`), from the parser itself."""
    from mirage.cli import build_parser
    from mirage.options import RenamedFlag

    return [[f"`{' '.join(path)}`", f"`{old}`", f"`{action.new}`"] for path, sub, _help in _parsers(build_parser())
            for action in sub._actions if isinstance(action, RenamedFlag) for old in action.option_strings]


def cli_commands() -> list[str]:
    """Every command path of the parser (``mirage score xor-attriqa``, …): what the CLI page must show."""
    from mirage.cli import build_parser

    return [" ".join(path) for path, _sub, _help in _parsers(build_parser())]


# ------------------------------------------------------------------------------------------------- the configuration
def _attribute_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment above each field of ``cls``'s source."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    out, pending = {}, []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        match = re.match(r"([a-z_][a-z0-9_]*)\s*:", stripped)
        if match and pending:
            out[match.group(1)] = " ".join(pending)
        pending = []
    return out


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            return f"a `{type(value).__name__}`"
    else:
        return "required"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`"


def _literal_choices(hint: Any) -> list[str]:
    """The values of a ``Literal`` type (or of an optional one), else none."""
    if typing.get_origin(hint) is typing.Literal:
        return [str(v) for v in typing.get_args(hint)]
    return [c for arg in typing.get_args(hint) for c in _literal_choices(arg)] if typing.get_args(hint) else []


def config_classes() -> list[tuple[str, type]]:
    """``(heading, class)`` of every config dataclass the reference shows, in reading order."""
    from mirage.bias.protocol import BiasConfig
    from mirage.config import AggregationConfig, CCIConfig, CTIConfig, GenerationConfig, MirageConfig, PromptConfig
    from mirage.runs.experiment import ExperimentConfig
    from mirage.tune.config import LoraSettings, RewardSettings, TrainSettings, TuneConfig

    return [("MirageConfig", MirageConfig), ("prompt", PromptConfig), ("generation", GenerationConfig),
            ("cti", CTIConfig), ("cci", CCIConfig), ("aggregation", AggregationConfig),
            ("ExperimentConfig", ExperimentConfig), ("bias", BiasConfig), ("TuneConfig", TuneConfig),
            ("lora", LoraSettings), ("train", TrainSettings), ("reward", RewardSettings)]


def config_reference() -> str:
    """A table per config class: each field's type, default, flag and meaning, from the dataclasses."""
    out = []
    for heading, cls in config_classes():
        out += [f"### `{heading}`" + ("" if heading == cls.__name__ else f" (`{cls.__module__}.{cls.__name__}`)"), ""]
        doc = inspect.getdoc(cls) or ""
        if doc:
            out += [doc, ""]
        comments = _attribute_comments(cls)
        hints = typing.get_type_hints(cls)
        rows = []
        for f in dataclasses.fields(cls):
            what = f.metadata.get("help", comments.get(f.name, "")).replace("%%", "%")
            choices = _literal_choices(hints.get(f.name))
            if choices:
                what += f" (one of: {', '.join(f'`{c}`' for c in choices)})"
            flag = f"`{f.metadata['flag']}`" if "flag" in f.metadata else ""
            rows.append([f"`{f.name}`", _code(str(f.type)), _default(f), flag, what])
        out += [table(["field", "type", "default", "flag", "what"], rows), ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ costs, from results
def _attribution_rows(rel: str) -> tuple[dict, list[list[str]]]:
    data = _read(rel)
    rows = []
    for r in data["rows"]:
        ratio = r.get("attribution_over_generation")
        rows.append([r["id"], r["answer_tokens"], r["context_tokens"], r["selected"], _num(r["mirage_s"], 2, " s"),
                     _num(r["reference_s"], 1, " s"), _num(r["speedup"], 1, "×"), _num(r.get("generation_s"), 2, " s"),
                     _num(ratio, 2, "×"), _num(r["mirage_peak_mb"] / 1024, 2, " GiB"),
                     "yes" if r.get("same_selected") and r.get("same_citations") else "no"])
    return data, rows


def _machine(data: dict) -> str:
    threads = data.get("torch_threads", data.get("threads"))
    where = data.get("device_name") or data.get("machine") or data.get("device")
    return f"{where} ({data.get('device', 'cpu')}" + (f", {threads} thread{'s' * (threads != 1)})" if threads else ")")


def bench_attribution() -> str:
    """The attribution benchmark on the CPU and on the GPU (``bench_attribution.py``)."""
    out = []
    for rel in ("attribution.json", "attribution_cci_bf16_baseline.json", "attribution_cci_bf16.json",
                "gpu/attribution_gpu.json"):
        data, rows = _attribution_rows(rel)
        precision = f", CCI in {data['cci_precision']}" if data.get("cci_precision", "model") != "model" else ""
        commit = ""
        if data.get("commit"):
            head, _, changed = data["commit"].partition("+")
            commit = f", the code of commit `{head[:7]}`" + (" with uncommitted changes" if changed else "")
        out += [f"On {_machine(data)}, {data['model']}{precision}{commit}, from {_source(rel)} (`{data['command']}`):",
                "",
                table(["case", "answer tokens", "context tokens", "selected", "mirage", "reference", "speedup",
                       "generation", "attribution / generation", "peak added", "same tokens and citations"], rows),
                ""]
    return "\n".join(out)


def bench_precision() -> str:
    """Attribution time per precision variant on the CPU and on the GPU (``bench_precision.py``)."""
    out = []
    for rel in ("precision.json", "gpu/precision_gpu.json"):
        data = _read(rel)
        base = data["variants"]["float32"]["total_s"]
        gen = sum(data["generation_s"])
        rows = [[name, v["dtype"], v["cci_precision"], v["threads"], _num(v["total_s"], 2, " s"),
                 _num(v["total_s"] / base, 2), _num(v["total_s"] / gen, 1, "×")]
                for name, v in data["variants"].items()]
        intro = (f"{data.get('device', 'cpu')} ({data.get('machine', '')}), {data['model']}, answers of "
                 f"{', '.join(map(str, data['answer_tokens']))} tokens, from {_source(rel)}:")
        out += [intro, "",
                table(["variant", "dtype", "CCI precision", "threads", "attribution, all answers", "of float32",
                       "attribution / generation"], rows), ""]
    return "\n".join(out)


def bench_xor_scoring() -> str:
    """The XOR-AttriQA scorer's runs on the CPU and on the GPU (``bench_xor_scoring.py``)."""
    out = []
    for rel in ("xor_scoring.json", "xor_scoring_limit30.json", "gpu/xor_scoring_gpu_fp32.json",
                "gpu/xor_scoring_gpu.json"):
        if not (RESULTS / rel).exists():
            continue
        data = _read(rel)
        rows = [[run, _num(s, 1, " s"), _num(data.get("speedup", {}).get(run), 2, "×")]
                for run, s in data["seconds"].items()]
        where = f"{data.get('device_name', 'CPU')}, {data.get('dtype', 'float32')}, {data.get('threads')} threads"
        intro = (f"{where}: {data['model']}, first {data['limit']} rows of each file ({data['test_items']} test "
                 f"answers), from {_source(rel)}:")
        out += [intro, "", table(["run", "seconds", "against every row"], rows), ""]
    return "\n".join(out)


def bench_xor_commands() -> str:
    """Whole commands against the reference procedure (``bench_xor_scoring.py --commands``)."""
    rel = "xor_commands.json"
    if not (RESULTS / rel).exists():
        return "Not measured yet: `python benchmarks/bench_xor_scoring.py xor-attriqa-match:fi --commands --limit 6`."
    data = _read(rel)
    rows = [[run, _code(data["commands"][run]), _num(s, 1, " s"),
             _num(data["reference_over"].get(run), 2, "×") if run != "reference" else "1.00×"]
            for run, s in data["seconds"].items()]
    intro = (f"{data.get('threads') or 'default'} threads: {data['model']}, first {data['limit']} rows of "
             f"{_code(data['data'])}, each command in its own process"
             + (f", the median of {data['repeats']} rounds" if data.get("repeats", 1) > 1 else "")
             + f", from {_source(rel)}:")
    out = [intro, "", table(["command", "as run", "seconds", "reference / this"], rows), ""]
    rounds = data.get("rounds", {})
    if len(rounds.get("reference", [])) > 1:  # the spread a median hides: the ratio round by round
        per_round = [
            f"{run} " + ", ".join(_num(ref / s, 2, "×") for ref, s in zip(rounds["reference"], seconds))
            for run, seconds in rounds.items() if run != "reference"]
        out += [f"Round by round, reference / this: {'; '.join(per_round)}.", ""]
    compute = data.get("compute_only")
    if compute:
        seconds = compute["seconds"]
        out += [(f"The model work alone, each procedure in a process of its own on a model loaded untimed (the same "
                 f"{compute['rows']} rows, after an untimed one): the reference {_num(seconds['reference'], 1, ' s')}, "
                 f"`--settings ex` {_num(seconds['paper_settings'], 1, ' s')}: "
                 f"{_num(compute['reference_over_paper_settings'], 2, '×')}, the most the whole commands' ratio "
                 "could reach were interpreter start, imports, loading and evaluation free."), ""]
    return "\n".join(out)


def _cost_attribute() -> str:
    parts = []
    for rel in ("attribution.json", "gpu/attribution_gpu.json"):
        data = _read(rel)
        rows = [r for r in data["rows"] if r.get("sweep") is None]
        times = [r["mirage_s"] for r in rows]
        ratios = [r["attribution_over_generation"] for r in rows if r.get("attribution_over_generation")]
        parts.append(f"on {_machine(data)}, {min(times):.2f}–{max(times):.2f} s per answer of "
                     f"{min(r['answer_tokens'] for r in rows)}–{max(r['answer_tokens'] for r in rows)} tokens"
                     + (f" ({min(ratios):.2f}–{max(ratios):.2f}× its generation time)" if ratios else "")
                     + f" ({_source(rel)})")
    return f"Attribution of {_read('attribution.json')['model']}'s answers: " + "; ".join(parts) + \
        ". Tables: [benchmarks](benchmarks.md#speed)."


def _cost_xor() -> str:
    parts = []
    for rel in ("xor_scoring.json", "gpu/xor_scoring_gpu_fp32.json"):
        data = _read(rel)
        per = data["median_seconds_per_test_item_by_answer_tokens"]
        run = "learned_only" if "learned_only" in next(iter(per.values())) else "after"
        medians = [v[run] for v in per.values() if v.get(run) is not None]
        parts.append(f"on {data.get('device_name', 'a CPU')} ({data.get('dtype', 'float32')}, {data['threads']} "
                     f"threads), a median {min(medians):.2f}–{max(medians):.2f} s per test answer "
                     f"(`{run}` run, {_source(rel)})")
    return "Scoring XOR-AttriQA with " + _read("xor_scoring.json")["model"] + ": " + "; ".join(parts) + \
        ". Tables: [benchmarks](benchmarks.md#speed)."


def _cost_tune(stage: str) -> Callable[[], str]:
    files = {"sft": "tune_smollm2_sft/sft_*.json", "reward": "tune_smollm2_reward/reward_*.json",
             "eval": "tune_smollm2_*/eval_*fi_ru60.json"}[stage]

    def cost() -> str:
        by_device: dict[str, list[str]] = {"CPU": [], "GPU": []}
        for path in sorted(RESULTS.glob(files)):
            data = json.loads(path.read_text(encoding="utf-8"))
            rel = path.relative_to(RESULTS).as_posix()
            torch = data.get("versions", {}).get("torch", "")
            device = "CPU" if torch.endswith("+cpu") else "GPU"
            if "runtime_s" in data:
                by_device[device].append(
                    f"{data['steps']} steps"
                    + (f" over {data['n_train']} examples" if data.get("n_train") else "")
                    + f" in {data['runtime_s'] / 60:.0f} min at {data['peak_rss_mb'] / 1024:.1f} GiB peak"
                    + f" ({_source(rel)})")
            elif "seconds_per_answer" in data:
                by_device[device].append(f"{data['seconds_per_answer']:.2f} s per answer of {data['model']} "
                                         f"({_source(rel)})")
        return " ".join(f"On a {device}: " + "; ".join(parts) + "." if parts else
                        f"No {device} run of this stage is in `benchmarks/results`." for device, parts in
                        by_device.items())
    return cost


def _not_measured() -> str:
    return "No file in `benchmarks/results` times this command on a CPU or a GPU yet."


#: The cost line of each command path (after ``mirage``), generated from the results files.
COSTS: dict[str, Callable[[], str]] = {
    "attribute": _cost_attribute,
    "score xor-attriqa": _cost_xor,
    "score eli5": lambda: "Each answer is generated, then attributed as by `mirage attribute` (see its cost).",
    "bias": lambda: "Each generation is attributed as by `mirage attribute` (see its cost); " + _not_measured(),
    "tune sft": _cost_tune("sft"),
    "tune reward": _cost_tune("reward"),
    "tune eval": _cost_tune("eval"),
}


def protocol_overview(folder: str) -> str:
    """A bias protocol run's overview (``folder/protocol.md``, which ``mirage bias-protocol`` writes from the
    studies' results), without its title."""
    rel = f"{folder}/protocol.md"
    lines = (RESULTS / rel).read_text(encoding="utf-8").splitlines()
    body = "\n".join(lines[1:] if lines and lines[0].startswith("# ") else lines).strip()
    return f"{body}\n\nFrom {_source(rel)}."


def bias_follow(folders: str) -> str:
    """Does each citation set follow the relevant document, across bias runs on the same questions
    (``<!-- mirage:bias-follow DIR DIR … -->``): each run's self-citation and MIRAGE rows of its ``follow``
    (:class:`mirage.bias.results.BiasFollow`), named by its model and, where the study marked the documents'
    sentences, the mark; and the random citer of its self-citation's counts."""
    from mirage.bias.results import BiasStudyResult
    from mirage.bias.tables import follow_table

    rows, sources, ks = [], [], set()
    for folder in folders.split():
        result = BiasStudyResult.from_dict(_read(f"{folder}/results.json"))
        if result.follow is None:
            raise ValueError(f"{folder}/results.json has no follow summary; run mirage report on it again")
        mark = result.config.get("sentence_mark")
        name = f"`{result.model}`" + (f", sentences marked `{mark.strip()}`" if mark else "")
        rows += [(f"{name}: self-citation", result.follow.self_citation)]
        rows += [(f"{name}: MIRAGE", result.follow.mirage)] if result.follow.mirage is not None else []
        rows += [(f"{name}: random, self-citation's count", result.follow.random)]
        ks.add(result.follow.k)
        sources.append(f"[`{folder}`]({RESULTS_URI}/{folder}/README.md)")
    if len(ks) != 1:
        raise ValueError(f"bias-follow: the runs {folders} have different numbers of documents {sorted(ks)}")
    return f"{follow_table(rows, ks.pop())}\n\nFrom the vanilla answers of {', '.join(sources)}."


#: What each tuning evaluation file evaluates (``benchmarks/results/tune_smollm2_*/eval_<name>_fi_ru60.json``).
TUNE_RUNS = {"base": "base model", "3epochs": "SFT, 3 epochs (shipped as `smollm2-135m-cite`)",
             "shuffled": "SFT, shuffled documents", "internals": "SFT, self-distilled (mirage's citations)",
             "16steps": "SFT + reward stage, 16 steps", "epoch": "SFT + reward stage, 1 epoch",
             "marked_yesno": "full SFT in three stages, the last over the gold answers asked as yes/no questions "
                             "(follows on the permutation test)",
             "cite_follow": "that model as a rank-64 LoRA (shipped as `smollm2-135m-cite-follow`)"}


def tune_tables() -> str:
    """The tuning evaluations side by side: how the models cite, and how their citations and mirage's compare with
    the labels, the cite-[1] baseline and random sets (``mirage tune eval --judge``; a run evaluated without it has
    the first table's row alone)."""
    from mirage.bias.metrics import mean_citation_set_prf

    cite, judged = [], []
    for name, label in TUNE_RUNS.items():
        found = sorted(RESULTS.glob(f"tune_smollm2_*/eval_{name}_fi_ru60.json"))
        if not found:
            continue
        rel = found[0].relative_to(RESULTS).as_posix()
        d = _read(rel)
        run = f"[{label}]({RESULTS_URI}/{rel})"
        cite.append([run, _num(100 * d["answers_cited"]), _num(100 * d["sentences_cited"]), d["invalid_citations"],
                     " / ".join(_num(100 * d[k]) for k in ("precision", "recall", "f1")),
                     " / ".join(_num(100 * v) for v in mean_citation_set_prf(d["answers"], cite_first=True)),
                     _num(100 * d["exact_match"]), _num(d["seconds_per_answer"], 2, " s")])
        j = d.get("judge")
        if not j:
            continue
        vs = [" / ".join(_num(j[who][k]) for k in ("agreement", "f1", "balanced_accuracy"))
              for who in ("self_vs_labels", "mirage_vs_labels", "first_vs_labels")]
        m = j["faithfulness"]["methods"]
        drops = [f"{_num(m[a]['drop'], 2)} vs {_num(m[f'random_{a}']['drop'], 2)} (n={m[a]['n_sentences']})"
                 for a in ("selfcitation", "mirage")]
        pairs = j["self_vs_mirage"]
        judged.append([run, *vs, f"{_num(pairs['pair_agreement'])} / {_num(pairs['kappa'], 3)}", *drops])
    return "\n".join([
        table(["model", "answers cited %", "sentences cited %", "invalid ids", "P / R / F1 per answer %",
               "cite [1]: P / R / F1 %", "exact match %", "per answer"], cite), "",
        table(["model", "self vs labels: agr. / F1 / bal. acc.", "mirage vs labels", "cite [1] vs labels",
               "self vs mirage: agr. / κ", "drop (nats): self vs random", "drop (nats): mirage vs random"], judged)])


def results_text(rel: str) -> str:
    """A text file a command wrote from its results (``table.txt``), verbatim in a text block."""
    body = (RESULTS / rel).read_text(encoding="utf-8").rstrip()
    return f"```text\n{body}\n```\n\nFrom {_source(rel)}."


#: Names of the peers' rows (``peers/peers.json``), beside ``mirage.scoring.tables.SETTING_NAMES``.
PEER_NAMES = {"contextcite_ex": "ContextCite, EX-style rule (score ≥ item mean + 1 std)",
              "contextcite_cal_agreement": "ContextCite, calibrated for agreement",
              "contextcite_cal_f1": "ContextCite, calibrated for F1"}


def xor_table(folder: str) -> str:
    """Every setting of an XOR-AttriQA run (``folder/results.json``, and its peers' rows when ``peers/`` is there):
    agreement per language, then F1, balanced accuracy and ROC-AUC averaged over the languages."""
    from mirage.scoring.tables import SETTING_NAMES

    rel = f"{folder}/results.json"
    data = _read(rel)
    sources = [(data, rel)]
    peers_rel = f"{folder}/peers/peers.json"
    if (RESULTS / peers_rel).exists():
        peers = _read(peers_rel)
        sources.append(({m: {k: v for k, v in peers[m].items() if k in PEER_NAMES} for m in
                         ("agreement", "f1", "balanced_accuracy", "roc_auc")}, peers_rel))
    rows = []
    for source, _rel in sources:
        for key, agreement in source["agreement"].items():
            avg = [source[m].get(key, {}).get("avg") for m in ("f1", "balanced_accuracy")]
            rows.append([{**SETTING_NAMES, **PEER_NAMES}.get(key, key),
                         " / ".join(_num(agreement.get(lang)) for lang in ("fi", "ru", "avg")),
                         _num(avg[0]), _num(avg[1]), _num(source["roc_auc"].get(key, {}).get("avg"), 3)])
    lines = [table(["setting", "agreement fi / ru / avg", "F1", "bal. acc.", "ROC-AUC"], rows), "",
             "From " + " and ".join(_source(r) for _s, r in sources) + "."]
    if len(sources) > 1 and "contextcite" in peers:
        lines[-1] += (f" ContextCite took {peers['contextcite']['seconds_per_item']:.1f} s per answer; its thresholds "
                      f"were calibrated on {peers['calibration_items']} `val` items.")
    return "\n".join(lines)


def methods_table(folder: str) -> str:
    """The document attribution methods of a ``--methods`` run (``folder/results.json``), best ROC-AUC first, beside
    the strongest baselines of the same answers: agreement, F1 and balanced accuracy (averaged over the languages)
    under each rule, ROC-AUC, and each method's mean passes and seconds per answer, with its time as a multiple of
    MIRAGE's (``mirage_cci``) in the same results file."""
    from mirage.scoring.tables import SETTING_NAMES, classifier_settings, methods_table_rows
    from mirage.scoring.xor_report import XorAttriQAReport

    rel = f"{folder}/results.json"
    data = _read(rel)
    report = XorAttriQAReport.from_dict(data)
    found = methods_table_rows(report)

    def avg(metric: str, key: str, digits: int = 1) -> str:
        return _num(data[metric].get(key, {}).get("avg"), digits)

    base = next((r.seconds for r in found if r.method == "mirage_cci"), None)
    auc = {r.method: r.averages["roc_auc"] or 0.0 for r in found if r.rule == "ex"}
    rows = [[SETTING_NAMES.get(key, key), "", avg("agreement", key), avg("f1", key), avg("balanced_accuracy", key),
             avg("roc_auc", key, 3), "", ""]
            for key in ("nli_orig", "nli_mt", "learned", *classifier_settings(report), "cite_none")
            if key in data["agreement"]]
    for r in sorted(found, key=lambda r: -auc.get(r.method, 0.0)):  # stable: rules stay in order
        ratio = f" ({r.seconds / base:.2f}×)" if r.seconds and base else ""
        rows.append([_code(r.method), r.label, _num(r.averages["agreement"]), _num(r.averages["f1"]),
                     _num(r.averages["balanced_accuracy"]), _num(r.averages["roc_auc"], 3) if r.rule == "ex" else "″",
                     _num(r.passes), (_num(r.seconds, 2) + ratio) if r.rule == "ex" else ""])
    return "\n".join([table(["method", "rule", "agreement %", "F1 %", "balanced accuracy %", "ROC-AUC",
                              "passes / answer", "s / answer (× MIRAGE)"], rows), "", f"From {_source(rel)}."])


def methods_cost(rel: str = "methods_cost.json") -> str:
    """Each document method's cost per answer on short and on long answers (``benchmarks/methods_cost.py``): mean
    answer tokens, passes and seconds (wall and CPU) per answer, and the long answer's seconds as a multiple of the
    short one's, slowest on long answers first."""
    if not (RESULTS / rel).exists():
        return "Not measured yet: `python benchmarks/methods_cost.py --limit 1 --threads 2 -o " \
               f"benchmarks/results/{rel}`."
    data = _read(rel)
    summary = data["summary"]

    def passes(cost: dict[str, Any]) -> str:
        parts = [f"{_num(cost[k], 1)} {name}" for k, name in (("forward_passes", "fwd"), ("backward_passes", "bwd"),
                                                            ("jvp_passes", "jvp")) if cost.get(k)]
        return ", ".join(parts) or "0"

    rows = []
    for name, by in sorted(summary.items(), key=lambda kv: -kv[1].get("long", {}).get("seconds", 0.0)):
        short, long = by.get("short", {}), by.get("long", {})
        ratio = long["seconds"] / short["seconds"] if short.get("seconds") and long.get("seconds") else None
        rows.append([_code(name), passes(short) if short else "–", _num(short.get("seconds"), 2),
                     passes(long) if long else "–", _num(long.get("seconds"), 2), _num(long.get("cpu_seconds"), 1),
                     _num(ratio, 1, "×")])
    tokens = {length: statistics.fmean(r["answer_tokens"] for r in data["rows"] if r["answers"] == length)
              for length in ("short", "long") if any(r["answers"] == length for r in data["rows"])}
    count = {length: len({r["item"] for r in data["rows"] if r["answers"] == length}) for length in tokens}
    intro = (f"{data['device']}, {data['threads']} threads, {data['model']}: one run of each method per answer after "
             f"an untimed one, on {count.get('short', 0)} short answer(s) of {_num(tokens.get('short'), 0)} tokens on "
             f"average and {count.get('long', 0)} long one(s) of {_num(tokens.get('long'), 0)}, from {_source(rel)}:")
    return "\n".join([intro, "", table(["method", "short: passes", "short: s", "long: passes", "long: s",
                                        "long: CPU s", "long / short"], rows), ""])


def methods_faithfulness(folder: str) -> str:
    """Each document method's faithfulness in a ``--methods`` run that scored the references
    (:func:`mirage.scoring.xor_methods.method_faithfulness`): rank agreement with the same model's exact Shapley
    values and leave-one-out, and the drop / keep of the answer's log-probability for its top passage beside a random
    one, ordered by Spearman with Shapley."""
    rel = f"{folder}/results.json"
    methods = _read(rel).get("methods") or {}
    found = {name: entry["faithfulness"] for name, entry in methods.items() if entry.get("faithfulness")}
    rows = [[_code(name), _num(f["spearman"].get("shapley"), 2), _num(f["top1"].get("shapley")),
             _num(f["spearman"].get("leave_one_out"), 2), _num(f["top1"].get("leave_one_out")),
             f"{_num(f.get('drop_top1'), 3)} / {_num(f.get('drop_random'), 3)}",
             f"{_num(f.get('keep_top1'), 3)} / {_num(f.get('keep_random'), 3)}"]
            for name, f in sorted(found.items(), key=lambda kv: -(kv[1]["spearman"].get("shapley") or -2.0))]
    answers = max((f.get("answers", 0) for f in found.values()), default=0)
    return "\n".join([table(["method", "Spearman with Shapley", "top-1 = Shapley's %", "Spearman with LOO",
                              "top-1 = LOO's %", "drop: top-1 / random", "keep: top-1 / random"], rows), "",
                      f"On the {answers} answers with two or more passages. From {_source(rel)}."])


# ---------------------------------------------------------------------------------------------- the headline table
#: (what, model and view, results folder, file in it, setting): the README's and the site's headline rows.
HEADLINE = [
    ("passage-likelihood classifier", "smollm2-135m-instruct, English text", "xor_attriqa_smollm2_en",
     "results.json", "learned"),
    ("passage-likelihood classifier, agreement operating point", "smollm2-135m-instruct, English text",
     "xor_attriqa_smollm2_en", "results.json", "learned_agreement"),
    ("passage-likelihood classifier", "gemma3-270m, original fi / ru text", "xor_attriqa_gemma3_native/learned",
     "results.json", "learned"),
    ("MIRAGE-EX top-3 (the paper's rule)", "smollm2-135m-instruct, English text", "xor_attriqa_firu_target_prob",
     "results.json", "ex_top3"),
    ("MIRAGE-EX top-3, the authors' scripts (`--preset authors`)", "smollm2-135m-instruct, English text",
     "xor_attriqa_firu_authors", "results.json", "ex_top3"),
    ("ContextCite, EX-style rule", "smollm2-135m-instruct, English text", "xor_attriqa_smollm2_en",
     "peers/peers.json", "contextcite_ex"),
    ("NLI judge, original fi / ru text (11B)", "–", "xor_attriqa_smollm2_en", "results.json", "nli_orig"),
    ("NLI judge, machine-translated to English (11B)", "–", "xor_attriqa_smollm2_en", "results.json", "nli_mt"),
    ("cite no passage", "–", "xor_attriqa_smollm2_en", "results.json", "cite_none"),
]


def headline_table(link_prefix: str = "benchmarks/results/") -> str:
    """XOR-AttriQA fi + ru passage attribution against the human labels, each row read from its results file and
    linked to its results page (``link_prefix`` + folder + ``/README.md``)."""
    rows = []
    for what, model, folder, name, key in HEADLINE:
        data = _read(f"{folder}/{name}")
        auc = data["roc_auc"].get(key, {}).get("avg")
        page = (RESULTS / folder / name).parent.relative_to(RESULTS).as_posix()  # the page beside the file
        rows.append([f"[{what}]({link_prefix}{page}/README.md)", model,
                     _num(data["agreement"][key]["avg"]), _num(data["f1"][key]["avg"]),
                     _num(data["balanced_accuracy"][key]["avg"]), _num(auc, 3)])
    return table(["setting", "model, text", "agreement %", "F1 %", "balanced accuracy %", "ROC-AUC"], rows)


def compare_table(rel: str) -> str:
    """Runs side by side (``benchmarks/compare_xor_runs.py``'s JSON): per run and setting, what the run changed,
    F1, balanced accuracy, ROC-AUC and agreement, each with its change from the first run, and the paired bootstrap's
    95 % interval of the pooled changes where the runs wrote ``pairs.jsonl``; settings the runs did not compute are
    left out."""
    data = _read(rel)
    fields = ("std_kind", "threshold_floor", "cci_target", "context", "calibrate_by", "prompt")
    base = {f: data["rows"][0].get(f) for f in fields}

    def changed(row: dict) -> str:
        diff = [f"{f}: {row.get(f)}" for f in fields if row.get(f) != base[f]]
        return ", ".join(diff) if diff else "–"

    def with_change(row: dict, measure: str) -> str:
        value, change = row.get(measure), row.get(f"{measure}_change")
        return _num(value) + ("" if change is None or row["run"] == data["rows"][0]["run"] else f" ({change:+.1f})")

    def interval(row: dict, measure: str) -> str:
        ci = row.get(f"pooled_{measure}_change_ci95")
        return "–" if not ci else f"{row[f'pooled_{measure}_change']:+.1f} [{ci[0]:+.1f}, {ci[1]:+.1f}]"

    head = ("run", "changes", "setting", "F1", "balanced accuracy", "ROC-AUC", "agreement",
            "pooled F1 change [95 %]", "pooled bal. acc. change [95 %]")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in data["rows"]:
        if all(row.get(m) is None for m in ("f1", "balanced_accuracy", "roc_auc", "agreement")):
            continue  # a setting the runs did not compute (--settings ex)
        lines.append("| " + " | ".join([row["run"], changed(row), row["setting"],
                                         *(with_change(row, m) for m in ("f1", "balanced_accuracy", "roc_auc",
                                                                         "agreement")),
                                         interval(row, "f1"), interval(row, "balanced_accuracy")]) + " |")
    return "\n".join(lines) + (f"\n\nFrom {_source(rel)} (split `{data['split']}`; "
                               f"changes from `{data['rows'][0]['run']}`).")


def self_match_table(rel: str) -> str:
    """The self-match checks below ``rel`` (each run folder's ``self_match.json``, ``mirage score xor-attriqa
    --self-match``): per model, prompt and data, the test rows checked and kept (the folder page's table)."""
    from mirage.views.pages.scoring import self_match_overview

    def link(run: Path) -> str:
        return f"{RESULTS_URI}/{run.relative_to(RESULTS).as_posix()}/README.md"

    return (self_match_overview(RESULTS / rel, link)
            + f"\n\nFrom the `self_match.json` of each folder in [`{rel}`]({RESULTS_URI}/{rel}/README.md).")


# ------------------------------------------------------------------------------------------------------ the notebooks
def _sources(path: Path) -> list[str]:
    return [c["source"] if isinstance(c["source"], str) else "".join(c["source"])
            for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]


def notebook_source(name: str) -> Path:
    """The notebook the site shows: the tests' executed copy when it has the stored notebook's cells, else the
    stored one (without outputs)."""
    stored, executed = NOTEBOOKS / name, EXECUTED / name
    if executed.exists() and _sources(executed) == _sources(stored):
        return executed
    log.info("notebook %s: no executed copy matching it in %s (run tests/docs/test_notebooks.py); showing it without "
             "outputs", name, EXECUTED)
    return stored


# -------------------------------------------------------------------------------------------------------- mkdocs hooks
def adapter_card(name: str) -> str:
    """A shipped adapter's model card (``mirage/assets/adapters/NAME/README.md``, which ``mirage tune card`` writes
    from its evaluations), its title and marker line dropped, its results files linked to their pages."""
    from mirage.attribution.models import embedded_adapters

    lines = (embedded_adapters()[name].path / "README.md").read_text(encoding="utf-8").splitlines()
    body = "\n".join(line for line in lines if not line.startswith(("<!--", "# ")))
    for rel in sorted({p.relative_to(RESULTS).as_posix() for p in RESULTS.glob("tune_*/*.json")}):
        body = body.replace(f"`{Path(rel).name}`", f"[`{Path(rel).name}`]({RESULTS_URI}/{rel})")
    return body.strip() + f"\n\nFrom `mirage/assets/adapters/{name}/README.md`."


def _first_sentence(path: Path) -> str:
    """The opening of a module's docstring as plain markdown: its first paragraph up to the first ". " (or what comes
    before its first ": ", when that is at least five words), with reStructuredText roles and double backquotes made
    inline code."""
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    para = " ".join(doc.split("\n\n", 1)[0].split())
    para = re.sub(r":[a-z]+:`~?([^`]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", para).replace("``", "`")
    colon = para.find(": ")
    if colon > 0 and len(para[:colon].split()) >= 5:
        return para[:colon] + "."
    cut = re.search(r"(?<![ .][a-z])(?<!e\.g)(?<!i\.e)\.(?=\s)", para)
    return para[: cut.end()] if cut else para


def modules_table() -> str:
    """The package by stage (``<!-- mirage:modules -->``): ``STAGES`` and ``BESIDE`` of
    ``tests/project/test_architecture.py`` (read, not imported: the test checks that each module imports only modules
    of its own stage or earlier ones), each name with the first sentence of its docstring, and a package's modules
    that have no row of their own."""
    import ast

    tree = ast.parse((ROOT / "tests" / "project" / "test_architecture.py").read_text(encoding="utf-8"))
    lists = {node.target.id: ast.literal_eval(node.value) for node in tree.body
             if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
             and node.target.id in ("STAGES", "BESIDE")}
    rows_of = [*((str(k + 1), names) for k, names in enumerate(lists["STAGES"])), ("beside", lists["BESIDE"])]
    listed = {name for _stage, names in rows_of for name in names}
    package = ROOT / "mirage"
    rows = []
    for stage, names in rows_of:
        for name in names:
            path = package.joinpath(*name.split("."))
            source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
            inner = ""
            if path.is_dir():
                own = sorted(m.relative_to(package).with_suffix("").as_posix().replace("/", ".")
                             for m in path.rglob("*.py") if m.name != "__init__.py")
                own = [m for m in own if not any(m == n or m.startswith(n + ".") for n in listed if n != name)]
                inner = " (" + ", ".join(f"`{m[len(name) + 1:]}`" for m in own) + ")" if own else ""
            rows.append([stage, f"`{name}`{'/' if path.is_dir() else ''}{inner}", _first_sentence(source)])
    return table(["stage", "module", "what it is (its docstring's first sentence)"], rows)


GENERATORS: dict[str, Callable[..., str]] = {
    "cli": cli_reference, "config": config_reference, "modules": modules_table,
    "headline": lambda: headline_table(f"{RESULTS_URI}/"),
    "bench": lambda name: {"attribution": bench_attribution, "precision": bench_precision,
                           "xor-scoring": bench_xor_scoring, "xor-commands": bench_xor_commands}[name](),
    "cost": lambda command: COSTS[command](),
    "xor": xor_table,
    "methods": methods_table,
    "methods-faithfulness": methods_faithfulness,
    "methods-cost": methods_cost,
    "protocol": protocol_overview,
    "bias-follow": bias_follow,
    "tune": tune_tables,
    "text": results_text,
    "compare": compare_table,
    "self-match": self_match_table,
    "card": adapter_card,
}


def _results_page(folder: Path) -> str:
    """A stand-in page for a run folder that has no ``README.md`` yet: its files and folders, linked (their names as
    text, as a results page quotes them)."""
    from mirage.views.pages.core import link, text

    rel = folder.relative_to(RESULTS).as_posix()
    title = "benchmarks/results" if rel == "." else rel
    lines = [f"# {text(title)}", "", "No results page yet: `mirage report` writes one from the results.", ""]
    for p in sorted(folder.iterdir()):
        lines.append(f"- {link(text(p.name) + '/', p.name + '/README.md')}" if p.is_dir() else
                     f"- {link(text(p.name), p.name)}")
    return "\n".join(lines) + "\n"


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns the notebooks into pages
def on_files(files, config):
    """Add the notebooks (executed copies when current) and every results folder's files to the site."""
    from mkdocs.structure.files import File

    kw = {"dest_dir": config["site_dir"], "use_directory_urls": config["use_directory_urls"]}
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        source = notebook_source(path.name)
        files.append(File(f"notebooks/{path.name}", src_dir=str(source.parent.parent), **kw))
    for path in sorted(RESULTS.rglob("*")):
        if path.is_file():
            files.append(File(f"{RESULTS_URI}/{path.relative_to(RESULTS).as_posix()}", src_dir=str(RESULTS.parent),
                              **kw))
    for folder in [RESULTS, *sorted(p for p in RESULTS.rglob("*") if p.is_dir())]:
        if not (folder / "README.md").exists():
            rel = folder.relative_to(RESULTS).as_posix()
            uri = f"{RESULTS_URI}/README.md" if rel == "." else f"{RESULTS_URI}/{rel}/README.md"
            files.append(File.generated(config, uri, content=_results_page(folder)))
    return files



FOLDER_LINK = re.compile(r"\]\(([^()\s:#]+/)\)")


def _folder_links(markdown: str, page_dir: Path) -> str:
    """A results page's links to folders (``](gpu/)``, as GitHub shows them) point at the folder's page."""
    def fix(match: re.Match) -> str:
        target = match.group(1)
        return f"]({target}README.md)" if (page_dir / target).is_dir() else match.group(0)
    return FOLDER_LINK.sub(fix, markdown)


def _results_markdown(markdown: str) -> str:
    """A results page as the site shows it: no raw HTML from the run's values (``no_raw_html``; the page's mark, an
    HTML comment, stays), so no generated block either."""
    from mirage.views.pages.core import MARK, no_raw_html

    mark, rest = markdown.split("\n", 1) if markdown.startswith(MARK + "\n") else ("", markdown)
    return (mark + "\n" if mark else "") + no_raw_html(rest)


def on_page_markdown(markdown, page, config, files):
    """Replace each ``<!-- mirage:NAME ARG -->`` line by its generated text; in a results page, point links to
    folders at their pages, and let no raw HTML through (:func:`_results_markdown`)."""
    if page.file.src_uri.startswith(f"{RESULTS_URI}/"):
        markdown = _results_markdown(markdown)
        if page.file.abs_src_path:
            markdown = _folder_links(markdown, Path(page.file.abs_src_path).parent)
    def render(match: re.Match) -> str:
        name, arg = match.group(1), match.group(2)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_uri}: unknown generated block {name!r}; known: {sorted(GENERATORS)}")
        return GENERATORS[name](arg) if arg else GENERATORS[name]()
    return MARKER.sub(render, markdown)
