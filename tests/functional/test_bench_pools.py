"""bench/pools.py runs (issue 52's benchmark of whole accelerator hosts): its fleet is
built through the real Placement's API, its requests are the ones Nova 34 sends,
and a change to Placement's embedding, to Nova's query or to the pool model that
breaks it fails here, not on the day someone needs its figures. ``--quick``: the
pools at 1 and 10 hosts, the per-device model at 1 host, on a throw-away
PostgreSQL; about 30 s. No timing asserted, only what must hold on any machine:
the table is printed and the candidates are the right ones."""
import os
import subprocess
import sys

from tests.fixtures import pg_fixture
from tests.fixtures import requirements

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REQUESTS = ('1 GPU', '2 GPUs', '4 GPUs', '8 GPUs', '8 x 1 GPU')


def test_pools_benchmark_prints_its_table():
    if pg_fixture._bindir() is None:
        requirements.need('postgres', 'PostgreSQL server binaries not installed')
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'bench', 'pools.py'), '--quick'],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-4000:]
    lines = out.stdout.splitlines()
    header = next((line for line in lines if line.startswith('| request |')), None)
    assert header is not None, out.stdout
    columns = [c.strip() for c in header.strip('|').split('|')][1:]
    assert columns[:3] == ['pool, 1 host', 'pool, 10 hosts', 'per device, 1 host'], header
    rows = {line.split('|')[1].strip(): [c.strip() for c in line.strip('|').split('|')][1:]
            for line in lines[lines.index(header) + 2:] if line.startswith('| ')}
    for label in REQUESTS:
        assert len(rows[label]) == len(columns), rows
        # Every pool cell answered (p50 / p99), none timed out.
        assert all(' / ' in cell and '>' not in cell for cell in rows[label][:2]), rows
    # One candidate per host for every request on pools; on one provider per GPU,
    # a group of several GPUs finds none (the first finding).
    found = rows['candidates (each request)']
    assert found[0] == '1 / 1 / 1 / 1 / 1', found
    assert found[1] == '10 / 10 / 10 / 10 / 10', found
    assert found[2].startswith('8 / 0 / 0 / 0 / '), found
    assert any(line.startswith('pools, 10 hosts: 8 GPUs cost ') for line in lines), \
        out.stdout
