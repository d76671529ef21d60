#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install Steward into it; re-run is cheap.
# STEWARD_VENV names another virtualenv directory (the runtime-install test's).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
venv="${STEWARD_VENV:-.venv}"
py="${PYTHON:-}"
if [ -z "$py" ]; then
  for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      py="$cand"; break
    fi
  done
fi
[ -n "$py" ] || { echo "Python >= 3.11 is required" >&2; exit 1; }
# The test extra builds libvirt-python against libvirt-dev with pkg-config: the
# system packages come first, whichever entry point asked (tools/lint.sh,
# tools/test.sh, tools/test.sh --fast), or pip fails on a machine that never ran
# the project (issue 37). Cheap when they are there: one dpkg-query per package.
case ",$extras," in
  *,test,*) bash tools/system-packages.sh ;;
  # mysqlclient, the mysql extra's driver, is built against libmariadb-dev.
  *,mysql,*) bash tools/system-packages.sh mysql ;;
esac
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
  "$venv"/bin/pip install -q --upgrade pip
fi
stamp="$venv/.steward-installed${extras:+-$extras}"
# The tested versions (upper-constraints.txt): a dependency's new release does not
# reach an install until that file is refreshed (tools/newest-deps.sh, which names
# /dev/null in STEWARD_CONSTRAINTS to try the newest).
constraints="${STEWARD_CONSTRAINTS:-upper-constraints.txt}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$constraints" -nt "$stamp" ]; then
  "$venv"/bin/pip install -q -c "$constraints" -e ".${extras:+[$extras]}"
  touch "$stamp"
fi
