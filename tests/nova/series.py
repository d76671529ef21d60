"""The side venv with the real nova 34.0.0 (tools/nova-series.sh) for the tests.

The venv is built once (pip, from the package index or pip's cache) and the series
applied afresh by ``prepare()``; a machine that cannot build it skips through
``need('nova')``, which CI turns into a failure (.ci/run's STEWARD_REQUIRE). Both
modules that use it share the xdist group ``nova-series``: one worker builds, applies
and runs, never two at once.
"""
import fcntl
import json
import os
import subprocess

from tests.fixtures import requirements
from tests.fixtures.stack import ROOT

SCRIPT = os.path.join(ROOT, 'tools', 'nova-series.sh')
VENV = os.path.join(ROOT, '.venv-nova')
PYTHON = os.path.join(VENV, 'bin', 'python')
PATCHED = os.path.join(VENV, 'patched')
CONSUMER_DIR = os.path.dirname(os.path.abspath(__file__))
SERIES_DIR = os.path.join(ROOT, 'contrib', 'nova')
XDIST_GROUP = 'nova-series'


def series():
    with open(os.path.join(SERIES_DIR, 'series')) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith('#')]


def run_script(action, timeout=900):
    """``tools/nova-series.sh <action>`` under a lock (one builder at a time)."""
    os.makedirs(VENV, exist_ok=True)
    with open(os.path.join(VENV, '.steward-lock'), 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return subprocess.run(['bash', SCRIPT, action], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)


_prepared = []


def prepare():
    """.venv-nova built and the series applied to .venv-nova/patched (once per
    test process)."""
    if _prepared:
        return
    out = run_script('venv')
    if out.returncode != 0:
        # A venv that was built but a series that does not apply is a defect of
        # the series, never a missing dependency.
        if os.path.exists(os.path.join(VENV, '.steward-nova-installed')):
            raise AssertionError(f'contrib/nova/series does not apply to nova '
                                 f'34.0.0:\n{out.stderr[-4000:]}')
        requirements.need('nova', f'cannot build {VENV} with nova==34.0.0 '
                                  f'(rc {out.returncode}): {out.stderr[-1500:]}')
    _prepared.append(True)


def consume(endpoint, instances, tmp_path, patched, moves=()):
    """Nova's client + LibvirtDriver over Steward's ARQs (tests/nova/nova_consumer.py
    inside .venv-nova): {instance: {arqs, arq_microversion, mdevs, mdev_parents,
    xml | error}}; with ``moves`` ((source instance, destination instance) pairs,
    the series only), also {'source>destination': {src_arqs, dst_arqs, movable,
    src_xml, dst_xml, dst_mdev_parents, migrating_xml | error}}."""
    prepare()
    name = 'patched' if patched else 'released'
    request, result = tmp_path / f'{name}-in.json', tmp_path / f'{name}-out.json'
    request.write_text(json.dumps({
        'endpoint': endpoint, 'instances': instances,
        'moves': [{'source': src, 'destination': dst} for src, dst in moves]}))
    env = dict(os.environ, STEWARD_NOVA_IN=str(request), STEWARD_NOVA_OUT=str(result),
               PYTHONPATH=os.pathsep.join(([PATCHED] if patched else []) + [CONSUMER_DIR]))
    env.pop('OS_CLOUD', None)
    out = subprocess.run([PYTHON, '-m', 'testtools.run',
                          'nova_consumer.StewardArqsTestCase.test_consume'],
                         capture_output=True, text=True, env=env, timeout=300,
                         cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-6000:]
    return json.loads(result.read_text())
