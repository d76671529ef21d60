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

Then the same calls as bench/arq_lifecycle.py (its ``one_instance`` and
``nova_sequence`` are imported, not copied): 50 sequential instances, 16 concurrent
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
import concurrent.futures
import datetime
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench import arq_lifecycle as lifecycle  # noqa: E402
from tests.multihost.rabbit import RabbitServer, free_port, installed  # noqa: E402

CYBORG = 'openstack-cyborg==17.0.0'
VENV = os.path.join(ROOT, '.venv-cyborg')
HOST = 'bench-host'   # the hostname one_instance binds to
PLACEMENT_HEADERS = {'X-Auth-Token': 'admin', 'OpenStack-API-Version': 'placement 1.39'}
# What keystonemiddleware puts in the environ for a Nova call carrying a user token
# and a service token.
IDENTITY = {'X-Roles': 'admin,member,reader', 'X-Project-Id': uuid.uuid4().hex,
            'X-User-Id': uuid.uuid4().hex, 'X-Service-Roles': 'service'}
# One process per core, as cyborg-api's default api_workers.
API_WORKERS = os.cpu_count() or 1
API_THREADS = 4
# Upstream's etc/cyborg/api-paste.ini without its authtoken filter.
PASTE = """[pipeline:main]
pipeline = cors http_proxy_to_wsgi request_id api_v2

[app:api_v2]
paste.app_factory = cyborg.api.app:app_factory

[filter:request_id]
paste.filter_factory = oslo_middleware:RequestId.factory

[filter:cors]
paste.filter_factory = oslo_middleware.cors:filter_factory
oslo_config_project = cyborg

[filter:http_proxy_to_wsgi]
paste.filter_factory = oslo_middleware.http_proxy_to_wsgi:HTTPProxyToWSGI.factory
"""


def ensure_venv():
    python = os.path.join(VENV, 'bin', 'python')
    needed = [os.path.join(VENV, 'bin', name) for name in ('cyborg-agent', 'gunicorn')]
    packages = [CYBORG, 'gunicorn']
    if all(os.path.exists(path) for path in needed):
        return
    if not os.path.exists(python):
        print(f'creating {VENV} (first run only)', flush=True)
        subprocess.run([sys.executable, '-m', 'venv', VENV], check=True)
    print(f'pip install {" ".join(packages)} into {VENV} ...', flush=True)
    pip = subprocess.run([python, '-m', 'pip', 'install', '-q', *packages],
                         capture_output=True, text=True)
    if pip.returncode != 0 or not all(os.path.exists(path) for path in needed):
        sys.exit(f'pip install {" ".join(packages)} failed ({pip.returncode}):\n'
                 f'{pip.stderr[-4000:]}')


def installed_versions():
    out = subprocess.run([os.path.join(VENV, 'bin', 'python'), '-c',
                          'import importlib.metadata as m; print(" ".join('
                          'f"{d}={m.version(d)}" for d in ("openstack-cyborg", '
                          '"oslo.messaging", "oslo.service", "SQLAlchemy", "eventlet")))'],
                         capture_output=True, text=True)
    return out.stdout.strip() or out.stderr.strip()


# -- a stub Nova: the conductor posts os-server-external-events after every bind -----
class _NovaHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def _send(self, code, body):
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self):   # openstacksdk's version discovery
        base = f'http://{self.headers["Host"]}/v2.1'
        self._send(200, {'version': {'id': 'v2.1', 'status': 'CURRENT', 'version': '2.96',
                                     'min_version': '2.1', 'updated': '2013-07-23T11:33:21Z',
                                     'links': [{'rel': 'self', 'href': base + '/'}]}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get('Content-Length', 0))) or b'{}')
        self.server.events += len(body.get('events', []))
        self._send(200, {'events': [dict(e, code=200) for e in body.get('events', [])]})

    def log_message(self, *args):
        pass


class _NovaServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    events = 0


def start_nova_stub():
    server = _NovaServer(('127.0.0.1', 0), _NovaHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# -- Cyborg services --------------------------------------------------------------
def write_config(tmp, rabbit_url, placement_url, nova_url, db_url):
    paste = os.path.join(tmp, 'api-paste.ini')
    with open(paste, 'w') as f:
        f.write(PASTE)
    conf = os.path.join(tmp, 'cyborg.conf')
    with open(conf, 'w') as f:
        f.write(f"""[DEFAULT]
host = {HOST}
transport_url = {rabbit_url}
debug = False
state_path = {tmp}

[database]
connection = {db_url}

[api]
api_paste_config = {paste}

[agent]
enabled_drivers = fake_driver
resource_provider_name = {HOST}

[placement]
auth_type = admin_token
token = admin
endpoint = {placement_url}
endpoint_override = {placement_url}

[nova]
auth_type = admin_token
token = admin
endpoint = {nova_url}
endpoint_override = {nova_url}

[oslo_concurrency]
lock_path = {tmp}/locks
""")
    return conf


def write_gunicorn_config(tmp, conf, port):
    path = os.path.join(tmp, 'gunicorn.conf.py')
    with open(path, 'w') as f:
        f.write(f"""bind = '127.0.0.1:{port}'
workers = {API_WORKERS}
worker_class = 'gthread'
threads = {API_THREADS}
wsgi_app = 'cyborg.wsgi.api:application'
loglevel = 'warning'


def post_fork(server, worker):
    # cyborg.wsgi.api parses sys.argv with oslo.config when a worker imports it.
    import sys
    sys.argv[1:] = ['--config-file', {conf!r}]
""")
    return path


class Services:
    def __init__(self, tmp, conf):
        self.tmp, self.conf, self.procs = tmp, conf, {}

    def log(self, name):
        return os.path.join(self.tmp, f'{name}.log')

    def run(self, name, *args):
        cmd = [os.path.join(VENV, 'bin', name), *(args or ('--config-file', self.conf))]
        with open(self.log(name), 'ab') as log:
            # Own session: gunicorn forks its workers, stop() ends the whole group.
            self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    def check(self):
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f'{name} exited with {proc.returncode}:\n'
                                   + self.tail(name))

    def tail(self, name, n=3000):
        try:
            with open(self.log(name), errors='replace') as f:
                return f.read()[-n:]
        except OSError as exc:
            return str(exc)

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def wait_for(what, probe, services, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        services.check()
        try:
            found = probe()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f'timed out waiting for {what}')
        time.sleep(0.5)


def offered_rp(api_url, placement_url):
    """The deployable's provider once Cyborg lists it and Placement can allocate it."""
    r = httpx.get(f'{api_url}/v2/deployables', headers=IDENTITY, timeout=5)
    if r.status_code != 200:
        return None
    for dep in r.json().get('deployables', []):
        rp = dep.get('rp_uuid')
        if rp:
            inv = httpx.get(f'{placement_url}/resource_providers/{rp}/inventories',
                            headers=PLACEMENT_HEADERS, timeout=5)
            if inv.status_code == 200 and inv.json()['inventories']:
                return rp
    return None


# -- measurement ------------------------------------------------------------------
def describe(err):
    """One line per kind of failed instance: the call, the status and Cyborg's reason."""
    if not isinstance(err, lifecycle.ClientError):
        return f'{type(err).__name__}: {str(err)[:120]}'
    r = err.response
    reason = r.text
    try:   # Cyborg: {"error_message": "{\"faultstring\": ...}"}
        reason = json.loads(json.loads(reason)['error_message'])['faultstring']
    except (ValueError, KeyError, TypeError):
        pass
    reason = reason.split('Traceback (most recent call last)')[0]
    reason = re.sub(r'[0-9a-f]{8}-[0-9a-f-]{27}', '<uuid>', ' '.join(reason.split()))
    path = r.url.split('?', 1)[0]
    return f'{r.method} {path} -> {r.status_code}: {reason[:110]}'


def bound_instance(method, body):
    """The instance a bind request names, else None."""
    if method != 'PATCH' or not body:
        return None
    try:
        patches = json.loads(body)
    except ValueError:
        return None
    for patch in patches.values():
        for op in patch:
            if op.get('path') == '/instance_uuid':
                return op.get('value')
    return None


def run_concurrent(url, rp_uuid, clients, per_client, tally):
    """bench/arq_lifecycle.py's concurrent run, with the identity headers, and Nova's
    clean-up of a failed boot (DELETE ?instance=, retried on 5xx): without it the ARQs
    of each failed instance keep their attach handles and every later bind fails."""
    binds, failures = [], []

    def loop(_):
        last = {}

        def remember(method, _path, body):
            inst = bound_instance(method, body)
            if inst:
                last['instance'] = inst

        # The same lean client as bench/arq_lifecycle.py uses against Steward.
        with lifecycle.LeanClient(url, tally, timeout=120, headers=IDENTITY,
                                  on_request=remember) as c:
            for _ in range(per_client):
                last.clear()
                try:
                    lifecycle.one_instance(c, rp_uuid, binds, tally)
                except (lifecycle.ClientError, OSError, http.client.HTTPException,
                        AssertionError) as err:
                    failures.append(err)
                    for _ in range(5):
                        if 'instance' not in last or c.delete(
                                lifecycle.URL, params={'instance': last['instance']}
                                ).status_code < 500:
                            break

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(loop, range(clients)))
    # Only completed instances count: a failed one did not boot.
    done = clients * per_client - len(failures)
    return done / (time.perf_counter() - t0), binds, failures


def load():
    return '/'.join(f'{x:.1f}' for x in os.getloadavg())


def measure_cyborg(args, tmp):
    rabbit = RabbitServer(base=os.path.join(tmp, 'rabbit'))
    nova = start_nova_stub()
    placement = services = None
    try:
        rabbit.start()
        from steward.placement import handle as embedded
        placement = embedded.start_subprocess(
            f'sqlite:///{tmp}/placement.db', port=free_port(),
            log_file=os.path.join(tmp, 'placement.log'))
        httpx.post(f'{placement.url}/resource_providers', headers=PLACEMENT_HEADERS,
                   json={'name': HOST, 'uuid': str(uuid.uuid4())}).raise_for_status()
        api_port = free_port()
        conf = write_config(tmp, rabbit.url(), placement.url,
                            f'http://127.0.0.1:{nova.server_address[1]}/v2.1',
                            f'sqlite:///{tmp}/cyborg.db')
        services = Services(tmp, conf)
        # Not 'upgrade': migration 589ff20545b7 sends ALTER TABLE ... ALTER COLUMN,
        # which SQLite rejects.
        dbsync = subprocess.run([os.path.join(VENV, 'bin', 'cyborg-dbsync'),
                                 '--config-file', conf, 'create_schema'],
                                capture_output=True, text=True)
        if dbsync.returncode:
            raise RuntimeError('cyborg-dbsync create_schema failed:\n'
                               + (dbsync.stdout + dbsync.stderr)[-3000:])
        t0 = time.perf_counter()
        services.run('cyborg-conductor')
        services.run('gunicorn', '-c', write_gunicorn_config(tmp, conf, api_port))
        # The agent's first report is an RPC call: sent before the conductor's queue
        # exists, it is dropped and the agent waits 60 s for a reply, then 60 s more
        # for its next periodic report.
        wait_for('cyborg-conductor to consume its queue',
                 lambda: rabbit.consumers('cyborg-conductor'), services)
        services.run('cyborg-agent')
        url = f'http://127.0.0.1:{api_port}'
        rp_uuid = wait_for('the fake deployable in Cyborg and Placement',
                           lambda: offered_rp(url, placement.url), services)
        ready = time.perf_counter() - t0

        tally = lifecycle.Tally()
        before = load()
        with lifecycle.LeanClient(url, tally, timeout=120, headers=IDENTITY) as c:
            c.post('/v2/device_profiles', json=[{
                'name': lifecycle.PROFILE, 'groups': [{'resources:FPGA': '1'}]}]
            ).raise_for_status()
            for _ in range(5):                                   # warm-up
                lifecycle.one_instance(c, rp_uuid, [])
            binds = []
            t0 = time.perf_counter()
            for _ in range(args.sequential):
                lifecycle.one_instance(c, rp_uuid, binds, tally)
            seq = args.sequential / (time.perf_counter() - t0)
            nova_totals = [lifecycle.nova_sequence(c, rp_uuid, lifecycle.PROFILE)
                           for _ in range(args.nova)]
        conc = run_concurrent(url, rp_uuid, args.clients, args.per_client, tally)
        services.check()
        return {'seq': seq, 'binds': binds, 'conc': conc, 'nova': nova_totals,
                'tally': tally, 'ready': ready, 'events': nova.events, 'load': before}
    finally:
        if services:
            services.stop()
        if placement:
            placement.stop()
        nova.shutdown()
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

    ms = lifecycle.ms
    print(f'machine: {os.cpu_count()} cores; '
          f'{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC')
    print(f'upstream Cyborg ({installed_versions()}), SQLite, RabbitMQ, fake driver, '
          f'gunicorn {API_WORKERS} workers x {API_THREADS} threads; '
          f'ready in {cy["ready"]:.1f} s; load average before {cy["load"]}'
          + (f'; logs in {tmp}' if args.keep_logs else ''))
    binds = cy['binds']
    print(f'  sequential: {args.sequential} instances, {cy["seq"]:.1f} instances/s')
    print(f'    bind latency p50 {ms(statistics.median(binds))}, '
          f'p90 {ms(lifecycle.pct(binds, 90))}, p99 {ms(lifecycle.pct(binds, 99))}')
    rate, cbinds, failures = cy['conc']
    print(f'  concurrent: {args.clients} clients x {args.per_client}, {rate:.1f} instances/s'
          f' completed'
          f'{f" ({len(failures)} failed instances not counted)" if failures else ""}')
    if cbinds:
        print(f'    bind latency p50 {ms(statistics.median(cbinds))}, '
              f'p90 {ms(lifecycle.pct(cbinds, 90))}, p99 {ms(lifecycle.pct(cbinds, 99))}')
    for what, n in collections.Counter(map(describe, failures)).most_common(5):
        print(f'    {n} x {what}')
    print(f'  double allocations: {len(cy["tally"].double)}; '
          f'5xx answers: {cy["tally"].server_errors}; '
          f'Nova events received by the stub: {cy["events"]}')
    if cy['nova']:
        print(f'  Nova boot+delete sequence, accelerator API total: '
              f'p50 {ms(statistics.median(cy["nova"]))}, '
              f'p90 {ms(lifecycle.pct(cy["nova"], 90))}')
    if args.no_steward:
        return

    before = load()
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
