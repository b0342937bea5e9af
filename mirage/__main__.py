"""``python -m mirage``: the ``mirage`` command."""

import sys

from mirage.cli import command

__all__ = []

sys.exit(command())
