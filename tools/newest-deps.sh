#!/usr/bin/env bash
# Try the newest releases of every dependency before they reach an install
# (issue 54): a venv of its own (.venv-newest) with Steward's test extra and no
# constraints, the versions that moved against upper-constraints.txt, then the
# fast tests on them. Exit status is the tests'.
#   tools/newest-deps.sh [pytest args]          try them, change nothing
#   tools/newest-deps.sh --write [pytest args]  and, when the tests pass, rewrite
#                                               upper-constraints.txt from that venv
# The full suite on the new versions: refresh with --write, then tools/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
write=
if [ "${1:-}" = --write ]; then write=1; shift; fi
venv=.venv-newest
rm -rf "$venv"
STEWARD_VENV="$venv" STEWARD_CONSTRAINTS=/dev/null bash tools/bootstrap.sh test
"$venv"/bin/pip freeze --exclude-editable | grep -v '^-e' > "$venv/freeze.txt"
echo "== versions that moved (upper-constraints.txt -> newest)"
"$venv"/bin/python - "$venv/freeze.txt" <<'PY'
import sys
def pins(path):
    return {k.lower(): v for k, _, v in (l.strip().partition('==') for l in open(path)
                                         if l.strip() and not l.startswith('#'))}
old, new = pins('upper-constraints.txt'), pins(sys.argv[1])
for name in sorted(old.keys() | new.keys()):
    if old.get(name) != new.get(name):
        print(f'  {name:32} {old.get(name, "(none)")} -> {new.get(name, "(gone)")}')
PY
mapfile -t paths < <(grep -v -e '^#' -e '^$' tools/fast-tests.txt)
status=0
"$venv"/bin/python -m pytest -n 2 --dist loadgroup -q -p no:cacheprovider "${paths[@]}" "$@" || status=$?
if [ "$status" = 0 ] && [ -n "$write" ]; then
  { grep '^#' upper-constraints.txt; cat "$venv/freeze.txt"; } > upper-constraints.txt.new
  mv upper-constraints.txt.new upper-constraints.txt
  echo "upper-constraints.txt rewritten: run tools/test.sh (the full suite) before committing it"
fi
exit "$status"
