#!/usr/bin/env bash
# Installs everything the tests need (see scripts/setup.sh), then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
PY=${PYTHON:-python3}
"$PY" -m ruff check mirage tests benchmarks
"$PY" -m mypy  # the paths [tool.mypy] in pyproject.toml lists
exec "$PY" -m pytest -q -p no:cacheprovider --durations=40 "$@"
