"""Steward's own Placement writes while a query of allocation candidates explodes:
the embedded Placement's lanes, measured.

    .venv/bin/python bench/placement_stall.py [--devices 8] [--groups 8] [--writes 50]
        [--port-writes 10] [--port-timeout 10] [--no-before]

Starts the embedded Placement as `steward serve` does (steward/placement/handle.py:
``[placement] embedded_workers`` 2 processes of ``embedded_threads`` 4 threads on a
TCP port for Nova and clients, ``embedded_steward_workers`` 1 on a Unix socket for
Steward's client; SQLite) and registers one host as Steward does: its compute
node, ``--devices`` child providers of one unit each (``CUSTOM_BENCH_GPU``, one per
device) and one more provider of 8 units whose ``reserved`` the writes move. Then:

1. the query Nova sends for eight GPUs written as eight one-unit groups
   (``--groups``, ``group_policy=none``, ``limit=1000``), under Steward's defaults
   (steward/placement/settings.py) and, on a second Placement, under Placement's
   upstream defaults given through ``[placement] embedded_config_file`` (no cap,
   depth-first, no wide-tree pruning: Launchpad bugs 2070257 and 2126751), where it
   runs for minutes;
2. ``--writes`` Steward-style writes, ``PlacementClient.set_reserved`` through the
   Steward lane, one at a time: with nothing else running, then while that
   unbounded query runs (started on the TCP port, and seen burning Placement's
   CPU first);
3. ``--port-writes`` through the TCP port beside the query, each by a client of
   its own whose connection was opened before the query (a conductor's pool
   holds connections to every process of a listener; whichever process accepted
   one serves its requests), each given ``--port-timeout`` seconds: what a client
   of the query's listener gets from its threads;
4. the query abandoned (its client closes the connection): how long until
   Placement stops generating (steward/placement/candidate_watch.py);
5. unless ``--no-before``, Placement as `steward serve` ran it before the lanes (2
   processes of 1 thread, one listener for everyone): the writes of 3 beside the
   same query. A write whose connection the query's process holds is answered
   only after the query, minutes later.

Each write's wall time: p50, p99, max. The query must still be running when the
last write returns, or the figures say nothing: that is checked and printed.
"""
import argparse
import os
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import load  # noqa: E402
from tests.multihost.rabbit import free_port  # noqa: E402

HEADERS = {'X-Auth-Token': 'admin', 'OpenStack-API-Version': 'placement 1.39'}
RC = 'CUSTOM_BENCH_GPU'
# Placement's own defaults, which Steward's bound: an operator's file lifting them.
UPSTREAM = """[placement]
max_allocation_candidates = -1
allocation_candidates_generation_strategy = depth-first
[workarounds]
optimize_for_wide_provider_trees = false
"""


def register_host(url, devices):
    """A compute node, ``devices`` one-unit children, and the provider of 8 units
    the writes move (returned)."""
    import httpx
    with httpx.Client(base_url=url, headers=HEADERS, trust_env=False, timeout=60) as c:
        root = str(uuid.uuid4())
        # Named after its uuid: several hosts in one Placement (the tests').
        name = f'bench-host-{root[:8]}'
        c.post('/resource_providers', json={'uuid': root, 'name': name}
               ).raise_for_status()
        c.put(f'/resource_classes/{RC}').raise_for_status()
        for i in range(devices + 1):
            rp = str(uuid.uuid4())
            c.post('/resource_providers', json={
                'uuid': rp, 'name': f'{name}_dev{i}', 'parent_provider_uuid': root}
                   ).raise_for_status()
            c.put(f'/resource_providers/{rp}/inventories', json={
                'resource_provider_generation': 0,
                'inventories': {RC: {'total': 8 if i == devices else 1}}}
                  ).raise_for_status()
    return rp


def query_path(groups):
    params = {f'resources{i}': f'{RC}:1' for i in range(1, groups + 1)}
    params.update(group_policy='none', limit='1000')
    return '/allocation_candidates?' + urllib.parse.urlencode(params)


def timed_query(url, groups):
    import httpx
    started = time.monotonic()
    with httpx.Client(base_url=url, headers=HEADERS, trust_env=False, timeout=600) as c:
        r = c.get(query_path(groups))
        r.raise_for_status()
    return time.monotonic() - started, len(r.json()['allocation_requests'])


class RawQuery:
    """The query sent on a socket of its own: ``answered`` once a byte of the
    answer arrives; ``abandon()`` closes the connection, as a client that gave up."""

    def __init__(self, url, groups):
        host, port = urllib.parse.urlsplit(url).netloc.rsplit(':', 1)
        self.sock = socket.create_connection((host, int(port)))
        headers = ''.join(f'{k}: {v}\r\n' for k, v in HEADERS.items())
        self.sock.sendall(f'GET {query_path(groups)} HTTP/1.1\r\nHost: {host}\r\n'
                          f'{headers}\r\n'.encode())
        self.sent = time.monotonic()
        self.answered = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            if self.sock.recv(1):
                self.answered.set()
        except OSError:
            pass

    def abandon(self):
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def wait_for(what, condition, timeout):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            sys.exit(f'gave up waiting for {what} after {timeout:.0f} s')
        time.sleep(0.05)


def wait_busy(child, query):
    """Until Placement has spent a second of CPU since the query was sent: it is
    generating (an idle Placement spends next to none)."""
    cpu0 = load.tree_cpu(child.pid)
    wait_for('the query to keep Placement busy',
             lambda: load.tree_cpu(child.pid) - cpu0 >= 1.0 or query.answered.is_set(),
             120)
    if query.answered.is_set():
        sys.exit('the query answered before it could be measured against: raise '
                 '--groups or --devices')


def timed_writes(client, rp, count, timeout=None):
    """``count`` set_reserved on ``rp``, one at a time, alternating 1 and 0: each
    time a write (PUT). Returns (wall times of those that succeeded, failures)."""
    from steward.common import exception
    times, failed = [], 0
    for i in range(count):
        started = time.monotonic()
        try:
            (client() if callable(client) else client).set_reserved(rp, RC, (i + 1) % 2)
        except exception.PlacementUnavailable:
            failed += 1
            continue
        times.append(time.monotonic() - started)
    return times, failed


def early_clients(conf, url, rp, count):
    """``count`` clients, each with its one connection opened now (a conductor's
    pool holds connections to every process of the listener): whichever process
    accepted it serves its writes."""
    from steward.placement import client as client_mod
    clients = [client_mod.PlacementClient.from_conf(conf, endpoint=url)
               for _ in range(count)]
    for c in clients:
        c.get_inventory(rp)
    return iter(clients).__next__


def summary(times):
    if not times:
        return 'none completed'
    return (f'p50 {load.ms(load.pct(times, 50))}, p99 {load.ms(load.pct(times, 99))}, '
            f'max {load.ms(max(times))}')


def abandoned_after(child, query, log_file):
    """Seconds from the client's close until Placement logs that it stopped."""
    closed = time.monotonic()
    query.abandon()
    wait_for('Placement to stop the abandoned query',
             lambda: 'abandoned by its client' in open(log_file).read(), 60)
    return time.monotonic() - closed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--devices', type=int, default=8,
                        help='one-unit providers on the host (8)')
    parser.add_argument('--groups', type=int, default=8,
                        help='one-unit request groups in the query (8)')
    parser.add_argument('--writes', type=int, default=50,
                        help='set_reserved measured in each case (50)')
    parser.add_argument('--port-writes', type=int, default=10,
                        help='writes through the TCP port beside the query (10)')
    parser.add_argument('--port-timeout', type=float, default=10.0,
                        help='seconds each of those may take (10)')
    parser.add_argument('--no-before', action='store_true',
                        help='skip Placement as it ran before the lanes')
    args = parser.parse_args()
    from steward.conf import CONF
    from steward.placement import client as client_mod
    from steward.placement import handle

    tmp = tempfile.mkdtemp(prefix='steward-bench-stall-')
    upstream = os.path.join(tmp, 'placement-upstream.conf')
    with open(upstream, 'w') as f:
        f.write(UPSTREAM)
    CONF([], project='steward', default_config_files=[])
    print(f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, {os.cpu_count()} cores, '
          f'load average {"/".join(f"{x:.1f}" for x in os.getloadavg())}; one host of '
          f'{args.devices} one-unit providers, {args.groups} one-unit groups, '
          f'group_policy=none, limit=1000')

    def start(name, lane=True, **kwargs):
        log = os.path.join(tmp, f'{name}.log')
        sock = handle.steward_socket_path() if lane else None
        child = handle.start_subprocess(
            f'sqlite:///{tmp}/{name}.sqlite', '127.0.0.1', free_port(), log_file=log,
            steward_socket=sock, **kwargs)
        return child, sock, log

    child, sock, _log = start('defaults')
    try:
        register_host(child.url, args.devices)
        took, found = timed_query(child.url, args.groups)
        print(f"query under Steward's defaults: {took:.2f} s, {found} candidates")
    finally:
        child.stop()
        handle.remove_steward_socket(sock)

    child, sock, log = start('upstream', config_file=upstream)
    try:
        rp = register_host(child.url, args.devices)
        lane = client_mod.PlacementClient.from_conf(CONF, endpoint=child.steward_url)
        timed_writes(lane, rp, 4)               # warm: its connection, its cache
        idle, _ = timed_writes(lane, rp, args.writes)
        print(f"writes through Steward's lane, nothing else running: {summary(idle)}")

        CONF.set_override('timeout', args.port_timeout, group='placement')
        public = early_clients(CONF, child.url, rp, args.port_writes)
        query = RawQuery(child.url, args.groups)
        wait_busy(child, query)
        busy, failed = timed_writes(lane, rp, args.writes)
        through_port, failed_port = timed_writes(public, rp, args.port_writes)
        running = not query.answered.is_set()
        print(f"writes through Steward's lane, the query running: {summary(busy)}"
              f"{f', {failed} failed' if failed else ''}")
        print(f'writes through the TCP port beside it ({CONF.placement.embedded_threads} '
              f'threads a process), each on a connection opened before the query: '
              f'{summary(through_port)}; {failed_port} of {args.port_writes} '
              f'unanswered after {args.port_timeout:.0f} s')
        print(f'the query {"was still running" if running else "HAD ANSWERED"} '
              f'{time.monotonic() - query.sent:.1f} s after it was sent, when the '
              f'last write returned')
        print(f'the query abandoned: Placement stopped generating '
              f'{abandoned_after(child, query, log):.2f} s after its client closed')
    finally:
        child.stop()
        handle.remove_steward_socket(sock)

    if not args.no_before:
        child, _sock, log = start('before', lane=False, config_file=upstream, workers=2,
                                   threads=1)
        try:
            rp = register_host(child.url, args.devices)
            clients = early_clients(CONF, child.url, rp, args.port_writes)
            query = RawQuery(child.url, args.groups)
            wait_busy(child, query)
            times, failed = timed_writes(clients, rp, args.port_writes)
            print(f'before the lanes (2 processes of 1 thread, one listener), the query '
                  f'running, each write on a connection opened before it: '
                  f'{summary(times)}; {failed} of {args.port_writes} unanswered after '
                  f'{args.port_timeout:.0f} s')
            query.abandon()
        finally:
            child.stop()


if __name__ == '__main__':
    main()
