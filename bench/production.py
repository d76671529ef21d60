"""The Nova-shaped ARQ lifecycle on the production topology (doc/multihost.md), Steward
and then upstream Cyborg 17 in the same topology, side by side.

    .venv/bin/python bench/production.py [--database postgresql|mariadb] [--workers 2]
        [--conductors 1] [--sequential 200] [--clients 4,16] [--per-client 50] [--warm-up 50]
        [--rounds 3] [--no-cyborg] [--no-single] [--single-on-server] [--keep-logs]
        [--quick]

Started here, on loopback, throw-away, and stopped at the end: one RabbitMQ node
(tests/multihost/rabbit.py) and one database server (a PostgreSQL cluster or a
MariaDB server, tests/fixtures/pg_fixture.py / tests/fixtures/mariadb_fixture.py) shared by both
sides; then for each side, in turn so they never share the cores, a database of
its own, the real Placement (steward.placement.embedded, 2 workers, on its own
database on the same server, as doc/multihost.md step 3 runs it) with the host's
compute-node provider made as Nova would, and a stub of Nova's
os-server-external-events (both sides post an event per bind, as in production):

* Steward: ``steward db sync``, ``steward conductor``, ``steward api`` with
  ``[api] workers``, one ``steward agent`` with the fake driver (one FPGA, 16
  attach handles: one per client at the most) and no database;
* upstream Cyborg 17 (tests/fixtures/cyborg_upstream.py, .venv-cyborg): cyborg-dbsync,
  cyborg-conductor, its API under gunicorn with the same number of workers (4
  threads each; ``cyborg-api`` itself cannot start, see there), cyborg-agent with
  upstream's fake driver (16 accelerators). Cyborg on PostgreSQL needs its ARQ
  state ENUM named to create its schema; when it still fails, the output says so.

Each side gets the same calls (bench/load.py, the load generator of
bench/arq_lifecycle.py): warm-up instances (one client, then a round of the
largest number of clients, so that every process has the connections, threads
and pools its concurrency needs before anything is counted), then sequential
instances, then 4 and 16
concurrent clients, each sending what Nova's identity middleware would have
set. Printed per run: instances/s (completed instances only), bind p50/p99, failed
instances (bind failures separately, summarised by call, status and reason; a failed
instance is cleaned up as Nova would and the run goes on), and the CPU per instance
of every server process (API with its workers, conductor, agent, Placement with its
workers, the database server with its backends, RabbitMQ) and of this load
generator; per side, 5xx answers and double allocations (one attach handle held by
two live instances, seen by the clients and in snapshots of the Bound ARQs taken
during the concurrent runs: 0 expected). Then ``steward serve`` with its defaults
(the single process of bench/arq_lifecycle.py), its [nova] set to a stub as the
production side's is, under the same load, and the three side
by side with the ratio Steward / Cyborg.

``--rounds N`` (3): the production side and ``steward serve`` run in turn N times
before Cyborg (a round is one of each, a minute apart at most). On a machine whose
speed moves within minutes (a shared VM: the same ``steward serve`` spent 5.9 and
10.7 ms of CPU per instance an hour apart) a single pair says more about the moment
than about the two; the comparison prints each round's ratios and their median,
and the table beside Cyborg takes, per case, the round of median throughput. The
comparison also counts each side's server CPU per instance in units of the load
generator's own (the same client code on every side, so the machine's speed at
that moment divides out) and prints the ratio of those counts.

``--single-on-server``: each round also runs ``steward serve`` on a database of
the shared server instead of SQLite, and the comparison is printed against it
too: the production topology's cost beyond the networked database's (the
processes, the broker, the API's workers) apart from the database's own (its
server, its driver's round trips).
"""
import argparse
import collections
import datetime
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench import load  # noqa: E402
from bench import topology  # noqa: E402
from tests.fixtures import cyborg_upstream  # noqa: E402
from tests.multihost import rabbit  # noqa: E402
from tests.fixtures.stack import cpu_seconds as stack_cpu_seconds  # noqa: E402
from tests.fixtures.stack import running_stack  # noqa: E402


# -- measurement ----------------------------------------------------------------------
class Side:
    """One system's figures: its runs (label -> load.Run), tally, start time."""

    def __init__(self, name, description):
        self.name, self.description = name, description
        self.runs, self.tally, self.error = {}, load.Tally(), None
        self.ready = self.load_before = self.events = self.server_error = None


def measure(side, url, rp_uuid, cpu, args):
    def run(clients, per_client, watch=False):
        return load.run_clients(url, rp_uuid, clients, per_client, side.tally,
                                headers=cyborg_upstream.IDENTITY, nova_cleanup=True,
                                watch=watch, cpu=cpu, timeout=120)

    with load.LeanClient(url, side.tally, timeout=60,
                         headers=cyborg_upstream.IDENTITY) as c:
        c.post('/v2/device_profiles', json=[{
            'name': load.PROFILE, 'groups': [{'resources:FPGA': '1'}]}]).raise_for_status()
    # Warm-up: steady state after the start (first reports, workers' first requests);
    # its answers are not counted.
    run(1, args.warm_up)
    if args.client_counts:
        run(max(args.client_counts), 2)
    side.tally = load.Tally()
    side.load_before = load.load_average()
    side.runs['sequential'] = run(1, args.sequential)
    for n in args.client_counts:
        side.runs[f'{n} clients'] = run(n, args.per_client, watch=True)


def settled(read, quiet=1.0, limit=30.0):
    """``read()`` once it has not changed for ``quiet`` seconds (at most ``limit``):
    the servers post a bind's Nova event after answering it, so the last binds'
    events may still be on their way when the load ends."""
    deadline = time.monotonic() + limit
    last, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


# -- report ---------------------------------------------------------------------------
def rate(r):
    return r.completed() / r.elapsed


def bind_failures(r):
    return sum(1 for err in r.failures if isinstance(err, load.ClientError)
               and err.response.method == 'PATCH')


def report(side, args):
    print(f'{side.name}: {side.description}')
    if side.error:
        print(f'  NOT MEASURED: {side.error}')
        return
    print(f'  ready in {side.ready:.1f} s; load average before the runs {side.load_before}')
    for label, r in side.runs.items():
        per = '' if label == 'sequential' else f' x {args.per_client}'
        failed = (f'; {len(r.failures)} failed instances ({bind_failures(r)} at bind), '
                  f'not counted' if r.failures else '')
        print(f'  {label}{per}: {r.started} instances, {rate(r):.1f} instances/s{failed}')
        if r.binds:
            which = ' (failed binds included)' if bind_failures(r) else ''
            print(f'    bind p50 {load.ms(statistics.median(r.binds))}, '
                  f'p99 {load.ms(load.pct(r.binds, 99))}{which}')
        print('    CPU ms per instance: ' + ', '.join(f'{name} {v:.1f}'
                                                    for name, v in r.cpu.items())
              + f'; servers in all {server_cpu(r):.1f}')
        for what, n in collections.Counter(map(load.describe, r.failures)).most_common(5):
            print(f'    {n} x {what}')
    events = ('none: no Nova configured (its default)' if side.events is None
              else side.events)
    print(f'  double allocations: {len(side.tally.double)}; 5xx answers: '
          f'{side.tally.server_errors}; Nova events received by the stub: {events}')
    for item in side.tally.double[:5]:
        print(f'    {item}')
    if side.server_error and any(r.failures for r in side.runs.values()):
        print(f'  first ERROR in its logs: {side.server_error}')


def side_by_side(steward, cyborg, single=None):
    """Steward and Cyborg in the production topology with their ratio, and the
    single process beside them when it was measured."""
    if steward.error or cyborg.error:
        print('side by side: not available (a side was not measured, see above)')
        return
    single = single if single is not None and not single.error else None
    print(f'side by side{"":14} {"Steward":>18} {"upstream Cyborg":>18} {"ratio":>7}'
          + (f' {"steward serve":>18}' if single else ''))
    for label in steward.runs:
        s, c = steward.runs[label], cyborg.runs[label]
        one = single.runs[label] if single else None
        ratio = f'{rate(s) / rate(c):.1f}x' if rate(s) and rate(c) else '-'
        print(f'  {label + " instances/s":<24} {throughput(s):>18} {throughput(c):>18} '
              f'{ratio:>7}' + (f' {throughput(one):>18}' if one else ''))
        sp, cp = bind_p50(s), bind_p50(c)
        ratio = f'{cp / sp:.1f}x' if sp and cp else '-'
        print(f'  {label + " bind p50":<24} {p50_cell(sp):>18} {p50_cell(cp):>18} '
              f'{ratio:>7}' + (f' {p50_cell(bind_p50(one)):>18}' if one else ''))
        sp, cp = bind_p99(s), bind_p99(c)
        print(f'  {label + " bind p99":<24} {p50_cell(sp):>18} {p50_cell(cp):>18} '
              f'{"":>7}' + (f' {p50_cell(bind_p99(one)):>18}' if one else ''))
        print(f'  {label + " server CPU ms":<24} {server_cpu(s):>18.1f} '
              f'{server_cpu(c):>18.1f} {"":>7}'
              + (f' {server_cpu(one):>18.1f}' if one else ''))



def against_single(stewards, singles, title='steward serve'):
    """Steward's production topology beside its single process, same load, same
    run: throughput, server CPU per instance and bind p99 with their ratios, for
    each round (the two ran one after the other), then the median of the rounds'
    ratios: the machine's speed moves within minutes, and a round's two sides
    share its moment.

    The last column is the server CPU per instance counted in the load
    generator's CPU per instance of the same run: the load generator runs the
    same code against every side, so it measures the machine's speed at that
    moment, and the ratio of the two sides' counts does not move with it (a
    round's raw CPU ratio moved between 1.10x and 2.01x in one run where this
    one stayed within 1.27x-1.62x)."""
    pairs = [(s, one) for s, one in zip(stewards, singles) if not (s.error or one.error)]
    if not pairs:
        return
    head = 'production topology / ' + title
    print(f'{head:<37} {"instances/s":>18} {"server CPU ms":>16} {"bind p99":>17} '
          f'{"CPU / load gen.":>16}')
    for label in pairs[0][0].runs:
        rates, cpus, relative = [], [], []
        for i, (steward, single) in enumerate(pairs):
            s, one = steward.runs[label], single.runs[label]
            rates.append(rate(s) / rate(one))
            cpus.append(server_cpu(s) / server_cpu(one))
            relative.append(cpu_in_load(s) / cpu_in_load(one))
            name = label if len(pairs) == 1 else f'{label}, round {i + 1}'
            print(f'  {name:<34} {rate(s):6.1f} / {rate(one):6.1f} {server_cpu(s):6.1f} / '
                  f'{server_cpu(one):5.1f} {p50_cell(bind_p99(s)):>8} / '
                  f'{p50_cell(bind_p99(one)):>7} {cpu_in_load(s):6.2f} / '
                  f'{cpu_in_load(one):5.2f}')
            print(f'  {"":<34} {rates[-1]:15.2f}x {cpus[-1]:15.2f}x {"":>17} '
                  f'{relative[-1]:15.2f}x')
        if len(pairs) > 1:
            print(f'  {label + ", median of the rounds":<34} {statistics.median(rates):15.2f}x '
                  f'{statistics.median(cpus):15.2f}x {"":>17} '
                  f'{statistics.median(relative):15.2f}x')


def median_round(sides):
    """A Side whose run of each label is the rounds' run of median throughput (the
    lower one of the middle two), for the table beside Cyborg; its tally holds
    every round's 5xx and double allocations."""
    measured = [side for side in sides if not side.error]
    if len(sides) == 1 or not measured:
        return sides[0]
    side = Side(measured[0].name, measured[0].description)
    for label in measured[0].runs:
        runs = sorted((m.runs[label] for m in measured), key=rate)
        side.runs[label] = runs[(len(runs) - 1) // 2]
    for m in measured:
        side.tally.double.extend(m.tally.double)
        side.tally.server_errors += m.tally.server_errors
    return side


def p50_cell(value):
    return load.ms(value) if value else 'binds failed'


def throughput(r):
    return f'{rate(r):.1f}' + (f' ({len(r.failures)} failed)' if r.failures else '')


def bind_p50(r):
    """None when any bind failed: a failed bind's latency is not a bind's."""
    return None if bind_failures(r) or not r.binds else statistics.median(r.binds)


def bind_p99(r):
    return None if bind_failures(r) or not r.binds else load.pct(r.binds, 99)


def cpu_in_load(r):
    """Server CPU per instance in units of the load generator's CPU per instance."""
    own = r.cpu.get('load generator')
    return server_cpu(r) / own if own else float('nan')


def server_cpu(r):
    """CPU ms per instance of every server process (the services, Placement, the
    database, the broker): all but the load generator."""
    return sum(v for name, v in r.cpu.items() if name != 'load generator')


# -- the sides ------------------------------------------------------------------------
def run_single(args, db=None):
    """``steward serve`` with its defaults (bench/arq_lifecycle.py's server) under
    the same load, for the figures beside the single process; told of a Nova
    (a stub of its own, as the production side's), so that it posts the same
    events: without one it skipped a tenth of the work. ``db``: on a new database
    of that server instead of SQLite (--single-on-server), the server's CPU
    counted with the process's."""
    what = (f'steward serve on {db.description} (embedded Placement, fake driver)' if db
            else 'steward serve with its defaults (SQLite, embedded Placement, fake driver)')
    side = Side('Steward single process' + (f' on {db.kind}' if db else ''),
                what + ', [nova] set as on the production side')
    nova = cyborg_upstream.start_nova_stub()
    extra = ('[nova]\nauth_type = admin_token\ntoken = admin\n'
             f'endpoint_override = {nova_url(nova)}\n')
    if db:
        extra += f'[database]\nconnection = {db.create(f"serve_{uuid.uuid4().hex[:8]}")}\n'
    try:
        t0 = time.perf_counter()
        with running_stack(extra_conf=extra) as stack:
            side.ready = time.perf_counter() - t0
            rp_uuid = httpx.get(f'{stack.url}/v2/deployables', timeout=30).json()[
                'deployables'][0]['rp_uuid']
            pid = stack.proc.pid
            cpu = {'steward serve': lambda: stack_cpu_seconds([pid]),
                   'its Placement': lambda: sum(load.tree_cpu(child)
                                                for child in load.children(pid))}
            if db:
                cpu[db.kind] = lambda: load.tree_cpu(db.pid)
            measure(side, stack.url, rp_uuid, cpu, args)
            side.events = settled(lambda: nova.events)
    except Exception as err:  # noqa: BLE001 - reported, the rest still measured
        side.error = f'{type(err).__name__}: {str(err)[-1500:]}'
    finally:
        nova.shutdown()
    return side


def run_steward(args, db, broker, tmp):
    side = Side('Steward', f'steward api ({args.workers} workers), '
                           f'{args.conductors} x steward conductor, '
                           f'steward agent (fake driver), {db.description}, RabbitMQ, '
                           f'Placement (2 workers, {db.kind})')
    nova = cyborg_upstream.start_nova_stub()
    placement = deployment = None
    try:
        placement = topology.start_placement(db, tmp)
        deployment = topology.StewardDeployment(
            tmp, broker, db, placement.url, nova_url(nova), args.workers,
            conductors=args.conductors)
        t0 = time.perf_counter()
        rp_uuid = deployment.start()
        side.ready = time.perf_counter() - t0
        cpu = deployment.cpu_probes()
        cpu.update(shared_probes(db, broker, placement))
        measure(side, deployment.url, rp_uuid, cpu, args)
        side.server_error = first_error(os.path.join(tmp, f'{role}.log')
                                        for role in ('api', 'conductor'))
        deployment.check()
        side.events = settled(lambda: nova.events)
    except Exception as err:  # noqa: BLE001 - reported, and Cyborg still measured
        side.error = failure(err, tmp)
    finally:
        if deployment:
            deployment.stop()
        if placement:
            placement.stop()
        nova.shutdown()
    return side


def run_cyborg(args, db, broker, tmp):
    side = Side('upstream Cyborg', f'Cyborg 17 API under gunicorn ({args.workers} '
                                   f'workers x {cyborg_upstream.API_THREADS} threads), '
                                   f'cyborg-conductor, cyborg-agent (fake driver), '
                                   f'{db.description}, RabbitMQ, Placement (2 workers, '
                                   f'{db.kind})')
    placement = deployment = None
    os.makedirs(tmp, exist_ok=True)
    try:
        cyborg_upstream.ensure_venv()
        placement = topology.start_placement(db, tmp)
        db_url = db.create(f'cyborg_{uuid.uuid4().hex[:8]}', upstream=True)
        deployment = cyborg_upstream.Deployment(tmp, broker, placement.url, db_url,
                                                api_workers=args.workers)
        t0 = time.perf_counter()
        rp_uuid = deployment.start()
        side.ready = time.perf_counter() - t0
        procs = deployment.services.procs
        cpu = {'api': lambda: load.tree_cpu(procs['gunicorn'].pid),
               'conductor': lambda: load.tree_cpu(procs['cyborg-conductor'].pid),
               'agent': lambda: load.tree_cpu(procs['cyborg-agent'].pid)}
        cpu.update(shared_probes(db, broker, placement))
        measure(side, deployment.url, rp_uuid, cpu, args)
        side.server_error = first_error(deployment.services.log(name)
                                        for name in ('gunicorn', 'cyborg-conductor'))
        deployment.services.check()
        side.events = settled(lambda: deployment.nova.events)
    except Exception as err:  # noqa: BLE001 - said in the output, not hidden
        side.error = failure(err, tmp)
    finally:
        if deployment:
            deployment.stop()
        if placement:
            placement.stop()
    side.description += (f'; schema by cyborg-dbsync {SCHEMA[db.kind]}; '
                         f'{cyborg_upstream.installed_versions()}')
    return side


# How tests/fixtures/cyborg_upstream.py makes Cyborg's schema: upstream's migrations fail on
# PostgreSQL (an unnamed ENUM), so there it is its create_schema with the ENUM named.
SCHEMA = {'MariaDB': 'upgrade (its migrations, unchanged)',
          'PostgreSQL': 'create_schema with the ARQ state ENUM named (upstream\'s '
                        'upgrade and create_schema both fail on PostgreSQL)'}


def nova_url(nova):
    return f'http://127.0.0.1:{nova.server_address[1]}/v2.1'


def shared_probes(db, broker, placement):
    return {'Placement': lambda: load.tree_cpu(placement.pid),
            db.kind: lambda: load.tree_cpu(db.pid),
            'RabbitMQ': lambda: load.tree_cpu(broker.proc.pid)}


def first_error(paths):
    """The first ERROR line of the logs (its first 400 characters), or None: why
    the failed instances failed, from the server's side."""
    for path in paths:
        try:
            with open(path, errors='replace') as f:
                for line in f:
                    if ' ERROR ' in line or line.startswith('ERROR'):
                        return line.strip()[:400]
        except OSError:
            continue
    return None


def failure(err, tmp):
    """The error (its end: start-up errors carry a service's log tail), and where
    the logs are kept."""
    return f'{type(err).__name__}: {str(err)[-1500:]}\n  logs in {tmp}'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--database', choices=('postgresql', 'mariadb'), default='postgresql')
    ap.add_argument('--workers', type=int, default=2,
                    help='API processes of each side ([api] workers; gunicorn workers)')
    ap.add_argument('--conductors', type=int, default=1,
                    help="Steward's steward conductor processes")
    ap.add_argument('--sequential', type=int, default=200)
    ap.add_argument('--clients', default='4,16',
                    help='comma-separated numbers of concurrent clients')
    ap.add_argument('--per-client', type=int, default=50)
    ap.add_argument('--warm-up', type=int, default=50)
    ap.add_argument('--rounds', type=int, default=3,
                    help="Steward's production side and steward serve measured in turn "
                         'this many times (upstream Cyborg once)')
    ap.add_argument('--quick', action='store_true',
                    help='small counts (10 sequential, 3 per client, 3 warm-up): to '
                         'check the script, not for figures')
    ap.add_argument('--no-cyborg', action='store_true',
                    help='leave upstream Cyborg out')
    ap.add_argument('--no-single', action='store_true',
                    help='leave out steward serve (the single process) under the same load')
    ap.add_argument('--single-on-server', action='store_true',
                    help='in each round, steward serve once more on a database of the '
                         'same server (PostgreSQL or MariaDB) instead of SQLite: what '
                         'the topology costs beyond the database')
    ap.add_argument('--keep-logs', action='store_true',
                    help="keep every service's log and configuration (path printed)")
    args = ap.parse_args()
    if args.quick:
        args.sequential, args.per_client, args.warm_up, args.rounds = 10, 3, 3, 1
    args.client_counts = [int(x) for x in args.clients.split(',') if x.strip()]
    if args.rounds < 1:
        ap.error('--rounds must be at least 1')
    if not rabbit.installed():
        sys.exit('rabbitmq-server is not installed (tools/system-packages.sh)')

    # SIGTERM (timeout, a CI runner) ends the run through the finally blocks: the
    # broker and the database server do not die with this process on their own.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix='steward-bench-production-')
    print(f'machine: {os.cpu_count()} cores; '
          f'{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; '
          f'load average {load.load_average()}', flush=True)
    broker = db = None
    sides = []
    try:
        # Assigned before start(): a broker that fails to start is still destroyed.
        broker = rabbit.RabbitServer(base=os.path.join(tmp, 'rabbit'))
        try:
            broker.start()
            db = topology.database(args.database)
        except RuntimeError as err:
            sides.append(Side('shared services', 'RabbitMQ and the database server'))
            sides[0].error = failure(err, tmp)
            report(sides[0], args)
        else:
            # The production side and steward serve in turn, round after round.
            stewards, singles, served = [], [], []
            for i in range(args.rounds):
                steward = run_steward(args, db, broker, os.path.join(tmp, f'steward-{i}'))
                if args.rounds > 1:
                    steward.name += f', round {i + 1} of {args.rounds}'
                stewards.append(steward)
                report(steward, args)
                for runs, on, wanted in ((singles, None, not args.no_single),
                                         (served, db, args.single_on_server)):
                    if wanted:
                        single = run_single(args, on)
                        if args.rounds > 1:
                            single.name += f', round {i + 1} of {args.rounds}'
                        runs.append(single)
                        report(single, args)
            sides += stewards + singles + served
            cyborg = None
            if not args.no_cyborg:
                cyborg = run_cyborg(args, db, broker, os.path.join(tmp, 'cyborg'))
                sides.append(cyborg)
                report(cyborg, args)
            if singles:
                against_single(stewards, singles)
            if served:
                against_single(stewards, served, f'steward serve on {db.kind}')
            if cyborg:
                side_by_side(median_round(stewards), cyborg,
                             median_round(singles) if singles else None)
    finally:
        if db is not None:
            db.stop()
        if broker is not None:
            broker.destroy()
        kept = args.keep_logs or any(s.error for s in sides)
        if kept:
            print(f'logs kept in {tmp}')
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if any(s.error for s in sides):
        sys.exit(1)


if __name__ == '__main__':
    main()
