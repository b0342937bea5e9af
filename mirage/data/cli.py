"""``mirage data list`` and ``mirage data get NAME… [--from PATH]``: parse arguments and call :mod:`mirage.data`."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from mirage.options import add_options, cli_arg

__all__ = ["register"]

HELP = "datasets by name: list them, get them into the cache (download, or --from a local copy)"


def cmd_list(args: argparse.Namespace) -> int:
    from mirage.data.fetch import data_root, dataset_table

    rows = dataset_table()
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  parts: {r['parts']}  cached: {r['cached']}  from {r['source']}")
        print(f"{'':<{width}}  {r['description']}")
    print(f"cache: {data_root()}", file=sys.stderr)
    return 0


@dataclass(frozen=True, kw_only=True)
class GetOptions:
    """What ``mirage data get`` puts in the cache, and from where (:func:`mirage.data.fetch.get`)."""

    names: tuple[str, ...] = cli_arg(flag="names", metavar="NAME", help=(
        "NAME or NAME:PART[,PART…] (e.g. xor-attriqa-match:train,val,fi,ru; see `mirage data list`)"))
    source: str | None = cli_arg(None, flag="--from", dest="source", metavar="PATH", help=(
        "import from a local copy instead of downloading: a clone of the source repository, a folder of its files, "
        "or a folder laid out as the data cache"))
    quiet: bool = cli_arg(False, flag="--quiet", help="no progress bar")


def cmd_get(args: argparse.Namespace) -> int:
    from mirage.data.fetch import get

    for name in args.names:
        path = get(name, source=args.source, progress=not args.quiet)
        print(f"{name}: {path}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``mirage data {list,get}``."""
    data = sub.add_parser("data", help=HELP, description=HELP + ". A command that reads a data file also takes a "
                                                                "dataset name (e.g. xor-attriqa-match:fi).")
    verbs = data.add_subparsers(dest="verb", required=True)
    lst = verbs.add_parser("list", help="the datasets, their parts and which are in the cache")
    lst.set_defaults(func=cmd_list)
    get = verbs.add_parser("get", help="put datasets in the cache, every file checked against its pinned SHA-256")
    add_options(get, GetOptions)
    get.set_defaults(func=cmd_get)
