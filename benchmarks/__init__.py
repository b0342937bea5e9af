"""Scripts that time mirage and compare it with the reference procedure (:mod:`mirage.peers.inseq`); run them as
``python benchmarks/NAME.py``. Nothing here is imported by mirage or its tests."""

import platform
import subprocess
import sys
from pathlib import Path

import torch


def recorded_command() -> str:
    """The command line that ran this script, as a benchmark records it: without the machine's absolute paths
    (:func:`mirage.runs.files.portable_arg`: relative to the working folder, else the file's name)."""
    from mirage.runs.files import portable_arg

    return " ".join(["python", *(portable_arg(arg, Path.cwd()) for arg in sys.argv)])


def measured_commit() -> str | None:
    """The commit of the code a benchmark measures, as it records it: ``git rev-parse HEAD`` of the repository, with
    ``+changes`` when ``mirage/`` or ``benchmarks/`` differ from it; None outside a git checkout (an installed
    package)."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "mirage", "benchmarks"], cwd=root,
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
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
