#!/usr/bin/env bash
# Install (first run) and start the single-host stack: API on 127.0.0.1:6666, embedded
# Placement on 127.0.0.1:8778, conductor and agent (fake driver), SQLite state under
# ~/.local/state/steward. Extra arguments go to `steward serve` (e.g. --config-file).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/bootstrap.sh
exec "${STEWARD_VENV:-.venv}/bin/steward" serve "$@"
