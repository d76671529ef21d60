"""Upstream OpenStack Cyborg 17.0.0 on the same Nova-shaped ARQ lifecycle that
bench/arq_lifecycle.py drives against Steward, then Steward itself, and the ratio.

    .venv/bin/python bench/upstream_cyborg.py [--sequential 50] [--clients 16]
        [--per-client 10] [--nova 20] [--no-steward] [--keep-logs]

What it installs: on the first run, a separate virtualenv ``.venv-cyborg/`` at the
repository root (git-ignored) with ``pip install openstack-cyborg==17.0.0 gunicorn``
from PyPI and whatever pip resolves for them (about a minute, ~100 distributions,
200 MB; no upper-constraints needed). Nothing goes into Steward's venv or the system; Debian's
rabbitmq-server must be present (the multi-host tests need it too).

What it runs, as subprocesses on free loopback ports, all on one host:
* a throw-away RabbitMQ node (tests/multihost/rabbit.py): Cyborg's API, conductor
  and agent are separate processes and need an RPC transport that crosses them;
* the real Placement, the one Steward embeds (steward.placement.embedded), on SQLite,
  with a compute-node provider named like the host, as Nova would have made it;
* cyborg-dbsync ``create_schema`` on a SQLite file (``upgrade`` cannot run on SQLite:
  migration 589ff20545b7 sends ``ALTER TABLE devices ALTER COLUMN type SET NOT NULL``;
  nor can PostgreSQL hold the schema: ``PostgreSQL ENUM type requires a name``),
  cyborg-conductor, and cyborg-agent with upstream's fake driver (one FPGA deployable,
  16 accelerators);
* the API: ``cyborg-api`` itself dies at start (``UnsupportedBackendError: The
  oslo.service.wsgi.Server class is deprecated and cannot be used with the threading
  backend``), so ``cyborg.wsgi.api:application`` is served by gunicorn, one worker
  per core (cyborg-api's own default) with 4 threads each, behind upstream's paste
  pipeline minus keystonemiddleware: the client sends the identity headers
  keystonemiddleware would have set for Nova (roles, project, and the service roles
  of its service token, without which Cyborg 17 refuses bind and delete-by-instance);
* a stub of Nova's os-server-external-events endpoint in this process: Cyborg's
  conductor notifies Nova at the end of every bind, as in production (it builds an
  openstacksdk connection per notification, about 50 ms of each bind on a 2-core
  host; Steward's single-host default has events off).

Then the same calls as bench/arq_lifecycle.py (``one_instance`` and
``nova_sequence`` of bench/load.py, shared): 50 sequential instances, 16 concurrent
clients, bind latency percentiles; then bench/arq_lifecycle.py itself runs against
``steward serve`` (after Cyborg is stopped, so they never share the cores) and the
sequential ratio Steward / Cyborg is printed. The machine's load average before each
part is printed too: on a shared host the ratio moves with what else runs.

Under concurrent clients upstream on SQLite answers 500 ("database is locked": oslo.db's
deferred BEGIN): failed instances are left out of the throughput, counted and
summarised by call, status and reason, and cleaned up as Nova would (DELETE ?instance=).
"""
import argparse
import collections
import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench import load  # noqa: E402
from tests.fixtures.cyborg_upstream import (  # noqa: E402
    API_THREADS, API_WORKERS, HOST, IDENTITY, PLACEMENT_HEADERS, Deployment, ensure_venv,
    installed_versions)
from tests.multihost.rabbit import RabbitServer, free_port, installed  # noqa: E402

# -- measurement ------------------------------------------------------------------
def run_concurrent(url, rp_uuid, clients, per_client, tally):
    """bench/arq_lifecycle.py's concurrent run, with the identity headers, and Nova's
    clean-up of a failed boot (bench/load.py clean_up): without it the ARQs of each
    failed instance keep their attach handles and every later bind fails."""
    run = load.run_clients(url, rp_uuid, clients, per_client, tally, headers=IDENTITY,
                           nova_cleanup=True, timeout=120)
    # Only completed instances count: a failed one did not boot.
    return run.completed() / run.elapsed, run.binds, run.failures


def measure_cyborg(args, tmp):
    rabbit = RabbitServer(base=os.path.join(tmp, 'rabbit'))
    placement = cyborg = None
    try:
        rabbit.start()
        from steward.placement import handle as embedded
        placement = embedded.start_subprocess(
            f'sqlite:///{tmp}/placement.db', port=free_port(),
            log_file=os.path.join(tmp, 'placement.log'))
        httpx.post(f'{placement.url}/resource_providers', headers=PLACEMENT_HEADERS,
                   json={'name': HOST, 'uuid': str(uuid.uuid4())}).raise_for_status()
        cyborg = Deployment(tmp, rabbit, placement.url, f'sqlite:///{tmp}/cyborg.db')
        t0 = time.perf_counter()
        rp_uuid = cyborg.start()
        ready = time.perf_counter() - t0
        url = cyborg.url

        tally = load.Tally()
        before = load.load_average()
        with load.LeanClient(url, tally, timeout=120, headers=IDENTITY) as c:
            c.post('/v2/device_profiles', json=[{
                'name': load.PROFILE, 'groups': [{'resources:FPGA': '1'}]}]
            ).raise_for_status()
            for _ in range(5):                                   # warm-up
                load.one_instance(c, rp_uuid, [])
            binds = []
            t0 = time.perf_counter()
            for _ in range(args.sequential):
                load.one_instance(c, rp_uuid, binds, tally)
            seq = args.sequential / (time.perf_counter() - t0)
            nova_totals = [load.nova_sequence(c, rp_uuid, load.PROFILE)
                           for _ in range(args.nova)]
        conc = run_concurrent(url, rp_uuid, args.clients, args.per_client, tally)
        cyborg.services.check()
        return {'seq': seq, 'binds': binds, 'conc': conc, 'nova': nova_totals,
                'tally': tally, 'ready': ready, 'events': cyborg.nova.events,
                'load': before}
    finally:
        if cyborg:
            cyborg.stop()
        if placement:
            placement.stop()
        rabbit.destroy()


def measure_steward(args):
    cmd = [sys.executable, os.path.join(ROOT, 'bench', 'arq_lifecycle.py'),
           '--sequential', str(args.sequential), '--clients', str(args.clients),
           '--per-client', str(args.per_client), '--nova', str(args.nova), '--single', '0']
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise RuntimeError(f'{" ".join(cmd)} failed:\n{out.stdout}\n{out.stderr[-3000:]}')
    return out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--sequential', type=int, default=50)
    ap.add_argument('--clients', type=int, default=16)
    ap.add_argument('--per-client', type=int, default=10)
    ap.add_argument('--nova', type=int, default=20,
                    help="Nova-shaped boot+delete sequences (0: skip)")
    ap.add_argument('--no-steward', action='store_true',
                    help='measure upstream Cyborg only')
    ap.add_argument('--keep-logs', action='store_true',
                    help="keep the services' logs and databases (path is printed)")
    args = ap.parse_args()
    if not installed():
        sys.exit('rabbitmq-server is not installed (apt-get install rabbitmq-server)')
    ensure_venv()

    tmp = tempfile.mkdtemp(prefix='steward-bench-cyborg-')
    try:
        cy = measure_cyborg(args, tmp)
    except Exception:
        print(f'upstream Cyborg failed; logs kept in {tmp}', file=sys.stderr)
        raise
    if not args.keep_logs:
        shutil.rmtree(tmp, ignore_errors=True)

    ms = load.ms
    print(f'machine: {os.cpu_count()} cores; '
          f'{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC')
    print(f'upstream Cyborg ({installed_versions()}), SQLite, RabbitMQ, fake driver, '
          f'gunicorn {API_WORKERS} workers x {API_THREADS} threads; '
          f'ready in {cy["ready"]:.1f} s; load average before {cy["load"]}'
          + (f'; logs in {tmp}' if args.keep_logs else ''))
    binds = cy['binds']
    print(f'  sequential: {args.sequential} instances, {cy["seq"]:.1f} instances/s')
    print(f'    bind latency p50 {ms(statistics.median(binds))}, '
          f'p90 {ms(load.pct(binds, 90))}, p99 {ms(load.pct(binds, 99))}')
    rate, cbinds, failures = cy['conc']
    print(f'  concurrent: {args.clients} clients x {args.per_client}, {rate:.1f} instances/s'
          f' completed'
          f'{f" ({len(failures)} failed instances not counted)" if failures else ""}')
    if cbinds:
        print(f'    bind latency p50 {ms(statistics.median(cbinds))}, '
              f'p90 {ms(load.pct(cbinds, 90))}, p99 {ms(load.pct(cbinds, 99))}')
    for what, n in collections.Counter(map(load.describe, failures)).most_common(5):
        print(f'    {n} x {what}')
    print(f'  double allocations: {len(cy["tally"].double)}; '
          f'5xx answers: {cy["tally"].server_errors}; '
          f'Nova events received by the stub: {cy["events"]}')
    if cy['nova']:
        print(f'  Nova boot+delete sequence, accelerator API total: '
              f'p50 {ms(statistics.median(cy["nova"]))}, '
              f'p90 {ms(load.pct(cy["nova"], 90))}')
    if args.no_steward:
        return

    before = load.load_average()
    steward = measure_steward(args)
    print(f'Steward (bench/arq_lifecycle.py, same options; load average before {before}):')
    print(''.join(f'  {line}\n' for line in steward.splitlines()), end='')
    ratios = [('sequential', r'^sequential: \d+ instances, ([\d.]+) instances/s', cy['seq'],
               ' (goal >= 10x)'),
              (f'{args.clients} clients', rf'^concurrent: {args.clients} clients x \d+, '
               r'([\d.]+) instances/s', rate, '')]
    for name, pattern, theirs, goal in ratios:
        found = re.search(pattern, steward, re.M)
        if not found:
            print(f'{name} ratio: bench/arq_lifecycle.py printed no such figure')
        elif theirs:
            print(f'{name} ratio Steward / upstream Cyborg: '
                  f'{float(found.group(1)) / theirs:.1f}x{goal}')


if __name__ == '__main__':
    main()
