"""The API hosted the way a deployment tool hosts it: ``gunicorn -k
uvicorn_worker.UvicornWorker 'steward.wsgi.api:application'`` (and ``uvicorn``)
started with nothing but the documented environment (``OS_STEWARD_CONFIG_DIR``,
``STEWARD_CONFIG_FILES``), in front of a real RabbitMQ, a ``steward conductor``
and a throw-away PostgreSQL. What operators script against is checked on the
wire: one request-log line per request (parsed from the log file), /healthcheck
(200, 503 with the disable file, the database stopped, the broker stopped), the
trusted proxy's headers, CORS and the body limit from its option.
"""
import os
import re
import signal
import subprocess
import sys

import httpx
import pytest

from tests.fixtures import pg_fixture
from tests.fixtures import requirements
from tests.multihost import rabbit as rabbit_mod
from tests.fixtures.stack import free_port
from tests.fixtures.stack import stop_child
from tests.fixtures.stack import wait_for

BIN = os.path.dirname(sys.executable)
ORIGIN = 'https://horizon.example'
BODY_LIMIT = 4096
# The proxy in front (HAProxy on this host) connects from 127.0.0.1; any other
# loopback address stands for a client reaching the API directly.
PROXY = '127.0.0.1'
UNTRUSTED = '127.0.0.2'
APP = 'steward.wsgi.api:application'

pytestmark = pytest.mark.xdist_group('hosted-api')

LOG_LINE = re.compile(
    r' INFO steward\.api\.requestlog \[(?P<context>[^\]]*)\] (?P<remote>\S+) '
    r'"(?P<method>[A-Z]+) (?P<path>\S+)" status: (?P<status>\d+) len: (?P<length>\d+) '
    r'microversion: (?P<microversion>\S+) time: (?P<elapsed>\d+\.\d{6})$')


class Deployment:
    def __init__(self, base, rabbit, pg, etc):
        self.base, self.rabbit, self.pg, self.etc = base, rabbit, pg, etc
        self.api_log = base / 'api.log'
        self.disable_file = base / 'healthcheck-disable'
        self.procs = []

    def start(self, cmd, env, port):
        """A server process with exactly ``env``; returns its URL once /v2 answers."""
        out = open(self.base / f'server-{port}.out', 'w')
        proc = subprocess.Popen(cmd, env=env, cwd=self.base, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        out.close()
        self.procs.append(proc)
        url = f'http://127.0.0.1:{port}'

        def answering():
            assert proc.poll() is None, (self.base / f'server-{port}.out').read_text()
            try:
                return httpx.get(url + '/v2', timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
        wait_for(answering, ' '.join(cmd), timeout=90)
        return url

    def requests_logged(self):
        if not self.api_log.exists():
            return []
        return [m.groupdict() for m in map(LOG_LINE.search,
                                            self.api_log.read_text().splitlines()) if m]

    def logged(self, request_id):
        """The request-log lines naming ``request_id`` (waited for: the line is
        written once the answer has left)."""
        def lines():
            return [r for r in self.requests_logged() if request_id in r['context']]
        return wait_for(lines, f'the request log line of {request_id}', timeout=10)


def _write_conf(path, sections):
    path.write_text(''.join(f'[{name}]\n' + ''.join(f'{k} = {v}\n' for k, v in opts.items())
                            for name, opts in sections.items()))


@pytest.fixture(scope='module')
def deployment(tmp_path_factory):
    if not rabbit_mod.installed():
        requirements.need('rabbitmq', 'rabbitmq-server is not installed')
    pg = pg_fixture.start_server()
    if pg is None:
        requirements.need('postgres', 'PostgreSQL server binaries are not installed')
    base = tmp_path_factory.mktemp('hosted')
    rabbit = rabbit_mod.RabbitServer(base=str(base / 'rabbit')).start()
    pg.psql('CREATE DATABASE steward')
    etc = base / 'etc'
    etc.mkdir()
    dep = Deployment(base, rabbit, pg, etc)
    _write_conf(etc / 'steward.conf', {
        'DEFAULT': {'state_path': base, 'host': 'hosted-api',
                    'transport_url': rabbit.url(), 'log_file': dep.api_log},
        'database': {'connection': pg.url('steward')},
        'api': {'trusted_proxies': f'{PROXY}/32, 192.0.2.0/24'},
        'oslo_middleware': {'enable_proxy_headers_parsing': 'true',
                            'max_request_body_size': BODY_LIMIT},
        'cors': {'allowed_origin': ORIGIN},
        'healthcheck': {'backends': 'disable_by_file',
                        'disable_by_file_path': dep.disable_file},
        # The conductor's: no Placement call is made by what these tests do.
        'placement': {'auth_type': 'admin_token', 'token': 'admin',
                      'endpoint_override': f'http://127.0.0.1:{free_port()}',
                      'create_compute_node': 'false'},
        'oslo_messaging_rabbit': {'rabbit_interval_max': 2},
    })
    _write_conf(base / 'conductor.conf', {
        'DEFAULT': {'log_file': base / 'conductor.log'}})
    steward = os.path.join(BIN, 'steward')
    subprocess.run([steward, 'db', 'sync', '--config-file', str(etc / 'steward.conf')],
                   check=True, capture_output=True)
    conductor = subprocess.Popen(
        [steward, 'conductor', '--config-file', str(etc / 'steward.conf'),
         '--config-file', str(base / 'conductor.conf')],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    dep.procs.append(conductor)
    try:
        wait_for(lambda: rabbit.consumers('steward-conductor') >= 1,
                 'the conductor on the broker', timeout=90)
        port = free_port()
        # The documented command and environment, and nothing else: no PATH, no
        # HOME, no PYTHONPATH, no --config-file.
        dep.url = dep.start(
            [os.path.join(BIN, 'gunicorn'), '-k', 'uvicorn_worker.UvicornWorker',
             '--forwarded-allow-ips', '', '--workers', '2', '--bind',
             f'127.0.0.1:{port}', APP],
            {'OS_STEWARD_CONFIG_DIR': str(etc)}, port)
        yield dep
    finally:
        for proc in reversed(dep.procs):
            if proc is conductor and rabbit.proc is None:
                _stop_without_broker(conductor, base / 'conductor.log')
            else:
                stop_child(proc, timeout=30)
        rabbit.destroy()
        pg.stop()


def _stop_without_broker(conductor, log):
    """test_healthcheck leaves the broker stopped: the conductor's RPC server then
    retries its connection to stop (oslo.messaging), and the second SIGTERM is the
    documented way out (steward.process: "a second one exits at once"). Sent once
    the first one is logged, not after a 30 s kill timer."""
    if conductor.poll() is not None:
        return
    conductor.send_signal(signal.SIGTERM)
    wait_for(lambda: conductor.poll() is not None or 'SIGTERM received' in log.read_text(),
             'the conductor to log its SIGTERM')
    stop_child(conductor, timeout=30)


def _client(source=PROXY):
    return httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=30)


def test_gunicorn_serves_the_v2_api(deployment):
    with _client() as c:
        url = deployment.url
        profile = {'name': 'hosted-fpga', 'groups': [
            {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]}
        r = c.post(f'{url}/v2/device_profiles', json=[profile])
        assert r.status_code == 201, r.text
        r = c.get(f'{url}/v2/device_profiles', params={'name': 'hosted-fpga'})
        assert [p['name'] for p in r.json()['device_profiles']] == ['hosted-fpga']
        # Through the conductor, over RabbitMQ.
        r = c.post(f'{url}/v2/accelerator_requests',
                   json={'device_profile_name': 'hosted-fpga'})
        assert r.status_code == 201, r.text
        arq = r.json()['arqs'][0]
        assert arq['state'] == 'Initial'
        r = c.get(f'{url}/v2/accelerator_requests/{arq["uuid"]}')
        assert r.status_code == 200 and r.json()['uuid'] == arq['uuid']
        assert arq['uuid'] in [a['uuid'] for a in
                               c.get(f'{url}/v2/accelerator_requests').json()['arqs']]
        r = c.delete(f'{url}/v2/accelerator_requests/{arq["uuid"]}')
        assert r.status_code == 204, r.text
        r = c.delete(f'{url}/v2/device_profiles/hosted-fpga')
        assert r.status_code == 204, r.text


def test_one_log_line_per_request(deployment):
    with _client(UNTRUSTED) as c:
        r = c.get(f'{deployment.url}/v2/device_profiles?name=nothing',
                  headers={'OpenStack-API-Version': 'accelerator 2.1'})
        assert r.status_code == 200
        rid = r.headers['x-openstack-request-id']
        [line] = deployment.logged(rid)
        assert line['remote'] == UNTRUSTED
        assert (line['method'], line['path']) == ('GET', '/v2/device_profiles?name=nothing')
        assert int(line['status']) == 200
        assert int(line['length']) == len(r.content)
        assert line['microversion'] == '2.1'
        assert 0 < float(line['elapsed']) < 30
        # An error is logged alike, with its status.
        r = c.get(f'{deployment.url}/v2/no_such_thing')
        assert r.status_code == 404
        [line] = deployment.logged(r.headers['x-openstack-request-id'])
        assert int(line['status']) == 404 and line['path'] == '/v2/no_such_thing'
        assert int(line['length']) == len(r.content)


def test_links_follow_a_trusted_proxy_only(deployment):
    forwarded = {'X-Forwarded-Proto': 'https', 'X-Forwarded-Host': 'accel.example',
                 'X-Forwarded-For': '203.0.113.9'}
    with _client(PROXY) as c:
        r = c.get(f'{deployment.url}/v2', headers=forwarded)
        assert r.json()['links'] == [{'href': 'https://accel.example/v2/', 'rel': 'self'}]
        [line] = deployment.logged(r.headers['x-openstack-request-id'])
        assert line['remote'] == '203.0.113.9'
        r = c.get(f'{deployment.url}/v2', headers={
            'Forwarded': 'for=198.51.100.4;proto=https;host=rfc.example'})
        assert r.json()['links'][0]['href'] == 'https://rfc.example/v2/'
    with _client(UNTRUSTED) as c:
        r = c.get(f'{deployment.url}/v2', headers=forwarded)
        assert r.json()['links'][0]['href'] == f'{deployment.url}/v2/'
        [line] = deployment.logged(r.headers['x-openstack-request-id'])
        assert line['remote'] == UNTRUSTED


def test_cors_preflight_and_actual_request(deployment):
    url = f'{deployment.url}/v2/device_profiles'
    with _client() as c:
        r = c.options(url, headers={
            'Origin': ORIGIN, 'Access-Control-Request-Method': 'POST',
            'Access-Control-Request-Headers': 'X-Auth-Token, OpenStack-API-Version'})
        assert r.status_code == 200 and r.content == b''
        assert r.headers['access-control-allow-origin'] == ORIGIN
        assert r.headers['access-control-allow-methods'] == 'POST'
        assert r.headers['access-control-allow-headers'] == \
            'X-Auth-Token,OpenStack-API-Version'
        assert r.headers['access-control-allow-credentials'] == 'true'
        assert r.headers['access-control-max-age'] == '3600'
        assert r.headers['vary'] == 'Origin'
        # Refused preflights: an unknown origin, a method or a header not allowed.
        for headers in ({'Origin': 'https://evil.example',
                         'Access-Control-Request-Method': 'GET'},
                        {'Origin': ORIGIN, 'Access-Control-Request-Method': 'TRACE'},
                        {'Origin': ORIGIN, 'Access-Control-Request-Method': 'GET',
                         'Access-Control-Request-Headers': 'X-Secret'}):
            r = c.options(url, headers=headers)
            assert r.status_code == 200
            assert 'access-control-allow-origin' not in r.headers, headers

        r = c.get(url, headers={'Origin': ORIGIN})
        assert r.status_code == 200
        assert r.headers['access-control-allow-origin'] == ORIGIN
        assert r.headers['access-control-allow-credentials'] == 'true'
        assert 'OpenStack-API-Version' in r.headers['access-control-expose-headers']
        assert r.headers['vary'] == 'OpenStack-API-Version,Origin'
        # An error carries them too (the browser must be able to read it).
        r = c.get(f'{deployment.url}/v2/no_such_thing', headers={'Origin': ORIGIN})
        assert r.status_code == 404
        assert r.headers['access-control-allow-origin'] == ORIGIN
        r = c.get(url, headers={'Origin': 'https://evil.example'})
        assert r.status_code == 200
        assert not [h for h in r.headers if h.startswith('access-control-')]
        assert r.headers['vary'] == 'OpenStack-API-Version'


def test_body_limit_from_its_option(deployment):
    url = f'{deployment.url}/v2/device_profiles'
    with _client() as c:
        r = c.post(url, content=b' ' * (BODY_LIMIT + 1),
                   headers={'Content-Type': 'application/json'})
        assert r.status_code == 413
        assert r.json()['error_code'] == 'cyb.request.too_large'
        assert str(BODY_LIMIT) in r.json()['error_message']

        def chunks():       # no Content-Length: refused while it is read
            for _ in range(BODY_LIMIT // 1024 + 1):
                yield b' ' * 1024
        r = c.post(url, content=chunks(), headers={'Content-Type': 'application/json'})
        assert r.status_code == 413
        assert r.json()['error_code'] == 'cyb.request.too_large'
        # At the limit the body is read and judged as JSON.
        r = c.post(url, content=b'[' + b' ' * (BODY_LIMIT - 2) + b']',
                   headers={'Content-Type': 'application/json'})
        assert r.status_code == 400, r.text


def test_uvicorn_serves_it_from_steward_config_files(deployment):
    port = free_port()
    url = deployment.start(
        [os.path.join(BIN, 'uvicorn'), '--no-proxy-headers', '--host', '127.0.0.1',
         '--port', str(port), APP],
        {'STEWARD_CONFIG_FILES': str(deployment.etc / 'steward.conf')}, port)
    try:
        with _client() as c:
            assert c.get(f'{url}/v2/device_profiles').status_code == 200
            assert c.get(f'{url}/healthcheck').text == 'OK\nOK\nOK'
    finally:
        stop_child(deployment.procs.pop(), timeout=30)


def _health(c, url, accept=None):
    return c.get(f'{url}/healthcheck', headers={'Accept': accept} if accept else {})


def test_healthcheck(deployment):
    """Last: it stops the database and the broker."""
    url = deployment.url
    with _client() as c:
        r = _health(c, url)
        # disable_by_file, the database, the broker; no token asked for.
        assert (r.status_code, r.text) == (200, 'OK\nOK\nOK')
        assert r.headers['content-type'] == 'text/plain; charset=UTF-8'
        r = _health(c, url, 'application/json')
        assert r.json() == {'detailed': False, 'reasons': ['OK', 'OK', 'OK']}
        r = _health(c, url, 'text/html')
        assert r.headers['content-type'].startswith('text/html')
        assert '<H2>Result of 3 checks:</H2>' in r.text
        assert c.head(f'{url}/healthcheck').status_code == 204

        deployment.disable_file.write_text('')
        r = _health(c, url)
        assert (r.status_code, r.text) == (503, 'DISABLED BY FILE\nOK\nOK')
        assert c.head(f'{url}/healthcheck').status_code == 503
        deployment.disable_file.unlink()
        assert _health(c, url).status_code == 200

        deployment.pg.stop()
        r = wait_for(lambda: (lambda r: r.status_code == 503 and r)(_health(c, url)),
                     '/healthcheck to see the database gone')
        assert r.text == 'OK\nDATABASE UNAVAILABLE\nOK'
        # The API itself still answers what needs no database.
        assert c.get(f'{url}/v2').status_code == 200

        deployment.rabbit.stop()
        r = _health(c, url, 'application/json')
        assert r.status_code == 503
        assert r.json()['reasons'] == ['OK', 'DATABASE UNAVAILABLE',
                                       'MESSAGE BROKER UNAVAILABLE']
