"""``python -m mirage``: the ``mirage`` command."""

import sys

from mirage.cli import main

sys.exit(main())
