#!/usr/bin/env bash
# Install (first run) and run the whole test suite on 2 workers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/system-packages.sh
bash tools/bootstrap.sh test
exec .venv/bin/python -m pytest -n 2 --dist loadgroup -q "$@"
