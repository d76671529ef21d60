"""The single-host stack end to end: `steward serve` as a real process, the real
embedded Placement, real clients (openstacksdk, the openstack CLI, osc-placement)."""
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid

import httpx
from prometheus_client import parser
import pytest

from tests.fixtures.stack import running_stack, wait_for

pytestmark = pytest.mark.slow
BIN = os.path.dirname(sys.executable)
HOST = 'bench-host'


class NovaEvents(http.server.BaseHTTPRequestHandler):
    """Stands in for nova-api's os-server-external-events: records what arrives."""
    received = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        self.received.append((self.path, self.headers.get('OpenStack-API-Version'), body))
        reply = json.dumps({'events': [dict(e, code=200) for e in body['events']]}).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture(scope='module')
def nova():
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), NovaEvents)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


@pytest.fixture(scope='module')
def stack(nova):
    port = nova.server_address[1]
    extra = (f'[nova]\nauth_type = none\n'
             f'endpoint_override = http://127.0.0.1:{port}/v2.1\n')
    with running_stack(extra_conf=extra, discovery_interval=1) as st:
        yield st


def placement(st):
    return httpx.Client(base_url=st.placement_url, headers={
        'X-Auth-Token': 'admin', 'OpenStack-API-Version': 'placement 1.39'})


def tree(st):
    with placement(st) as p:
        root = p.get('/resource_providers', params={'name': HOST}).json()['resource_providers'][0]
        rps = p.get('/resource_providers', params={'in_tree': root['uuid']}).json()['resource_providers']
        out = {}
        for rp in rps:
            out[rp['name']] = {
                'generation': rp['generation'],
                'inventories': p.get(f"/resource_providers/{rp['uuid']}/inventories").json()['inventories'],
                'traits': sorted(p.get(f"/resource_providers/{rp['uuid']}/traits").json()['traits']),
                'usages': p.get(f"/resource_providers/{rp['uuid']}/usages").json()['usages'],
            }
        return out


def devices(api):
    docs = api.get('/v2/devices', headers={
        'OpenStack-API-Version': 'accelerator latest'}).json()['devices']
    return [{k: v for k, v in d.items() if k != 'updated_at'} for d in docs]


def test_openstacksdk_lists_fake_device_and_deployable(stack):
    import openstack
    conn = openstack.connect(auth_type='none',
                             accelerator_endpoint_override=stack.url + '/v2')
    devices = list(conn.accelerator.devices())
    assert [(d.type, d.vendor, d.hostname) for d in devices] == [('FPGA', '0xABCD', HOST)]
    deployables = list(conn.accelerator.deployables())
    assert [(d.name, d.num_accelerators) for d in deployables] == [(f'{HOST}_FakeDevice', 16)]


def test_openstack_cli_device_list(stack):
    out = subprocess.run(
        [os.path.join(BIN, 'openstack'), '--os-auth-type', 'none', '--os-endpoint',
         stack.url + '/v2', 'accelerator', 'device', 'list', '-f', 'json'],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 1 and rows[0]['type'] == 'FPGA'


def test_osc_placement_sees_owner_cyborg_and_fpga_16(stack):
    base = [os.path.join(BIN, 'openstack'), '--os-auth-type', 'admin_token',
            '--os-endpoint', stack.placement_url, '--os-token', 'admin',
            '--os-placement-api-version', '1.39']
    rps = json.loads(subprocess.run(base + ['resource', 'provider', 'list', '-f', 'json'],
                                    capture_output=True, text=True, check=True).stdout)
    child = next(r for r in rps if r['name'] == f'{HOST}_FakeDevice')
    traits = json.loads(subprocess.run(
        base + ['resource', 'provider', 'trait', 'list', child['uuid'], '-f', 'json'],
        capture_output=True, text=True, check=True).stdout)
    assert {'OWNER_CYBORG', 'CUSTOM_FAKE_DEVICE'} <= {t['name'] for t in traits}
    inv = json.loads(subprocess.run(
        base + ['resource', 'provider', 'inventory', 'list', child['uuid'], '-f', 'json'],
        capture_output=True, text=True, check=True).stdout)
    assert [(i['resource_class'], i['total']) for i in inv] == [('FPGA', 16)]


def scrape(st):
    """{(name, labels): value} of the stack's /metrics."""
    text = httpx.get(st.metrics_url, timeout=60).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in parser.text_string_to_metric_families(text) for s in fam.samples}


def discovery_cycles(st):
    return scrape(st).get(('steward_discovery_cycles_total', (('host', HOST),)), 0)


def placement_writes(st):
    return scrape(st)[('steward_placement_requests_total', (('kind', 'write'),))]


def wait_for_cycles(st, count, timeout=60):
    """Until the agent's completed-cycle counter reaches ``count`` (a wait, not an
    assertion on time: the deadline only stops a hung run)."""
    deadline = time.monotonic() + timeout
    while discovery_cycles(st) < count:
        assert time.monotonic() < deadline, f'the agent never reached cycle {count}'
        time.sleep(0.1)


def test_quiet_discovery_cycles_write_nothing_to_placement(stack):
    wait_for_cycles(stack, 1)                  # the first cycle wrote the tree
    before, writes = tree(stack), placement_writes(stack)
    cycles = discovery_cycles(stack)
    assert writes > 0                          # the counter does count writes
    # Two whole cycles after the baseline (+1 may be a cycle already under way):
    # each discovered every device and reported it to the conductor.
    wait_for_cycles(stack, cycles + 3)
    assert placement_writes(stack) == writes
    assert tree(stack) == before
    assert stack.log().count('discovered on') == 1


def test_nova_shaped_sequence_leaves_everything_as_before(stack, nova):
    api = httpx.Client(base_url=stack.url, timeout=30)
    api.post('/v2/device_profiles', json=[{'name': 'nova-dp', 'groups': [
        {'resources:FPGA': '2', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]}]).raise_for_status()
    placement_before = tree(stack)
    db_before = devices(api)

    dps = api.get('/v2/device_profiles', params={'name': 'nova-dp'}).json()['device_profiles']
    assert len(dps) == 1
    arqs = api.post('/v2/accelerator_requests',
                    json={'device_profile_name': 'nova-dp'}).json()['arqs']
    assert [a['device_profile_group_id'] for a in arqs] == [0, 0]
    rp = placement_before[f'{HOST}_FakeDevice']
    rp_uuid = api.get('/v2/deployables').json()['deployables'][0]['rp_uuid']
    inst = str(uuid.uuid4())
    patch = {a['uuid']: [{'op': 'add', 'path': '/hostname', 'value': HOST},
                         {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
                         {'op': 'add', 'path': '/instance_uuid', 'value': inst}]
             for a in arqs}
    assert api.patch('/v2/accelerator_requests', json=patch).status_code == 202
    resolved = api.get('/v2/accelerator_requests',
                       params={'instance': inst, 'bind_state': 'resolved'})
    assert resolved.status_code == 200
    assert {a['state'] for a in resolved.json()['arqs']} == {'Bound'}
    deadline = time.monotonic() + 10
    while not nova.RequestHandlerClass.received and time.monotonic() < deadline:
        time.sleep(0.05)
    path, version, body = nova.RequestHandlerClass.received[-1]
    assert path == '/v2.1/os-server-external-events'
    assert version == 'compute 2.82'
    assert sorted((e['tag'], e['status'], e['server_uuid']) for e in body['events']) == \
        sorted((a['uuid'], 'completed', inst) for a in arqs)
    assert api.delete('/v2/accelerator_requests',
                      params={'instance': inst}).status_code == 204
    assert api.get('/v2/accelerator_requests').json()['arqs'] == []
    assert tree(stack) == placement_before
    assert rp['inventories']['FPGA']['reserved'] == 0
    assert devices(api) == db_before


def test_serve_honours_no_proxy_headers_and_logs_each_request(stack):
    """steward serve's uvicorn leaves proxy headers to the app (none trusted
    here): the links stay the request's own; the request is in its log, once."""
    r = httpx.get(f'{stack.url}/v2', headers={'X-Forwarded-Proto': 'https'}, timeout=30)
    assert r.json()['links'][0]['href'] == f'{stack.url}/v2/'
    rid = r.headers['x-openstack-request-id']

    def logged():
        return [line for line in stack.log().splitlines()
                if rid in line and 'steward.api.requestlog' in line]
    [line] = wait_for(logged, 'the request log line')
    assert re.search(r' 127\.0\.0\.1 "GET /v2" status: 200 len: %d microversion: 2\.0 '
                     r'time: \d+\.\d{6}$' % len(r.content), line), line
