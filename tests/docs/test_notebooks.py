"""Every notebook in notebooks/ runs top to bottom (on the embedded model), and none is committed with outputs. Each
run that passes keeps its executed copy in out/notebooks/, which the documentation site shows (docs/hooks.py)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
#: Where a passing run keeps the executed notebook, for the documentation site.
EXECUTED = Path(__file__).resolve().parents[2] / "out" / "notebooks"
#: Text that a successful run must have shown, per notebook.
EXPECTED = {
    "01_quickstart.ipynb": ["mirage-span", "context-sensitive tokens"],
    "02_mirage_vs_selfcitation.ipynb": ["no self-citation", "mean Jaccard", "random_mirage"],
    "03_attribution_bias.ipynb": ["Self-citation", "MIRAGE", "CAB P / R", "cab.png", "P vanilla: base / tuned",
                              "| hai | mirage | 46.1 / 26.2 |"],
    "04_attribution_quality.ipynb": ["supporting", "learned", "coefficient"],
    "05_citation_tuning.ipynb": ["answers cited %", "cite [1] F1", "supporting passages", "Q: ",
                                 "SFT + reward, 16 steps", "SFT + reward, 1 epoch"],
}

#: Output types a successful run must have shown (a figure, not only its repr).
EXPECTED_MIME = {"02_mirage_vs_selfcitation.ipynb": "image/png", "03_attribution_bias.ipynb": "image/png",
                 "05_citation_tuning.ipynb": "image/png"}


def _text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            for value in out.get("data", {}).values():
                parts.append(value if isinstance(value, str) else "")
    return "\n".join(parts)


def test_notebooks_exist():
    assert {p.name for p in NOTEBOOKS} >= set(EXPECTED)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    """No outputs, and every cell has its id (nbformat 4.5: a cell without one is a warning now, an error later)."""
    import json

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: clear outputs before committing"
    raw = json.loads(path.read_text(encoding="utf-8"))  # as committed: nbformat.read fills in missing ids
    assert all("id" in cell for cell in raw["cells"]), (f"{path.name}: give every cell an id "
                                                        "(nbformat.validator.normalize)")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, data_if_present):
    """The kernel reads the project's data by name (the data folder imported into a data cache) where it is here."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    shown = _text(nb)
    for expected in EXPECTED.get(path.name, []):
        assert expected in shown, f"{path.name}: expected {expected!r} in its outputs"
    mimes = {kind for cell in nb.cells for out in cell.get("outputs", []) for kind in out.get("data", {})}
    if path.name in EXPECTED_MIME:
        assert EXPECTED_MIME[path.name] in mimes, f"{path.name}: no {EXPECTED_MIME[path.name]} output"
    EXECUTED.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, EXECUTED / path.name)
