"""A mistyped command, subcommand or flag: the subcommand's usage and the nearest valid name (issue 39)."""

from __future__ import annotations

import pytest

from mirage.cli import main


def _cli_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_a_mistyped_flag_names_the_nearest_one_under_the_subcommands_usage(capsys, tmp_path):
    err = _cli_error(capsys, ["attribute", "items.json", "-o", str(tmp_path / "o.jsonl"), "--modle", "x"])
    assert err.startswith("usage: mirage attribute ")  # the subcommand's usage, not `usage: mirage [-h] [-v]`
    assert "unrecognized arguments: --modle x" in err and "did you mean '--model'?" in err
    err = _cli_error(capsys, ["score", "eli5", "data", "-o", str(tmp_path / "run"), "--limt", "3"])
    assert err.startswith("usage: mirage score eli5 ") and "did you mean '--limit'?" in err
    err = _cli_error(capsys, ["attribut", "items.json"])
    assert "invalid choice: 'attribut'" in err and "did you mean 'attribute'?" in err
    err = _cli_error(capsys, ["score", "xor-attriq"])
    assert err.startswith("usage: mirage score ") and "did you mean 'xor-attriqa'?" in err
    # nothing close: no hint
    err = _cli_error(capsys, ["attribute", "items.json", "-o", str(tmp_path / "o.jsonl"), "--zzzzzz"])
    assert "did you mean" not in err
