"""``python -m mirage``: the ``mirage`` command."""

import sys

from mirage.cli import command

sys.exit(command())
