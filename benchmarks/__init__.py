"""Scripts that time mirage and compare it with the reference procedure (:mod:`mirage.reference`); run them as
``python benchmarks/NAME.py``. Nothing here is imported by mirage or its tests."""

import os
from pathlib import Path

#: The shared data folder (XOR-AttriQA, ALCE's ELI5 sample): ``$MIRAGE_SHARED_DATA``, else ``../shared/data`` beside the
#: repository.
SHARED_DATA = Path(os.environ.get("MIRAGE_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
