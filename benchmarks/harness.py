"""The benchmark harness: the one way a script of ``benchmarks/`` gets its command line, and what every script records
beside its figures (the command, the commit, the machine).

A script declares its options as a frozen dataclass whose fields carry their flag and help in their metadata
(:func:`mirage.options.cli_arg`, or the shared fields below: :func:`model_arg`, :func:`threads_arg`, …; the annotation
gives the argparse argument as :mod:`mirage.options` describes), and a ``run(options)`` function; its last lines hand
both to :func:`main`::

    from harness import limit_arg, main  # before mirage: this puts the checkout first on sys.path
    from mirage.options import cli_arg

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Options:
        data: str = cli_arg(flag="data", help="an XOR-AttriQA JSONL file, or a dataset name")
        limit: int | None = limit_arg(5)

    def run(options: Options) -> int | None: ...

    if __name__ == "__main__":
        main(Options, run)

:func:`main` builds the parser (:func:`script_parser`: the program's name is the script's file name, the description
the first paragraph of its docstring), parses, and calls ``run`` with the options instance; what ``run`` returns is
the exit status, and a :class:`UsageError` it raises is argparse's usage error (status 2).

A script runs as ``python benchmarks/NAME.py``, which puts ``benchmarks/`` on ``sys.path``, not the repository: its
``from harness import …`` finds this module, and importing it puts the repository first on ``sys.path``, so that the
script's later ``from mirage …`` and ``from benchmarks.other import …`` read this checkout's code, never an installed
copy. Hence every script imports the harness before anything of mirage, and as ``harness`` (``benchmarks.harness``
would be a second copy of this module).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, NoReturn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mirage.config import DEFAULT_MODEL  # the checkout's mirage, put first on sys.path just above
from mirage.options import add_options, cli_arg, options_from_args

if TYPE_CHECKING:
    import torch

__all__ = ["HIDDEN", "ROOT", "Text", "UsageError", "cached_dataset", "device_arg", "device_name",
           "dtype_arg", "limit_arg", "main", "measured_commit", "model_arg", "recorded_command", "script_parser",
           "text_arg", "threads_arg"]

#: The help of a flag that ``--help`` does not list (one a script passes to a child process of its own).
HIDDEN = argparse.SUPPRESS
#: Which text of XOR-AttriQA a script reads: the English translations or the native text.
Text = Literal["en", "native"]


class UsageError(Exception):
    """A command line whose flags parse but do not go together: :func:`main` reports it as argparse reports a bad
    flag (the usage, the message, exit status 2)."""


# -- the command line ---------------------------------------------------------------------------------------------


def script_parser(module: ModuleType, options: type | None = None) -> argparse.ArgumentParser:
    """The parser of a script (``module``): an argument per field of ``options`` (default: the module's ``Options``)
    that declares a flag, the first paragraph of the module's docstring as the description."""
    doc = (module.__doc__ or "").strip().split("\n\n")[0]
    parser = argparse.ArgumentParser(prog=Path(module.__file__).name, description=doc)
    add_options(parser, options or module.Options)
    return parser


def main(options: type, run: Callable[[Any], int | None], argv: Sequence[str] | None = None) -> NoReturn:
    """Parse the command line (``argv``, default ``sys.argv[1:]``) with the parser of ``options``, call ``run`` with
    the options instance, and exit with the status it returns (None: 0)."""
    parser = script_parser(sys.modules[run.__module__], options)
    args = parser.parse_args(argv)
    try:
        status = run(options_from_args(options, args))
    except UsageError as err:
        parser.error(str(err))
    raise SystemExit(status or 0)


def model_arg(default: str | None = DEFAULT_MODEL, *,
              help: str = "the model: an embedded name, a Hugging Face id or a local path", **metadata: Any) -> Any:
    """``--model``: the model a script loads (or names); by default mirage's, the embedded SmolLM2."""
    return cli_arg(default, flag="--model", help=help, **metadata)


def threads_arg(default: int | None = None, *, help: str | None = None, **metadata: Any) -> Any:
    """``--threads``: torch's CPU threads (None: torch's own number)."""
    if help is None:
        help = "torch CPU threads" + (" (default: torch's)" if default is None else "")
    return cli_arg(default, flag="--threads", help=help, metavar="N", **metadata)


def device_arg(default: str | None = None, *, help: str = "cpu or cuda (default: mirage's choice)",
               **metadata: Any) -> Any:
    """``--device``: where the model is loaded."""
    return cli_arg(default, flag="--device", help=help, **metadata)


def dtype_arg(default: str | None = None, *, help: str = "the model's dtype, e.g. float32 (default: mirage's for the "
              "device)", **metadata: Any) -> Any:
    """``--dtype``: the dtype the model is loaded in."""
    return cli_arg(default, flag="--dtype", help=help, **metadata)


def text_arg(default: str = "en", *, flag: str = "--text",
             help: str = "XOR-AttriQA's English translations (en) or its native text", **metadata: Any) -> Any:
    """``--text``: which text of XOR-AttriQA is read (annotate the field :data:`Text`)."""
    return cli_arg(default, flag=flag, help=help, **metadata)


def limit_arg(default: int | None = None, *, help: str = "only the first N rows (of each file)",
              **metadata: Any) -> Any:
    """``--limit``: the first N rows of the data."""
    return cli_arg(default, flag="--limit", help=help, metavar="N", **metadata)


# -- what a benchmark records -------------------------------------------------------------------------------------


def recorded_command() -> str:
    """The command line that ran this script, as a benchmark records it: without the machine's absolute paths
    (:func:`mirage.runs.files.portable_arg`: relative to the working folder, else the file's name)."""
    from mirage.runs.files import portable_arg

    return " ".join(["python", *(portable_arg(arg, Path.cwd()) for arg in sys.argv)])


def measured_commit() -> str | None:
    """The commit of the code a benchmark measures, as it records it: ``git rev-parse HEAD`` of the repository, with
    ``+changes`` when ``mirage/`` or ``benchmarks/`` differ from it; None outside a git checkout (an installed
    package)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "mirage", "benchmarks"], cwd=ROOT,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def cached_dataset(name: str) -> Path | None:
    """Dataset ``name`` in mirage's data cache (``mirage data get NAME``, or ``--from`` a local copy), or None, with a
    note on stderr, when it is not there (a benchmark then falls back to the repository's examples)."""
    from mirage.data import DataError, resolve

    try:
        return resolve(name)
    except DataError as err:
        print(f"note: {err}", file=sys.stderr)
        return None


def device_name(device: torch.device) -> str:
    """What a benchmark records as its machine: the GPU's name, else the CPU's model name (``/proc/cpuinfo`` where
    there is one, else ``platform``)."""
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()

