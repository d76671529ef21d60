#!/usr/bin/env bash
# Steward's Nova patch series (contrib/nova/) against the real nova 34.0.0.
#
#   tools/nova-series.sh venv    build .venv-nova (first run only) and the patched tree
#   tools/nova-series.sh test    the above, then Nova's own unit tests on the patched
#                                tree: nova/tests/unit/virt/libvirt/test_driver.py,
#                                nova/tests/unit/accelerator/ and the resize/cold
#                                migration tests of the conductor, the compute
#                                manager, the compute API, the objects and the API
#                                controllers (stestr; PARTS below)
#
# .venv-nova/ (git-ignored) holds nova==34.0.0 from the package index with the
# packages its unit tests import; its site-packages copy of Nova stays unpatched.
# .venv-nova/patched/ is a copy of that nova/ with the series applied (rebuilt on
# every run, ~1 s, so an edited series is what runs): PYTHONPATH=.venv-nova/patched
# selects the patched Nova, nothing selects the released one. The series must apply
# cleanly (`git apply --check` first, then `git apply`, patch by patch in the
# series' order).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=$root/.venv-nova
patched=$venv/patched
series=$root/contrib/nova
NOVA=nova==34.0.0
# What Nova's unit tests import besides Nova's own requirements (its
# test-requirements.txt, the part test_driver.py and accelerator/ need).
TEST_PKGS=(oslotest fixtures testtools ddt requests-mock wsgi-intercept stestr)

build_venv() {
  local stamp=$venv/.steward-nova-installed
  # .ci/run starts a build in the background while the tests may ask for one:
  # one pip at a time into the venv, the second caller waits and finds it built.
  exec 9>"$venv.lock"
  flock 9
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$NOVA ${TEST_PKGS[*]}" ]; then
    return
  fi
  local py=${PYTHON:-}
  if [ -z "$py" ]; then
    for cand in python3.11 python3.12 python3; do
      command -v "$cand" >/dev/null 2>&1 && { py=$cand; break; }
    done
  fi
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  echo "pip install $NOVA ${TEST_PKGS[*]} into $venv (first run only)" >&2
  "$venv/bin/python" -m pip install -q "$NOVA" "${TEST_PKGS[@]}"
  echo "$NOVA ${TEST_PKGS[*]}" > "$stamp"
}

apply_series() {
  local src
  src=$(cd "$venv" && PYTHONPATH= bin/python -c 'import os, nova; print(os.path.dirname(nova.__file__))')
  rm -rf "$patched"
  mkdir -p "$patched"
  cp -a "$src" "$patched/nova"
  find "$patched" -name __pycache__ -prune -exec rm -rf {} +
  local patches=()
  while read -r name; do
    case "$name" in ''|'#'*) continue ;; esac
    patches+=("$series/$name")
  done < "$series/series"
  # A repository of its own: inside Steward's work tree, git apply would take the
  # paths as relative to Steward's top level and silently skip them all. One patch
  # at a time, in order: given several, git apply checks each against the tree as
  # it was, so a patch over a file an earlier one changed would not apply.
  local log p
  (cd "$patched" && git init -q .)
  for p in "${patches[@]}"; do
    log=$(cd "$patched" && git apply --check "$p" && git apply -v "$p" 2>&1) \
      || { echo "$log" >&2; echo "$(basename "$p") does not apply" >&2; return 1; }
    if grep -q '^Skipped' <<<"$log"; then
      echo "$log" >&2; echo "part of $(basename "$p") was skipped" >&2; return 1
    fi
  done
  echo "applied ${#patches[@]} patch(es) from contrib/nova/series to $patched" >&2
}

# The parts of Nova's unit tests the series is checked with: name, test directory
# (stestr discovers only that one: discovering all of nova/tests/unit imports
# modules whose optional dependencies are not installed), filter. The whole of
# the libvirt driver's, the libvirt live migration helpers' and the accelerator
# client's tests; of the modules the resize/cold migration, live migration and
# suspend/resume changes touch, the tests of those operations (test_compute_mgr.py
# alone is about 3 000 tests).
PARTS=(
  "accel|nova/tests/unit/accelerator|"
  "libvirt|nova/tests/unit/virt/libvirt|^nova\.tests\.unit\.virt\.libvirt\.(test_driver|test_migration)\."
  "conductor|nova/tests/unit/conductor/tasks|^nova\.tests\.unit\.conductor\.tasks\.(test_migrate|test_live_migrate)\."
  "compute|nova/tests/unit/compute|^nova\.tests\.unit\.compute\.(test_compute_mgr|test_api)\..*(resize|migrat|accel|suspend|resume)"
  "objects|nova/tests/unit/objects|^nova\.tests\.unit\.objects\.(test_objects\.TestObjectVersions|test_request_spec|test_migration_context|test_migrate_data)\."
  "apictl|nova/tests/unit/api/openstack/compute|^nova\.tests\.unit\.api\.openstack\.compute\.(test_migrate_server|test_server_actions)\..*(migrate|resize|accelerator)"
)
# One stestr worker for the parts of a few dozen tests: a second one only imports
# the test directory once more (conductor: 32 s wall, 18 s CPU with one; 56 s, 28 s
# with two; 2026-11-27 on 2 shared cores). The others use NOVA_TEST_CONCURRENCY.
declare -A WORKERS=([accel]=1 [conductor]=1)

run_tests() {
  local conc=${NOVA_TEST_CONCURRENCY:-2}
  cd "$patched"
  rm -rf .stestr
  local entry part path filter
  for entry in "${PARTS[@]}"; do
    IFS='|' read -r part path filter <<<"$entry"
    printf '[DEFAULT]\ntest_path=./%s\ntop_dir=./\n' "$path" > ".stestr-$part.conf"
    PYTHONPATH=$patched "$venv/bin/python" -m stestr -c ".stestr-$part.conf" run \
      --concurrency "${WORKERS[$part]:-$conc}" --subunit ${filter:+"$filter"} >"$venv/$part.subunit" || true
  done
  local rc=0
  for entry in "${PARTS[@]}"; do
    IFS='|' read -r part path filter <<<"$entry"
    echo "== $part" >&2
    "$venv/bin/subunit2pyunit" --no-passthrough < "$venv/$part.subunit" 2>&1 \
      | grep -E '^(FAIL|ERROR):' >&2 || true
    "$venv/bin/subunit-stats" < "$venv/$part.subunit" || rc=1
  done
  return $rc
}

case "${1:-test}" in
  venv) build_venv; apply_series ;;
  test) build_venv; apply_series; run_tests ;;
  *) echo "usage: $0 [venv|test]" >&2; exit 2 ;;
esac
