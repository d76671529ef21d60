"""One bind, one accelerator-request-bound event per ARQ: ``steward serve`` against
an HTTP double of Nova 34's POST /os-server-external-events that answers as
nova/api/openstack/compute/server_external_events.py does (per event: 404 for an
instance Nova deleted, 422 while the instance has no host, 200 once it has one; 207
overall when any was refused; 400 below compute microversion 2.82, which names the
event). Nothing is sent again after a 422 (steward/arqs/nova_events.py says why)."""
import http.server
import json
import threading
import time

import httpx
import pytest

from tests.fixtures import http_double
from tests.fixtures.stack import bind_instance, running_stack

pytestmark = pytest.mark.slow


class NovaEvents(http_double.JsonHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        self.server.posts.append(body['events'])
        version = self.headers.get('OpenStack-API-Version', '')
        if self.path != '/v2.1/os-server-external-events' or version != 'compute 2.82':
            return self._send(400, {'badRequest': {'message': f'{self.path} {version}'}})
        result, out = 200, []
        for event in body['events']:
            event = dict(event)
            # Every instance Steward names exists in this Nova (its conductor made
            # it) and has no host until a test gives it one.
            host = self.server.hosts.get(event['server_uuid'])
            if event['server_uuid'] in self.server.deleted:
                event.update(status='failed', code=404)
            elif host is None:
                event.update(status='failed', code=422)
            else:
                event.update(status='completed', code=200)
            if event['code'] != 200:
                result = 207
            out.append(event)
        self._send(result, {'events': out})

    def do_GET(self):       # the conductor's orphan check: GET /servers/{id}
        inst = self.path.rsplit('/', 1)[-1]
        self._send(404 if inst in self.server.deleted else 200, {'server': {'id': inst}})


@pytest.fixture
def nova():
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), NovaEvents)
    srv.daemon_threads = True
    srv.posts, srv.hosts, srv.deleted = [], {}, set()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def wait_posts(nova, count, timeout=10):
    deadline = time.monotonic() + timeout
    while len(nova.posts) < count:
        assert time.monotonic() < deadline, nova.posts
        time.sleep(0.02)


def test_one_event_per_arq_even_when_nova_answers_422(nova):
    extra = (f'[nova]\nauth_type = none\n'
             f'endpoint_override = http://127.0.0.1:{nova.server_address[1]}/v2.1\n')
    with running_stack(extra_conf=extra) as st:
        r = httpx.post(f'{st.url}/v2/device_profiles', json=[{
            'name': 'dp-fake', 'groups': [{'resources:FPGA': '1'}]}], timeout=60)
        assert r.status_code == 201, r.text
        # Nova's conductor binds before the compute's claim gives the instance a
        # host: Nova answers 207 / 422 and drops the event.
        inst = bind_instance(st.url, st.placement_url, 'dp-fake', 'FPGA', 'bench-host')
        wait_posts(nova, 1)
        # Longer than [nova] event_retry_delay's old default (2 s): no copy follows.
        time.sleep(3)
        assert len(nova.posts) == 1, nova.posts
        (events,) = nova.posts
        assert [(e['name'], e['server_uuid'], e['status']) for e in events] == [
            ('accelerator-request-bound', inst, 'completed')]
        assert 'unexpected' not in st.log()
