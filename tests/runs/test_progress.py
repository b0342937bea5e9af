"""mirage.runs.progress: text printed while a bar runs never shares the bar's line on a terminal."""

from __future__ import annotations

import io
import sys

from mirage.runs.progress import terminal_progress, write_line


def _screen(raw: str) -> list[str]:
    """What a terminal shows of ``raw``: each line as carriage returns overwrite it from its first column."""
    lines = []
    for line in raw.split("\n"):
        shown: list[str] = []
        for part in line.split("\r"):
            shown[: len(part)] = part
        lines.append("".join(shown).rstrip())
    return lines


def test_lines_written_during_a_bar_stand_on_their_own_line(monkeypatch):
    terminal = io.StringIO()  # stdout and stderr on one terminal, as a user runs `mirage attribute`
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setattr(sys, "stderr", terminal)
    for k in terminal_progress(range(3), 3, "attribute"):
        write_line(f"Q: question {k}")
        write_line(f"skipped: item {k}", file=sys.stderr)
    screen = _screen(terminal.getvalue())
    for k in range(3):
        assert f"Q: question {k}" in screen and f"skipped: item {k}" in screen, screen
    assert not [line for line in screen if "it/s" in line and ("Q:" in line or "skipped" in line)], screen
