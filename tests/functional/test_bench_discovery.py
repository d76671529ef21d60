"""bench/discovery.py runs: the in-process conductor it builds is the composition
root's (an agent API on a transport), so a conductor change the benchmark does not
follow fails here, not on the day someone needs its figures. On 2026-11-30 it
stopped at its first report (its conductor had no transport to ask which versions
the agents speak). Small sizes, no Placement: a few seconds; no timing asserted."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_discovery_benchmark_runs_its_cycles():
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'bench', 'discovery.py'), '--parents', '2',
         '--types', '2', '--no-placement'],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    cycles = [line for line in out.stdout.splitlines() if ' s wall, ' in line]
    names = [line.split('  ')[1].strip() for line in cycles]
    assert names == ['first cycle (all new)', 'quiet cycle (best of 5)',
                     'quiet cycle after conductor restart',
                     'one mdev created outside Steward', 'one type shrank'], out.stdout
    assert all('Placement writes 0' in line for line in cycles), out.stdout
