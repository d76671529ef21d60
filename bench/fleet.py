"""A fleet of compute hosts reporting to one or more conductors over RabbitMQ,
PostgreSQL behind them, the real Placement.

Starts its own throw-away RabbitMQ node, a database on a throw-away PostgreSQL
cluster, the real Placement and ``--conductors`` `steward conductor` processes
(they share the conductor topic: the broker hands each report to one of them),
then runs ``--agents`` simulated hosts in this process (bench/fleet_agent.py:
each sends what a real agent with the fake driver sends, one device with 16
attach handles, over the real broker; ``--gpus N``: what the pci driver sends
for an N-GPU server whose functions are one pool, issue 52; ``--real-agents``:
real AgentManager objects instead).

``--compute-nodes nova`` (the default: doc/multihost.md's production topology
runs beside Nova, whose nova-compute registers each host's compute-node
provider): the bench creates every host's root provider beforehand through
Placement's API, as Nova's resource tracker does (its VCPU, MEMORY_MB and
DISK_GB inventory), untimed, and the conductors run with ``[placement]
create_compute_node = false``. ``--compute-nodes steward``: a cloud without
Nova; the conductors create the compute nodes themselves, one more Placement
write per host inside the timed cycle. Prints:

* the first registration cycle (every host's first report: devices written to
  PostgreSQL, compute node and device providers created in Placement), target
  under 2 minutes at 10 000 hosts;
* conductor CPU time per quiet report (/proc/<pid>/stat of every conductor,
  around ``--quiet-cycles`` cycles in which nothing changed, until the broker
  holds none of their casts), target <= 1 ms, and how many agents the
  conductors asked for a whole report meanwhile (their log lines), target 0;
* Placement writes per quiet cycle, counted twice: as the conductors answer them
  to the agents (quiet reports go as casts, unanswered), and in Placement's own
  request log; target 0;
* the CPU each process spent (conductors, Placement, PostgreSQL, RabbitMQ, this
  process) per first and per quiet report, and each conductor's resident memory
  (target under 1 GiB): what says which of them limits the fleet.

    .venv/bin/python bench/fleet.py [--agents 1000] [--gpus 8] [--conductors 1] [--quiet-cycles 3]
        [--clients 64 a conductor] [--compute-nodes nova|steward] [--profile DIR]

``--profile DIR``: py-spy (not a Steward dependency: ``pip install py-spy``)
samples each conductor while it holds the GIL, and Placement's workers, during
the first cycle and during the quiet ones; the raw stacks go to DIR
(conductor-N-first.raw, placement-N-first.raw, ...-quiet.raw).
"""
import argparse
import concurrent.futures
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The client side of 1000 agents in one process: oslo.messaging warns about its
# pools and queues, which says nothing about a real agent.
logging.getLogger('oslo_messaging').setLevel(logging.ERROR)
logging.getLogger('oslo.messaging').setLevel(logging.ERROR)
sys.path.insert(0, ROOT)
warnings.filterwarnings('ignore', message='.*[Ee]ventlet.*')

from bench import fleet_agent  # noqa: E402
from bench import load  # noqa: E402
from tests.multihost import pg  # noqa: E402
from tests.multihost import rabbit  # noqa: E402

BIN = os.path.dirname(sys.executable)
WRITE = re.compile(r'"(PUT|POST|DELETE|PATCH) /')
READ = re.compile(r'"GET /')


def rss_mib(pid):
    """Resident memory of a process (VmRSS), in MiB."""
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024
    return 0.0


def placement_requests(log_path, pattern=WRITE):
    with open(log_path, errors='replace') as f:
        return sum(1 for line in f if 'placement.requestlog' in line and pattern.search(line))


def write_conf(path, sections):
    with open(path, 'w') as f:
        for name, values in sections.items():
            f.write(f'[{name}]\n' + ''.join(f'{k} = {v}\n' for k, v in values.items()))


def nova_compute_nodes(url, hosts, threads=8):
    """Each host's compute-node provider, registered as nova-compute's resource
    tracker registers it (a provider named after the host, with a uuid of its own,
    and its VCPU, MEMORY_MB and DISK_GB inventory), through Placement's API.
    Returns {host: its provider's uuid}."""
    import uuid

    import httpx

    roots = {}

    def register(chunk):
        with httpx.Client(base_url=url, trust_env=False, timeout=60, headers={
                'X-Auth-Token': 'admin',
                'OpenStack-API-Version': 'placement 1.39'}) as s:
            for host in chunk:
                rp = roots[host] = str(uuid.uuid4())
                r = s.post('/resource_providers', json={'name': host, 'uuid': rp})
                if r.status_code not in (200, 201):
                    raise RuntimeError(f'compute node {host}: {r.status_code} {r.text}')
                r = s.put(f'/resource_providers/{rp}/inventories', json={
                    'resource_provider_generation': 0, 'inventories': {
                        'VCPU': {'total': 64, 'allocation_ratio': 4.0},
                        'MEMORY_MB': {'total': 262144},
                        'DISK_GB': {'total': 2048}}})
                if r.status_code != 200:
                    raise RuntimeError(f'compute node {host}: {r.status_code} {r.text}')

    chunks = [hosts[i::threads] for i in range(threads)]
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(register, chunks))
    return roots


def sent(agents):
    """(digests sent alone, whole reports sent) by all the agents so far."""
    return (sum(a.reports.digests_sent for a in agents),
            sum(a.reports.reports_sent for a in agents))


def asked_again(tmp):
    """How many times the conductors asked an agent for its whole report (agent
    RPC report_again; a simulated agent does not listen for it), from their logs."""
    count = 0
    for name in os.listdir(tmp):
        if name.startswith('conductor-') and name.endswith('.log'):
            with open(os.path.join(tmp, name), errors='replace') as f:
                count += sum('asking its agent for the whole report' in line for line in f)
    return count


def run_cycle(agents, clients):
    """One report of every agent, ``clients`` at a time. Returns (seconds, Placement
    writes the conductors reported, reports that changed, errors reported)."""
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda a: a.run_cycle(), agents))
    elapsed = time.monotonic() - started
    return (elapsed, sum(r.get('placement_writes', 0) for r in results),
            sum(1 for r in results if r.get('changed')),
            sum(1 for r in results if r.get('error')))


class Probes:
    """CPU seconds of each process of the fleet, read together."""

    def __init__(self, conductors, placement, srv, broker):
        with open(os.path.join(srv.datadir, 'postmaster.pid')) as f:
            postmaster = int(f.readline())
        self.probes = {f'conductor {i + 1}': (lambda p=c.pid: load.tree_cpu(p))
                       for i, c in enumerate(conductors)}
        self.probes.update({
            'Placement': lambda: load.tree_cpu(placement.pid),
            # The cluster is this benchmark's own (tests/fixtures/pg_fixture.py).
            'PostgreSQL': lambda: load.tree_cpu(postmaster),
            'RabbitMQ': lambda: load.tree_cpu(broker.proc.pid),
            'agents (this process)': load.cpu_self})

    def read(self):
        return {name: probe() for name, probe in self.probes.items()}

    @staticmethod
    def per_report(before, after, reports):
        return {name: (after[name] - before[name]) / reports * 1000 for name in before}


def print_cpu(label, per_report):
    print(f'  {label} CPU ms per report: ' +
          ', '.join(f'{name} {v:.2f}' for name, v in per_report.items()) +
          f'; all {sum(per_report.values()):.2f}')


def children(pid):
    try:
        with open(f'/proc/{pid}/task/{pid}/children') as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def start_profiles(conductors, placement, out_dir, phase):
    if not out_dir:
        return []
    os.makedirs(out_dir, exist_ok=True)
    spy = os.path.join(BIN, 'py-spy')
    targets = [(f'conductor-{i + 1}', c.pid, True) for i, c in enumerate(conductors)]
    # Placement's workers (forked from its supervisor): their CPU, not only the GIL.
    targets += [(f'placement-{i + 1}', pid, False)
                for i, pid in enumerate(children(placement.pid))]
    return [subprocess.Popen([spy, 'record'] + (['--gil'] if gil else []) +
                             ['--nonblocking', '-r', '100', '-f', 'raw', '-o',
                              os.path.join(out_dir, f'{name}-{phase}.raw'),
                              '-p', str(pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name, pid, gil in targets]


def stop_profiles(spies):
    for spy in spies:
        spy.send_signal(2)      # py-spy writes its file on SIGINT
    for spy in spies:
        spy.wait(60)


def gpu_tree(conf, root, gpus):
    """A fake sysfs tree of ``gpus`` H100-like functions (10de:2330 on vfio-pci,
    NUMA node 0) and the pci driver configured to pool them: what each simulated
    host of ``--gpus`` discovers (the hosts share it; names carry the host)."""
    import json
    import pathlib
    from tests.fixtures.sysfs_tree import make_gpu_server
    make_gpu_server(pathlib.Path(root), [0] * gpus)
    conf.set_override('sysfs_root', root)
    conf.set_override('device_spec', [json.dumps({
        'vendor_id': '10de', 'product_id': '2330', 'resource_class': 'PGPU',
        'pool': True})], group='pci')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--agents', type=int, default=1000)
    parser.add_argument('--conductors', type=int, default=1)
    parser.add_argument('--quiet-cycles', type=int, default=3)
    parser.add_argument('--learning-cycles', type=int, default=8,
                        help='cycles run before the quiet ones until one has no '
                             'report that changed anything (several conductors)')
    parser.add_argument('--clients', type=int,
                        help='agents reporting at the same moment (default: 64 a '
                             'conductor, the reports one takes at once: '
                             "oslo.messaging's executor_thread_pool_size; a fleet's "
                             'first cycle has thousands more waiting in the broker)')
    parser.add_argument('--compute-nodes', choices=('nova', 'steward'), default='nova',
                        help='who creates each host\'s compute-node provider: Nova '
                             '(beforehand, untimed, as in doc/multihost.md\'s '
                             'topology) or the conductors (a cloud without Nova)')
    parser.add_argument('--gpus', type=int, default=0,
                        help='each host an N-GPU server instead of the fake driver\'s '
                             'device: the pci driver over a fake sysfs tree of N '
                             'identical functions on one NUMA node, in one pool '
                             '(issue 52: one provider of total N per host)')
    parser.add_argument('--real-agents', action='store_true',
                        help='real AgentManager objects (a discovery per report)')
    parser.add_argument('--conf', action='append', default=[], metavar='SECTION.KEY=VALUE',
                        help='an option of the conductors\' configuration (repeatable)')
    parser.add_argument('--profile', metavar='DIR',
                        help='py-spy the conductors during the first cycle')
    parser.add_argument('--keep', action='store_true',
                        help='keep the logs (conductors, Placement) and print where')
    args = parser.parse_args()
    if args.clients is None:
        args.clients = 64 * args.conductors
    # Stopped (SIGTERM): the broker, Placement and the conductors go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not rabbit.installed():
        sys.exit('rabbitmq-server is not installed (tools/system-packages.sh)')
    srv = pg.server()
    if srv is None:
        sys.exit('PostgreSQL is not installed (tools/system-packages.sh)')

    from steward.placement import handle as embedded
    tmp = tempfile.mkdtemp(prefix='steward-fleet-')
    broker = rabbit.RabbitServer(base=os.path.join(tmp, 'rabbit')).start()
    placement, conductors, transport = None, [], None
    try:
        _name, db_url = pg.create_database(srv, prefix='steward_fleet')
        placement_log = os.path.join(tmp, 'placement.log')
        # Placement on PostgreSQL too: on SQLite, 32 reports at once make it answer
        # 500 "database is locked" now and then, and the benchmark would measure that.
        _name, placement_db = pg.create_database(srv, prefix='placement_fleet')
        placement_port = rabbit.free_port()
        placement = embedded.start_subprocess(placement_db, '127.0.0.1', placement_port,
                                              log_file=placement_log)
        for i in range(args.conductors):
            conf_path = os.path.join(tmp, f'conductor-{i + 1}.conf')
            sections = {
                'DEFAULT': {'host': f'fleet-conductor-{i + 1}', 'state_path': tmp,
                            'transport_url': broker.url(), 'rpc_response_timeout': 600},
                'database': {'connection': db_url},
                # The Placement started above, reached as the embedded one is: with
                # the service role that a deployment's Keystone gives Steward's
                # service user (POST /reshaper needs it; the trial admin token of
                # doc/multihost.md has only admin, and gets a PUT per provider).
                'placement': {'embedded': 'true', 'embedded_host': '127.0.0.1',
                              'embedded_port': placement_port,
                              'create_compute_node':
                                  str(args.compute_nodes == 'steward').lower()}}
            for option in args.conf:
                name, _, value = option.partition('=')
                section, _, key = name.rpartition('.')
                sections.setdefault(section or 'DEFAULT', {})[key] = value
            write_conf(conf_path, sections)
            if i == 0:
                subprocess.run([os.path.join(BIN, 'steward'), 'db', 'sync',
                                '--config-file', conf_path], check=True,
                               capture_output=True)
            log = open(os.path.join(tmp, f'conductor-{i + 1}.log'), 'wb')
            conductors.append(subprocess.Popen(
                [os.path.join(BIN, 'steward'), 'conductor', '--config-file', conf_path],
                stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 120
        while broker.consumers('steward-conductor') < args.conductors:
            if any(c.poll() is not None for c in conductors) or \
                    time.monotonic() > deadline:
                sys.exit('a conductor did not start; logs in ' + tmp)
            time.sleep(0.2)

        # The agents: this process is N compute hosts talking to the broker.
        from steward.agent import manager as agent_manager
        from steward.conductor import rpcapi
        from steward.conf import CONF
        from steward.drivers import fake
        CONF([], project='steward', default_config_files=[])
        CONF.set_override('transport_url', broker.url())
        from steward.common import rpc
        transport = rpc.Transport()
        conductor_api = rpcapi.ConductorAPI(transport=transport)
        # Registered with the transport; read at each call.
        CONF.set_override('rpc_response_timeout', 600)
        hosts = [f'fleet-{i:05d}' for i in range(args.agents)]
        if args.compute_nodes == 'nova':
            started = time.monotonic()
            nova_compute_nodes(placement.url, hosts)
            nova_seconds = time.monotonic() - started
        def drivers(h):
            if not args.gpus:
                return [fake.FakeDriver(CONF, h)]
            from steward.drivers.pci import driver as pci
            return [pci.PciDriver(CONF, h)]

        if args.gpus:
            gpu_tree(CONF, os.path.join(tmp, 'sys'), args.gpus)
        if args.real_agents:
            agents = [agent_manager.AgentManager(CONF, conductor_api, host=h,
                                                 drivers=drivers(h)) for h in hosts]
        else:
            agents = [fleet_agent.SimAgent(conductor_api, h, drivers(h)) for h in hosts]

        print(f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, '
              f'{os.cpu_count()} cores, load average {load.load_average()}')
        print(f'{args.agents} {"real" if args.real_agents else "simulated"} agents '
              + (f'(pci driver: {args.gpus} identical functions each, one pool) '
                 if args.gpus else '(fake driver: 1 device, 16 handles each) ') +
              f'{args.conductors} '
              f'conductor(s) (pids {", ".join(str(c.pid) for c in conductors)}), '
              f'RabbitMQ, PostgreSQL {os.path.basename(srv.bindir.rstrip("/bin"))}, '
              f'{args.clients} agents reporting at once'
              + (f'; conductor options {" ".join(args.conf)}' if args.conf else ''))
        if args.compute_nodes == 'nova':
            print(f'compute nodes: created beforehand as Nova creates them (untimed, '
                  f'{nova_seconds:.1f} s); conductors with [placement] '
                  f'create_compute_node = false (the production topology)')
        else:
            print('compute nodes: created by the conductors in the first cycle '
                  '([placement] create_compute_node = true: a cloud without Nova)')
        probes = Probes(conductors, placement, srv, broker)
        spies = start_profiles(conductors, placement, args.profile, 'first')
        cpu0, writes0 = probes.read(), placement_requests(placement_log)
        reads0 = placement_requests(placement_log, READ)
        elapsed, reported, changed, errors = run_cycle(agents, args.clients)
        cpu1, writes1 = probes.read(), placement_requests(placement_log)
        reads1 = placement_requests(placement_log, READ)
        stop_profiles(spies)
        first = Probes.per_report(cpu0, cpu1, args.agents)
        conductor_ms = sum(v for k, v in first.items() if k.startswith('conductor'))
        print(f'first registration cycle: {elapsed:.1f} s wall '
              f'({elapsed / args.agents * 1000:.2f} ms per agent), conductor CPU '
              f'{conductor_ms:.2f} ms per report, {writes1 - writes0} Placement writes '
              f'({(writes1 - writes0) / args.agents:.2f} per host) and {reads1 - reads0} '
              f'reads, {changed} reports changed, {errors} reported an error '
              f'(target: 10 000 hosts in <= 120 s)')
        print_cpu('first cycle', first)

        # Each conductor remembers the reports it has taken itself: with several,
        # a host's report that reaches one that has not seen it yet goes through
        # the diff once (and reads its providers from Placement). Those cycles
        # are printed, then the quiet ones are measured.
        for cycle in range(1, args.learning_cycles + 1):
            cpu0, reads0 = probes.read(), placement_requests(placement_log, READ)
            elapsed, _reported, changed, errors = run_cycle(agents, args.clients)
            if not changed:
                break
            cpu1, reads1 = probes.read(), placement_requests(placement_log, READ)
            spent = sum(cpu1[k] - cpu0[k] for k in cpu0 if k.startswith('conductor'))
            print(f'learning cycle {cycle}: {elapsed:.1f} s wall, {changed} of '
                  f'{args.agents} reports reached a conductor that had not seen their '
                  f'host\'s report: {reads1 - reads0} Placement reads, conductor CPU '
                  f'{spent:.1f} s for the whole cycle')
        spies = start_profiles(conductors, placement, args.profile, 'quiet')
        sent0 = sent(agents)
        asked0 = asked_again(tmp)
        cpu0, writes0 = probes.read(), placement_requests(placement_log)
        walls, reported_total, changed_total = [], 0, 0
        for _ in range(args.quiet_cycles):
            elapsed, reported, changed, errors = run_cycle(agents, args.clients)
            walls.append(elapsed)
            reported_total += reported
            changed_total += changed
        # Quiet reports are casts (conductor RPC 1.4): the conductors may still be
        # taking them when the agents are done. Counted once the queue is empty.
        drained = time.monotonic()
        while broker.queued('steward-conductor'):
            time.sleep(0.5)
        drained = time.monotonic() - drained
        cpu1, writes1 = probes.read(), placement_requests(placement_log)
        stop_profiles(spies)
        reports = args.agents * args.quiet_cycles
        quiet = Probes.per_report(cpu0, cpu1, reports)
        digests, whole = (b - a for a, b in zip(sent0, sent(agents)))
        asked = asked_again(tmp) - asked0
        print(f'quiet cycles: {args.quiet_cycles} x {args.agents} reports, '
              f'{sum(walls) / len(walls):.2f} s wall per cycle (the conductors took '
              f'the last casts {drained:.1f} s after the agents were done); the agents '
              f'sent {digests} digests alone (as casts, RPC 1.4 report_quiet, once a '
              f'conductor said it can ask for a whole report; else calls, 1.3 '
              f'report_unchanged) and {whole} whole reports; the conductors asked '
              f'{asked} agents for a whole report (target 0)')
        for name, v in quiet.items():
            if name.startswith('conductor'):
                print(f'  {name} CPU per quiet report: {v * args.conductors:.3f} ms '
                      f'(of the reports it got; target <= 1 ms)')
        print(f'  conductor CPU per quiet report, all conductors: '
              f'{sum(v for k, v in quiet.items() if k.startswith("conductor")):.3f} ms')
        print_cpu('quiet cycle', quiet)
        print(f'  Placement writes per quiet cycle: '
              f'{reported_total / args.quiet_cycles:g} as the conductors answered '
              f'(a cast has no answer), '
              f'{(writes1 - writes0) / args.quiet_cycles:g} in Placement\'s request log '
              f'(target 0); reports that changed something: {changed_total}')
        print('conductor resident memory: ' + ', '.join(
            f'conductor {i + 1} {rss_mib(c.pid):.0f} MiB' for i, c in enumerate(conductors))
            + ' (target under 1024 MiB)')
    finally:
        if transport is not None:
            transport.cleanup()
        for conductor in conductors:
            conductor.terminate()
        for conductor in conductors:
            try:
                conductor.wait(30)
            except subprocess.TimeoutExpired:
                conductor.kill()
        if placement is not None:
            placement.stop()
        broker.destroy()
        if args.keep:
            print(f'logs kept in {tmp}')
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
