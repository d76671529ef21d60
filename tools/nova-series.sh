#!/usr/bin/env bash
# Steward's Nova patch series (contrib/nova/) against the real nova 34.0.0.
#
#   tools/nova-series.sh venv    build .venv-nova (first run only) and the patched tree
#   tools/nova-series.sh test    the above, then Nova's own unit tests on the patched
#                                tree: nova/tests/unit/virt/libvirt/test_driver.py and
#                                nova/tests/unit/accelerator/ (stestr)
#
# .venv-nova/ (git-ignored) holds nova==34.0.0 from the package index with the
# packages its unit tests import; its site-packages copy of Nova stays unpatched.
# .venv-nova/patched/ is a copy of that nova/ with the series applied (rebuilt on
# every run, ~1 s, so an edited series is what runs): PYTHONPATH=.venv-nova/patched
# selects the patched Nova, nothing selects the released one. The series must apply
# cleanly (`git apply --check` first, then `git apply`, in the series' order).
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
  # paths as relative to Steward's top level and silently skip them all.
  local log
  log=$(cd "$patched" && git init -q . && git apply --check "${patches[@]}" \
        && git apply -v "${patches[@]}" 2>&1)
  if grep -q '^Skipped' <<<"$log"; then
    echo "$log" >&2; echo "part of the series was skipped" >&2; return 1
  fi
  echo "applied ${#patches[@]} patch(es) from contrib/nova/series to $patched" >&2
}

run_tests() {
  local conc=${NOVA_TEST_CONCURRENCY:-2}
  cd "$patched"
  rm -rf .stestr
  # Two stestr runs, each discovering only its own directory (discovering all of
  # nova/tests/unit imports modules whose optional dependencies are not installed).
  printf '[DEFAULT]\ntest_path=./nova/tests/unit/virt/libvirt\ntop_dir=./\n' > .stestr-libvirt.conf
  printf '[DEFAULT]\ntest_path=./nova/tests/unit/accelerator\ntop_dir=./\n' > .stestr-accel.conf
  PYTHONPATH=$patched "$venv/bin/python" -m stestr -c .stestr-accel.conf run \
    --concurrency "$conc" --subunit >"$venv/accel.subunit" || true
  PYTHONPATH=$patched "$venv/bin/python" -m stestr -c .stestr-libvirt.conf run \
    --concurrency "$conc" --subunit '^nova\.tests\.unit\.virt\.libvirt\.test_driver\.' \
    >"$venv/libvirt.subunit" || true
  local rc=0
  for part in accel libvirt; do
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
