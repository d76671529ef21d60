"""The Nova-shaped ARQ lifecycle and its lean load generator, shared by
bench/arq_lifecycle.py (``steward serve``), bench/upstream_cyborg.py (upstream
Cyborg on SQLite) and bench/production.py (both in the production topology).

One instance = GET device_profiles?name= -> POST ARQs -> collection PATCH bind ->
GET ?instance=&bind_state=resolved -> DELETE ?instance=.
"""
import concurrent.futures
import http.client
import json
import os
import re
import resource
import threading
import time
import urllib.parse
import uuid

from tests.fixtures.stack import children

PROFILE = 'bench-fpga'
URL = '/v2/accelerator_requests'
NOVA_HEADERS = {'X-Auth-Token': 'user-token', 'X-Service-Token': 'nova-service-token'}
TICKS = os.sysconf('SC_CLK_TCK')


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


def watch_bound(url, tally, stop, headers=None):
    """Snapshots of every Bound ARQ (one read transaction each): two Bound ARQs on
    one handle at any instant is a double allocation the clients may not see."""
    with client(url, tally, headers=headers) as c:
        while not stop.wait(0.05):
            r = c.get(URL)
            if r.status_code != 200:
                continue
            handles = [a['attach_handle_uuid'] for a in r.json()['arqs']
                       if a['state'] == 'Bound']
            if len(handles) != len(set(handles)):
                with tally.lock:
                    tally.double.append(('snapshot', sorted(handles)))


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


def client(url, tally=None, timeout=60, headers=None):
    return LeanClient(url, tally, timeout, headers=headers)


# -- failures -------------------------------------------------------------------------
FAILURES = (ClientError, OSError, http.client.HTTPException, AssertionError)


def describe(err):
    """One line per kind of failed instance: the call, the status and the reason
    (Cyborg's faultstring, Steward's error detail), uuids masked so kinds group."""
    if not isinstance(err, ClientError):
        return f'{type(err).__name__}: {str(err)[:120]}'
    r = err.response
    reason = r.text
    try:
        body = json.loads(reason)
        try:   # Cyborg: {"error_message": "{\"faultstring\": ...}"}
            reason = json.loads(body['error_message'])['faultstring']
        except (ValueError, KeyError, TypeError):
            # Steward: {"error_message": ..., "faultstring": ..., "error_code": ...}
            reason = body.get('faultstring') or body.get('error_message') or reason
    except (ValueError, AttributeError):
        pass
    reason = reason.split('Traceback (most recent call last)')[0]
    reason = re.sub(r'[0-9a-f]{8}-[0-9a-f-]{27}', '<uuid>', ' '.join(reason.split()))
    path = r.url.split('?', 1)[0]
    return f'{r.method} {path} -> {r.status_code}: {reason[:110]}'


def bound_request(method, body):
    """(instance, ARQ uuids) a bind request names, else None."""
    if method != 'PATCH' or not body:
        return None
    try:
        patches = json.loads(body)
    except ValueError:
        return None
    for patch in patches.values():
        for op in patch:
            if op.get('path') == '/instance_uuid':
                return op.get('value'), list(patches)
    return None


def bound_instance(method, body):
    """The instance a bind request names, else None."""
    found = bound_request(method, body)
    return found and found[0]


def clean_up(c, bound):
    """Nova's clean-up of a failed boot: DELETE ?instance= (retried on 5xx), then
    the ARQs by uuid in case the failed bind never recorded the instance. Without
    it each failed instance keeps its attach handle and every later bind fails."""
    if not bound:
        return
    instance, arqs = bound
    for params in ({'instance': instance}, {'arqs': ','.join(arqs)}):
        for _ in range(5):
            try:
                if c.delete(URL, params=params).status_code < 500:
                    break
            except (OSError, http.client.HTTPException):
                pass


# -- CPU ------------------------------------------------------------------------------
def cpu_self():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tree_cpu(pid):
    """CPU seconds of ``pid`` and its descendants, the children they have already
    reaped included (cutime, cstime): gunicorn's workers, PostgreSQL's backends,
    RabbitMQ's beam under its start script."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f'/proc/{p}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += sum(int(x) for x in fields[11:15])
        todo += children(p)
    return total / TICKS


def load_average():
    return '/'.join(f'{x:.1f}' for x in os.getloadavg())


# -- concurrent clients ---------------------------------------------------------------
class Run:
    """What one concurrent run measured."""

    def __init__(self, started, elapsed, binds, failures, cpu):
        self.started, self.elapsed = started, elapsed
        self.binds, self.failures, self.cpu = binds, failures, cpu

    def completed(self):
        return self.started - len(self.failures)


def run_clients(url, rp_uuid, clients, per_client, tally, headers=None, nova_cleanup=False,
                watch=False, cpu=None, timeout=60):
    """``clients`` threads of ``per_client`` instances each. ``nova_cleanup``: a
    failed instance is cleaned up as Nova would (see clean_up); ``watch``: a
    watch_bound thread meanwhile; ``cpu``: {name: callable returning CPU seconds},
    reported per started instance in ms, with ``load generator`` (this process)
    added."""
    binds, failures = [], []
    probes = dict(cpu or {})
    probes['load generator'] = cpu_self

    def loop(_):
        last = {}

        def remember(method, _path, body):
            found = bound_request(method, body)
            if found:
                last['bound'] = found

        with LeanClient(url, tally, timeout=timeout, headers=headers,
                        on_request=remember) as c:
            for _ in range(per_client):
                last.clear()
                try:
                    one_instance(c, rp_uuid, binds, tally)
                except FAILURES as err:
                    failures.append(err)
                    if nova_cleanup:
                        clean_up(c, last.get('bound'))

    stop = threading.Event()
    watcher = None
    if watch:
        watcher = threading.Thread(target=watch_bound, args=(url, tally, stop, headers))
        watcher.start()
    started = clients * per_client
    t0 = time.perf_counter()
    cpu0 = {name: probe() for name, probe in probes.items()}
    try:
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            list(pool.map(loop, range(clients)))
        elapsed = time.perf_counter() - t0
        used = {name: (probe() - cpu0[name]) * 1000 / started
                for name, probe in probes.items()}
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
    return Run(started, elapsed, binds, failures, used)
