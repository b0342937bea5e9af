"""Make ``configs/bias/names_pool.yaml``: author names for the ``hai-names-pool`` metadata type, written by a model.

    python scripts/make_names_pool.py [--model smollm2-135m-instruct] [--n 100] [--seed 0] [-o FILE]

The attribution-bias study's names variant prompts an LLM for realistic author names. Here the local embedded model
is asked, one name per generation, for "a realistic full name (a first name and a last name) for a <woman|man> from
<country>", the cues cycling over genders and countries so that the names spread; the answer is started with
``Full name:`` so that the model writes the name rather than talking about it. Each generation is sampled with its own
seed (``--seed`` + attempt number), so the pool is reproducible on the same model and library versions.

A 135M model writes many things that are not names ("FULL SPEAKER", "E.J. Ahron", "El Comercio Azul"), so a candidate
is kept only when its first line, cut at the first punctuation mark, is exactly two capitalised words of Latin
letters (``Maria Rossi``; not all capitals, not ``McKinley``, not Greek script) that are not words of the cues'
countries (``Zlatka Poland``), the two words differ, the full name is new, and its first and last names have each
been used at most ``--max-repeats`` times before. Some kept names are still odd (invented or common words). The
file records the model, prompt, cues, sampling settings, seed, date, command and the filter with its counts.
"""

from __future__ import annotations

import argparse
import datetime
import re
import shlex
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROMPT = ("Invent a realistic full name (a first name and a last name) for a {GENDER} from {COUNTRY}. "
          "Answer with the name only.")
ANSWER_START = "Full name:"
GENDERS = ("woman", "man")
COUNTRIES = ("the United States", "the United Kingdom", "Ireland", "Canada", "Australia", "Germany", "France",
             "Italy", "Spain", "Portugal", "Brazil", "Mexico", "Argentina", "Poland", "Sweden", "Norway",
             "the Netherlands", "Greece", "Turkey", "Nigeria", "Kenya", "South Africa", "India", "the Philippines",
             "Indonesia", "Egypt", "Russia")
#: Words of the cues that the model likes to return as a last name ("Zlatka Poland").
PLACE_WORDS = frozenset(w.lower() for c in COUNTRIES for w in c.split() if w != "the")
FILTER = ("first line of the answer, cut at the first punctuation mark; kept when it is exactly two words, each "
          "alphabetic in the Latin script, capitalised and otherwise lower-case, and not a word of a cue's country, "
          "the two different, the full name new (case-insensitive), and its first and last names each used at most "
          "{MAX} times before. The 135M model's answers are mostly not names; these simple checks keep name-shaped "
          "answers, some of them still odd (invented or common words)")


def cues() -> list[tuple[str, str]]:
    """(gender, country) pairs, genders alternating within each country."""
    return [(gender, country) for country in COUNTRIES for gender in GENDERS]


def parse_name(text: str) -> tuple[str, str] | None:
    """(first, last) when the answer's first line, cut at the first punctuation mark, is two capitalised words of
    Latin letters that differ and are not words of the cues' countries; None otherwise."""
    head = re.split(r"[\n,.;:!?()\[\]{}\"*_/\\|<>=+#@&0-9]", text.strip(), maxsplit=1)[0]
    words = head.split()
    if len(words) != 2:
        return None
    for word in words:
        if not (len(word) >= 2 and word.isalpha() and word[0].isupper() and word[1:].islower()):
            return None
        if word.lower() in PLACE_WORDS or not all(unicodedata.name(c, "").startswith("LATIN") for c in word):
            return None
    if words[0].lower() == words[1].lower():
        return None
    return words[0], words[1]


def make_pool(lm: Any, *, n: int, seed: int, max_attempts: int, max_repeats: int, temperature: float,
              top_p: float, max_new_tokens: int, report: Callable[[dict[str, int]], None] | None = None,
              ) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """Up to ``n`` distinct (first, last) names sampled from ``lm``, and the counts of what was kept and why the rest
    was not (``report`` gets the counts every 50 attempts)."""
    from mirage.config import GenerationConfig
    from mirage.attribution.generation import generate_answer
    from mirage.attribution.tokenization import encode_chat, encode_plain

    tok = lm.tokenizer
    start = tok.encode(ANSWER_START, add_special_tokens=False)
    prompts = []
    for gender, country in cues():
        text = PROMPT.replace("{GENDER}", gender).replace("{COUNTRY}", country)
        if lm.use_chat_template:
            prompts.append(encode_chat(tok, [{"role": "user", "content": text}]) + start)
        else:
            prompts.append(encode_plain(tok, f"{text}\n\n{ANSWER_START}"))
    names: list[tuple[str, str]] = []
    seen: set[str] = set()
    firsts: dict[str, int] = {}
    lasts: dict[str, int] = {}
    counts = {"attempts": 0, "kept": 0, "not_a_name": 0, "duplicate": 0, "repeated_part": 0}
    for attempt in range(max_attempts):
        if len(names) >= n:
            break
        cfg = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, top_p=top_p,
                               seed=seed + attempt)
        text = generate_answer(lm, prompts[attempt % len(prompts)], cfg=cfg).text
        counts["attempts"] += 1
        if report is not None and counts["attempts"] % 50 == 0:
            report(counts)
        name = parse_name(text)
        if name is None:
            counts["not_a_name"] += 1
            continue
        first, last = name
        if f"{first} {last}".lower() in seen:
            counts["duplicate"] += 1
            continue
        if firsts.get(first, 0) >= max_repeats or lasts.get(last, 0) >= max_repeats:
            counts["repeated_part"] += 1
            continue
        seen.add(f"{first} {last}".lower())
        firsts[first] = firsts.get(first, 0) + 1
        lasts[last] = lasts.get(last, 0) + 1
        names.append(name)
        counts["kept"] += 1
    return names, counts


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(names: list[tuple[str, str]], provenance: dict[str, Any]) -> str:
    """The pool file: a comment, the provenance mapping and the names as quoted [first, last] pairs (quoted so that
    YAML never reads a name such as ``No`` as a boolean)."""
    import yaml

    lines = ["# Author names for the `hai-names-pool` metadata type (configs/bias/metadata.yaml): the first side's",
             "# labels are these names, the second side's the same names followed by \" [AI]\". Written by a model;",
             "# see `provenance` (re-make with the command it records).",
             yaml.safe_dump({"provenance": provenance}, sort_keys=False, allow_unicode=True, width=100).rstrip(),
             "names:"]
    lines += [f"  - [{_quoted(first)}, {_quoted(last)}]" for first, last in names]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="model that writes the names")
    p.add_argument("--n", type=int, default=100, help="names in the pool (default 100)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first generation; attempt i uses seed + i")
    p.add_argument("--max-attempts", type=int, default=3000, help="generations at most (default 3000)")
    p.add_argument("--max-repeats", type=int, default=2, help="times a first or last name may occur (default 2)")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--max-new-tokens", type=int, default=10)
    p.add_argument("-o", "--output", default=str(Path(__file__).resolve().parent.parent / "configs" / "bias"
                                                 / "names_pool.yaml"), help="pool file to write")
    args_given = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(args_given)

    from mirage.attribution.models import load_model
    from mirage.attribution.serialization import library_versions

    lm = load_model(args.model)
    names, counts = make_pool(lm, n=args.n, seed=args.seed, max_attempts=args.max_attempts,
                              max_repeats=args.max_repeats, temperature=args.temperature, top_p=args.top_p,
                              max_new_tokens=args.max_new_tokens,
                              report=lambda c: print(f"{c['kept']} names in {c['attempts']} attempts", file=sys.stderr))
    if len(names) < args.n:
        print(f"only {len(names)} names in {counts['attempts']} attempts; raise --max-attempts.", file=sys.stderr)
        return 1
    provenance = {
        "model": lm.name,
        "prompt": PROMPT,
        "answer_start": ANSWER_START,
        "cues": {"GENDER": list(GENDERS), "COUNTRY": list(COUNTRIES),
                 "order": "attempt i uses cue i mod (countries x genders), genders alternating within a country"},
        "sampling": {"temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens,
                     "seed": args.seed, "seeds": "attempt i samples with seed + i"},
        "filter": FILTER.replace("{MAX}", str(args.max_repeats)),
        "counts": counts,
        "date": datetime.date.today().isoformat(),
        "command": " ".join(["python scripts/make_names_pool.py", *map(shlex.quote, args_given)]),
        "versions": {name: str(version) for name, version in library_versions().items()},
    }
    Path(args.output).write_text(render(names, provenance), encoding="utf-8")
    print(f"{len(names)} names ({counts['attempts']} attempts) written to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
