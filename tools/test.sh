#!/usr/bin/env bash
# Install (first run) and run the whole test suite on 3 workers: on 2 cores the
# suite's services spend a third of their time waiting (the two cores were 70 %
# busy with 2 workers, 27 min; 3 workers kept them busier and took 22 min).
#   tools/test.sh [pytest args]          the full suite (.ci/run runs this)
#   tools/test.sh --fast [pytest args]   the unit tests and the in-process functional
#                                        tests of tools/fast-tests.txt (no servers of
#                                        their own; under two minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --fast ]; then
  shift
  bash tools/bootstrap.sh test
  mapfile -t paths < <(grep -v -e '^#' -e '^$' tools/fast-tests.txt)
  exec .venv/bin/python -m pytest -n 2 --dist loadgroup -q "${paths[@]}" "$@"
fi
# bootstrap.sh installs the system packages before the test extra (its pip builds
# libvirt-python against them).
bash tools/bootstrap.sh test
exec .venv/bin/python -m pytest -n 3 --dist loadgroup -q "$@"
