"""ARQ lifecycle throughput on the single-host stack (`steward serve`, default
settings: fake driver, embedded Placement, SQLite), the way Nova drives it.

One instance = GET device_profiles?name= -> POST ARQs -> collection PATCH bind ->
GET ?instance=&bind_state=resolved -> DELETE ?instance= (the issue's Nova-shaped
lifecycle). Prints, with the machine's size and the date:

* instances/second for sequential instances, and for 4 and 16 concurrent clients,
  with bind latency percentiles and, for the concurrent runs, the CPU per instance
  of the server (the one `steward serve` process) and of this load generator (a
  lean keep-alive http.client client: both share the machine's cores);
* double allocations (one attach handle held by two live instances: seen by the
  clients, and in snapshots of every Bound ARQ the API lists meanwhile) and 5xx
  answers, both of which must be 0;
* the bind of a single-accelerator device (a PCI function on a fake sysfs tree),
  where bind writes Placement's ``reserved``, reported separately;
* the accelerator API's total time for what Nova 34 sends for one boot and delete
  (a ``GET /v2`` version discovery before every call, ``GET device_profiles?name=``,
  POST, PATCH, ``GET ?instance=``, ``DELETE ?instance=``; user and service token,
  no microversion header).

    .venv/bin/python bench/arq_lifecycle.py [--sequential 200] [--clients 4,16]
                                            [--per-client 50] [--single 50] [--nova 50]
"""
import argparse
import concurrent.futures
import datetime
import http.client
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.stack import running_stack  # noqa: E402
from tests.stack import cpu_seconds as stack_cpu_seconds  # noqa: E402

PROFILE = 'bench-fpga'
URL = '/v2/accelerator_requests'
# A single-function PCI device (fake sysfs tree) for the single-accelerator bind.
PCI_BDF, PCI_VENDOR, PCI_PRODUCT = '0000:3b:00.0', '0x10de', '0x25b6'
PCI_RC = 'CUSTOM_PCI_10DE_25B6'
NOVA_HEADERS = {'X-Auth-Token': 'user-token', 'X-Service-Token': 'nova-service-token'}


class Tally:
    """What every client saw: status codes >= 500, and the attach handles the live
    instances hold (a handle held twice is a double allocation)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.server_errors = 0
        self.double = []
        self.held = {}

    def response(self, r):
        if r.status_code >= 500:
            with self.lock:
                self.server_errors += 1

    def hold(self, instance, arqs):
        with self.lock:
            for a in arqs:
                owner = self.held.setdefault(a['attach_handle_uuid'], instance)
                if owner != instance:
                    self.double.append((a['attach_handle_uuid'], owner, instance))

    def release(self, instance):
        # Before the DELETE is sent: the server frees the handle only while serving
        # it, so nobody else can legitimately hold it before this runs.
        with self.lock:
            for h in [h for h, owner in self.held.items() if owner == instance]:
                del self.held[h]


_dumps = json.dumps      # LeanClient.request's ``json`` argument hides the module


class Response:
    def __init__(self, status_code, body, method, url):
        self.status_code, self.content, self.method, self.url = (status_code, body,
                                                                  method, url)

    @property
    def text(self):
        return self.content.decode('utf-8', 'replace')

    def json(self):
        return json.loads(self.content)

    def raise_for_status(self):
        if self.status_code >= 400:
            raise ClientError(self)
        return self


class ClientError(Exception):
    def __init__(self, response):
        super().__init__(f'{response.method} {response.url} -> {response.status_code}: '
                         f'{response.text[:200]}')
        self.response = response


class LeanClient:
    """One keep-alive HTTP/1.1 connection (http.client), the calls this benchmark
    makes and nothing else. The load generator shares the machine's 2 cores with
    the server it measures: httpx spent about as much CPU per instance as the
    server itself, so it was measuring itself. Each run prints the load
    generator's CPU per instance beside the figures."""

    def __init__(self, url, tally=None, timeout=60, headers=None, on_request=None):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.timeout, self.tally = (parts.hostname, parts.port,
                                                          timeout, tally)
        self.headers = dict(headers or {})
        self.on_request = on_request    # called with (method, path, body) first
        self.conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.conn is not None:
            self.conn.close()

    def request(self, method, path, params=None, json=None, headers=None):
        if params:
            path = f'{path}?{urllib.parse.urlencode(params)}'
        body = None if json is None else _dumps(json).encode()
        hdrs = dict(self.headers)
        if body is not None:
            hdrs['Content-Type'] = 'application/json'
        hdrs.update(headers or {})
        if self.on_request is not None:
            self.on_request(method, path, body)
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                reply = self.conn.getresponse()
                response = Response(reply.status, reply.read(), method, path)
                break
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        if self.tally is not None:
            self.tally.response(response)
        return response

    def get(self, path, **kw):
        return self.request('GET', path, **kw)

    def post(self, path, **kw):
        return self.request('POST', path, **kw)

    def patch(self, path, **kw):
        return self.request('PATCH', path, **kw)

    def delete(self, path, **kw):
        return self.request('DELETE', path, **kw)


def client(url, tally=None, timeout=60):
    return LeanClient(url, tally, timeout)


def bind_body(arqs, host, rp_uuid, inst):
    return {a['uuid']: [{'op': 'add', 'path': '/hostname', 'value': host},
                        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
                        {'op': 'add', 'path': '/instance_uuid', 'value': inst}]
            for a in arqs}


def one_instance(c, rp_uuid, bind_times, tally=None, profile=PROFILE):
    inst = str(uuid.uuid4())
    c.get('/v2/device_profiles', params={'name': profile}).raise_for_status()
    r = c.post(URL, json={'device_profile_name': profile})
    r.raise_for_status()
    arqs = r.json()['arqs']
    t0 = time.perf_counter()
    r = c.patch(URL, json=bind_body(arqs, 'bench-host', rp_uuid, inst))
    bind_times.append(time.perf_counter() - t0)
    r.raise_for_status()
    r = c.get(URL, params={'instance': inst, 'bind_state': 'resolved'})
    r.raise_for_status()
    bound = r.json()['arqs']
    assert bound and all(a['state'] == 'Bound' for a in bound), r.text
    if tally is not None:
        tally.hold(inst, bound)
        tally.release(inst)
    c.delete(URL, params={'instance': inst}).raise_for_status()


def watch_bound(url, tally, stop):
    """Snapshots of every Bound ARQ (one read transaction each): two Bound ARQs on
    one handle at any instant is a double allocation the clients may not see."""
    with client(url, tally) as c:
        while not stop.wait(0.05):
            r = c.get(URL)
            if r.status_code != 200:
                continue
            handles = [a['attach_handle_uuid'] for a in r.json()['arqs']
                       if a['state'] == 'Bound']
            if len(handles) != len(set(handles)):
                with tally.lock:
                    tally.double.append(('snapshot', sorted(handles)))


def cpu_seconds(pid=None):
    """CPU time (user + system) of the API processes of the server ``pid`` (the
    embedded Placement not included), or of this process."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    return stack_cpu_seconds([pid])


def concurrent_run(url, rp_uuid, clients, per_client, tally, server_pid):
    """(instances/s, bind times, failures, server and load-generator CPU ms per
    instance)."""
    binds, failures = [], []

    def loop(_):
        with client(url, tally) as c:
            for _ in range(per_client):
                try:
                    one_instance(c, rp_uuid, binds, tally)
                except (ClientError, OSError, http.client.HTTPException,
                        AssertionError) as err:
                    failures.append(err)

    stop = threading.Event()
    watcher = threading.Thread(target=watch_bound, args=(url, tally, stop))
    watcher.start()
    t0 = time.perf_counter()
    cpu0 = cpu_seconds(server_pid), cpu_seconds()
    try:
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            list(pool.map(loop, range(clients)))
        elapsed = time.perf_counter() - t0
        cpu = [(after - before) * 1000 / (clients * per_client) for before, after in
               zip(cpu0, (cpu_seconds(server_pid), cpu_seconds()))]
    finally:
        stop.set()
        watcher.join()
    return clients * per_client / elapsed, binds, failures, cpu


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def ms(v):
    return f'{v * 1000:.1f} ms'


def nova_sequence(c, rp_uuid, profile):
    """What Nova 34 sends for one boot and delete; returns the API's total time."""
    total = 0.0
    inst = str(uuid.uuid4())

    def call(method, path, **kw):
        nonlocal total
        for m, p, extra in (('GET', '/v2', {}), (method, path, kw)):
            t0 = time.perf_counter()
            r = c.request(m, p, headers=NOVA_HEADERS, **extra)
            total += time.perf_counter() - t0
            r.raise_for_status()
        return r

    call('GET', '/v2/device_profiles', params={'name': profile})
    arqs = call('POST', URL, json={'device_profile_name': profile}).json()['arqs']
    call('PATCH', URL, json=bind_body(arqs, 'bench-host', rp_uuid, inst))
    call('GET', URL, params={'instance': inst, 'bind_state': 'resolved'})
    call('DELETE', URL, params={'instance': inst})
    return total


def pci_tree(root):
    from tests.sysfs_tree import make_pci
    make_pci(root, PCI_BDF, PCI_VENDOR, PCI_PRODUCT, driver='vfio-pci')


def single_accelerator(count):
    """Bind latencies on one single-function PCI device (bind reserves it whole in
    Placement, delete lifts it)."""
    import pathlib
    with tempfile.TemporaryDirectory(prefix='steward-bench-sysfs-') as tmp:
        root = pathlib.Path(tmp) / 'sys'
        pci_tree(root)
        spec = f'{{"vendor_id": "{PCI_VENDOR[2:]}", "product_id": "{PCI_PRODUCT[2:]}"}}'
        extra = (f'[DEFAULT]\nsysfs_root = {root}\n[agent]\nenabled_drivers = pci\n'
                 f'[pci]\ndevice_spec = {spec}\n')
        with running_stack(extra_conf=extra) as stack, client(stack.url) as c:
            c.post('/v2/device_profiles', json=[{
                'name': 'bench-pci', 'groups': [{f'resources:{PCI_RC}': '1'}]}]
            ).raise_for_status()
            rp_uuid = c.get('/v2/deployables').json()['deployables'][0]['rp_uuid']
            for _ in range(3):
                one_instance(c, rp_uuid, [], profile='bench-pci')
            binds = []
            for _ in range(count):
                one_instance(c, rp_uuid, binds, profile='bench-pci')
            reserved = httpx.get(
                f'{stack.placement_url}/resource_providers/{rp_uuid}/inventories',
                headers={'X-Auth-Token': 'admin'}).json()['inventories'][PCI_RC]['reserved']
    return binds, reserved


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--sequential', type=int, default=200)
    ap.add_argument('--clients', default='4,16',
                    help='comma-separated numbers of concurrent clients')
    ap.add_argument('--per-client', type=int, default=50)
    ap.add_argument('--single', type=int, default=50,
                    help='instances on the single-accelerator device (0: skip)')
    ap.add_argument('--nova', type=int, default=50,
                    help="Nova-shaped boot+delete sequences (0: skip)")
    args = ap.parse_args()
    tally = Tally()
    runs = []
    with running_stack() as stack:
        url = stack.url
        with client(url, tally, timeout=30) as c:
            c.post('/v2/device_profiles', json=[{
                'name': PROFILE, 'groups': [{'resources:FPGA': '1'}]}]).raise_for_status()
            rp_uuid = c.get('/v2/deployables').json()['deployables'][0]['rp_uuid']
            # Warm-up: steady state, after what a start leaves running (the first
            # discovery report, the embedded Placement's workers settling).
            for _ in range(50):
                one_instance(c, rp_uuid, [])
            binds = []
            t0 = time.perf_counter()
            for _ in range(args.sequential):
                one_instance(c, rp_uuid, binds, tally)
            seq = args.sequential / (time.perf_counter() - t0)
            nova = [nova_sequence(c, rp_uuid, PROFILE) for _ in range(args.nova)]
        for n in [int(x) for x in args.clients.split(',') if x.strip()]:
            runs.append((n,) + concurrent_run(url, rp_uuid, n, args.per_client, tally,
                                              stack.proc.pid))
    single = single_accelerator(args.single) if args.single else None

    print(f'machine: {os.cpu_count()} cores; '
          f'{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}')
    print(f'sequential: {args.sequential} instances, {seq:.1f} instances/s')
    print(f'  bind latency p50 {ms(statistics.median(binds))}, p90 {ms(pct(binds, 90))}, '
          f'p99 {ms(pct(binds, 99))}')
    for n, rate, conc_binds, failures, (server_cpu, client_cpu) in runs:
        print(f'concurrent: {n} clients x {args.per_client}, {rate:.1f} instances/s'
              f'{f", {len(failures)} failed instances" if failures else ""}; CPU per '
              f'instance: server {server_cpu:.1f} ms, load generator {client_cpu:.1f} ms')
        print(f'  bind latency p50 {ms(statistics.median(conc_binds))}, '
              f'p90 {ms(pct(conc_binds, 90))}, p99 {ms(pct(conc_binds, 99))}')
    print(f'double allocations: {len(tally.double)}; 5xx answers: {tally.server_errors}')
    for item in tally.double[:5]:
        print(f'  {item}')
    if nova:
        print(f'Nova boot+delete sequence (10 calls with version discovery), accelerator '
              f'API total: p50 {ms(statistics.median(nova))}, p90 {ms(pct(nova, 90))}')
    if single is not None:
        sbinds, reserved = single
        print(f'single-accelerator PCI device (bind writes Placement reserved): '
              f'{args.single} binds, p50 {ms(statistics.median(sbinds))}, '
              f'p90 {ms(pct(sbinds, 90))}, p99 {ms(pct(sbinds, 99))} '
              f'(reserved after the last delete: {reserved})')


if __name__ == '__main__':
    main()
