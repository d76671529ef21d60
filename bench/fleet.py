"""A fleet of agents reporting to one conductor over RabbitMQ, PostgreSQL behind it.

Starts its own throw-away RabbitMQ node, a database on a throw-away PostgreSQL
cluster, the real Placement and one `steward conductor` process, then runs
``--agents`` simulated agents in this process: real AgentManager objects, each
with its own host name and the fake driver (one device, 16 attach handles),
reporting over the real broker. Prints:

* the first full registration cycle (every agent's first report: devices
  written to PostgreSQL, compute node and device providers created in Placement);
* conductor CPU time per quiet report (read from /proc/<conductor pid>/stat
  around ``--quiet-cycles`` cycles in which nothing changed), target <= 2 ms;
* Placement writes per quiet cycle, counted twice: as the conductor reports them
  to the agents, and in Placement's own request log; target 0.

    .venv/bin/python bench/fleet.py [--agents 1000] [--quiet-cycles 3] [--clients 32]
"""
import argparse
import concurrent.futures
import logging
import os
import re
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

from tests.multihost import pg  # noqa: E402
from tests.multihost import rabbit  # noqa: E402

BIN = os.path.dirname(sys.executable)
TICKS = os.sysconf('SC_CLK_TCK')
WRITE = re.compile(r'"(PUT|POST|DELETE|PATCH) /')
READ = re.compile(r'"GET /')


def cpu_seconds(pid):
    """utime + stime of a process (fields 14 and 15 of /proc/<pid>/stat)."""
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def placement_requests(log_path, pattern=WRITE):
    with open(log_path, errors='replace') as f:
        return sum(1 for line in f if 'placement.requestlog' in line and pattern.search(line))


def write_conf(path, sections):
    with open(path, 'w') as f:
        for name, values in sections.items():
            f.write(f'[{name}]\n' + ''.join(f'{k} = {v}\n' for k, v in values.items()))


def run_cycle(agents, clients):
    """One discovery+report of every agent, ``clients`` at a time. Returns
    (seconds, Placement writes the conductor reported, reports that changed)."""
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda a: a.run_cycle(), agents))
    elapsed = time.monotonic() - started
    return (elapsed, sum(r.get('placement_writes', 0) for r in results),
            sum(1 for r in results if r.get('changed')))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--agents', type=int, default=1000)
    parser.add_argument('--quiet-cycles', type=int, default=3)
    parser.add_argument('--clients', type=int, default=32,
                        help='agents reporting at the same moment')
    parser.add_argument('--keep', action='store_true',
                        help='keep the logs (conductor, Placement) and print where')
    args = parser.parse_args()
    if not rabbit.installed():
        sys.exit('rabbitmq-server is not installed (tools/system-packages.sh)')
    srv = pg.server()
    if srv is None:
        sys.exit('PostgreSQL is not installed (tools/system-packages.sh)')

    from steward.placement import handle as embedded
    tmp = tempfile.mkdtemp(prefix='steward-fleet-')
    broker = rabbit.RabbitServer(base=os.path.join(tmp, 'rabbit')).start()
    placement = conductor = transport = None
    try:
        _name, db_url = pg.create_database(srv, prefix='steward_fleet')
        placement_log = os.path.join(tmp, 'placement.log')
        # Placement on PostgreSQL too: on SQLite, 32 reports at once make it answer
        # 500 "database is locked" now and then, and the benchmark would measure that.
        _name, placement_db = pg.create_database(srv, prefix='placement_fleet')
        placement = embedded.start_subprocess(placement_db, '127.0.0.1',
                                              rabbit.free_port(), log_file=placement_log)
        conf_path = os.path.join(tmp, 'conductor.conf')
        write_conf(conf_path, {
            'DEFAULT': {'host': 'fleet-conductor', 'state_path': tmp,
                        'transport_url': broker.url(), 'rpc_response_timeout': 600},
            'database': {'connection': db_url},
            'placement': {'auth_type': 'admin_token', 'endpoint': placement.url,
                          'token': 'admin', 'endpoint_override': placement.url}})
        subprocess.run([os.path.join(BIN, 'steward'), 'db', 'sync', '--config-file',
                        conf_path], check=True, capture_output=True)
        log = open(os.path.join(tmp, 'conductor.log'), 'wb')
        conductor = subprocess.Popen([os.path.join(BIN, 'steward'), 'conductor',
                                      '--config-file', conf_path], stdout=log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while broker.consumers('steward-conductor') < 1:
            if conductor.poll() is not None or time.monotonic() > deadline:
                sys.exit('conductor did not start; log in ' + log.name)
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
        agents = [agent_manager.AgentManager(
            CONF, conductor_api, host=f'fleet-{i:04d}',
            drivers=[fake.FakeDriver(CONF, f'fleet-{i:04d}')])
            for i in range(args.agents)]

        print(f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, '
              f'{os.cpu_count()} cores')
        print(f'{args.agents} agents (fake driver: 1 device, 16 handles each), one '
              f'conductor (pid {conductor.pid}), RabbitMQ, PostgreSQL '
              f'{os.path.basename(srv.bindir.rstrip("/bin"))}, {args.clients} agents '
              f'reporting at once')
        cpu0, writes0 = cpu_seconds(conductor.pid), placement_requests(placement_log)
        reads0 = placement_requests(placement_log, READ)
        elapsed, reported, changed = run_cycle(agents, args.clients)
        cpu1, writes1 = cpu_seconds(conductor.pid), placement_requests(placement_log)
        reads1 = placement_requests(placement_log, READ)
        print(f'first registration cycle: {elapsed:.1f} s wall ({elapsed / args.agents * 1000:.1f} '
              f'ms per agent), conductor CPU {cpu1 - cpu0:.1f} s '
              f'({(cpu1 - cpu0) / args.agents * 1000:.1f} ms per report), '
              f'{writes1 - writes0} Placement writes and {reads1 - reads0} reads, {changed} '
              f'reports changed (target <= 60 s)')

        cpu0, writes0 = cpu_seconds(conductor.pid), placement_requests(placement_log)
        walls, reported_total, changed_total = [], 0, 0
        for _ in range(args.quiet_cycles):
            elapsed, reported, changed = run_cycle(agents, args.clients)
            walls.append(elapsed)
            reported_total += reported
            changed_total += changed
        cpu1, writes1 = cpu_seconds(conductor.pid), placement_requests(placement_log)
        reports = args.agents * args.quiet_cycles
        print(f'quiet cycles: {args.quiet_cycles} x {args.agents} reports, '
              f'{sum(walls) / len(walls):.2f} s wall per cycle')
        print(f'  conductor CPU per quiet report: {(cpu1 - cpu0) / reports * 1000:.2f} ms '
              f'(target <= 2 ms)')
        print(f'  Placement writes per quiet cycle: '
              f'{reported_total / args.quiet_cycles:g} as reported by the conductor, '
              f'{(writes1 - writes0) / args.quiet_cycles:g} in Placement\'s request log '
              f'(target 0); reports that changed something: {changed_total}')
    finally:
        if transport is not None:
            transport.cleanup()
        if conductor is not None:
            conductor.terminate()
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
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
