"""bench/bind_beside_query.py runs (issue 52: binds while Placement answers eight
one-unit groups): `steward serve` on the pci driver, a per-GPU host in its
embedded Placement, two phases of clients. No timing asserted, only what must
hold on any machine: every instance booted and deleted in both phases, no 5xx,
no double allocation, no BindFailed, and the query was answered, bounded by the
embedded Placement's defaults."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_binds_beside_the_eight_group_query_bench_runs():
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'bench', 'bind_beside_query.py'),
         '--clients', '2', '--per-client', '3', '--query-timeout', '120'],
        capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-4000:]
    text = out.stdout
    for phase in ('alone', 'beside the query'):
        line = next(line for line in text.splitlines() if line.strip().startswith(phase))
        assert line.endswith('failed instances 0'), line
    assert 'bind p99 beside the query / alone:' in text
    queries = re.search(r'(\d+) queries during the phase, (\d+) answered .*candidates '
                        r'\[(\d+)\]\), (\d+) given up', text)
    assert queries, text
    sent, answered, candidates, given_up = map(int, queries.groups())
    assert sent >= 1 and answered >= 1 and given_up == 0, text
    # Bounded by the embedded Placement's max_allocation_candidates.
    assert candidates == 1000, text
    assert text.strip().endswith(
        '5xx answers: 0; double allocations: 0; BindFailed in the server log: 0'), text
