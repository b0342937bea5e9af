"""Scripts that time mirage and compare it with the reference procedure (:mod:`mirage.reference`); run them as
``python benchmarks/NAME.py``. Nothing here is imported by mirage or its tests."""

import os
import platform
from pathlib import Path

import torch

#: The shared data folder (XOR-AttriQA, ALCE's ELI5 sample): ``$MIRAGE_SHARED_DATA``, else ``../shared/data`` beside the
#: repository.
SHARED_DATA = Path(os.environ.get("MIRAGE_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


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
