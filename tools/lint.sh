#!/usr/bin/env bash
# The lint (ruff, configured in pyproject.toml [tool.ruff]): .ci/run runs it before
# the tests, `tox -e pep8` on its own. A finding exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/bootstrap.sh test
exec .venv/bin/ruff check --no-cache "$@" .
