"""doc/troubleshooting.md, doc/metrics.md and doc/index.md as a new operator would use
them: each section's ```bash blocks run as one script (after troubleshooting.md's
preamble) against a real `steward serve` with a simulated NVMe drive, put first in
the situation the section describes (a device in error, a cleanup that hangs, a
bound ARQ, a refused bind). The single-host addresses of the docs are replaced by
the test stack's; nothing else is changed."""
import os
import re
import subprocess
import sys
import uuid

import httpx
import pytest

from tests.fixtures import placement_fixture
from tests.functional.nvme_stack import LATEST, RC
from tests.functional.test_metrics import nvme_serve, wait_for  # noqa: F401 (fixture)
from tests.fixtures.stack import ROOT

pytestmark = pytest.mark.slow
BIN = os.path.dirname(sys.executable)
DOC = os.path.join(ROOT, 'doc')
HOST = 'bench-host'
PREAMBLE = 'Where Steward tells you things'


def sections(name):
    """{title: script} of a doc: its ```bash blocks by # or ## heading (### count
    as part of their ##)."""
    text = open(os.path.join(DOC, name)).read()
    out, title = {}, None
    for match in re.finditer(r'^##? ([^\n]+)$|^```bash\n(.*?)^```', text, re.M | re.S):
        if match.group(1):
            title = match.group(1).strip()
        elif title is not None:
            out[title] = out.get(title, '') + match.group(2)
    return out


def run(stack, script):
    script = (script.replace('http://127.0.0.1:6666', stack.url)
              .replace('http://127.0.0.1:8778', stack.placement_url)
              .replace('http://127.0.0.1:6667/metrics', stack.metrics_url)
              .replace('/var/log/steward/steward.log', stack.log_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    env['PATH'] = BIN + os.pathsep + env.get('PATH', '')
    out = subprocess.run(['bash', '-euo', 'pipefail', '-c', script], capture_output=True,
                         text=True, timeout=300, env=env, cwd=ROOT)
    assert out.returncode == 0, (script, out.stdout, out.stderr)
    assert 'Traceback' not in out.stderr, out.stderr
    return out.stdout


def troubleshooting(stack, title):
    parts = sections('troubleshooting.md')
    return run(stack, parts[PREAMBLE] + parts[title])


class Cloud:
    """Nova's part, by hand: profiles, ARQs, Placement allocations, binds."""

    def __init__(self, stack):
        self.stack = stack
        self.api = httpx.Client(base_url=stack.url, timeout=30, headers=LATEST)
        self.placement = placement_fixture.admin_session(stack.placement_url)
        self.dev = self.api.get('/v2/devices').json()['devices'][0]
        self.dep = self.api.get('/v2/deployables').json()['deployables'][0]

    def state(self):
        return self.api.get(f'/v2/devices/{self.dev["uuid"]}').json()['device_state']

    def wait(self, *states):
        # The bound is for a failure's sake only: a fresh-clone CI on a machine
        # loaded by other work took over 60 s for a sanitize of 0.3 s, its
        # read-back and the namespace's re-creation after a released hang.
        return wait_for(lambda: self.state() in states, timeout=240,
                        what=f'device in {states}')

    def bind(self, expect=202):
        name = f'doc-{uuid.uuid4().hex[:8]}'
        r = self.api.post('/v2/device_profiles', json=[
            {'name': name, 'groups': [{f'resources:{RC}': '1'}]}])
        assert r.status_code == 201, r.text
        arq = self.api.post('/v2/accelerator_requests', json={
            'device_profile_name': name}).json()['arqs'][0]['uuid']
        inst = str(uuid.uuid4())
        self.placement.put(f'/allocations/{inst}', json={
            'allocations': {self.dep['rp_uuid']: {'resources': {RC: 1}}},
            'project_id': 'p', 'user_id': 'u', 'consumer_generation': None,
            'consumer_type': 'INSTANCE'})
        r = self.api.patch('/v2/accelerator_requests', json={arq: [
            {'op': 'add', 'path': '/hostname', 'value': HOST},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': self.dep['rp_uuid']},
            {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
        assert r.status_code == expect, r.text
        return inst

    def release(self, inst):
        self.placement.delete(f'/allocations/{inst}')
        r = self.api.delete('/v2/accelerator_requests', params={'instance': inst})
        assert r.status_code == 204, r.text

    def close(self):
        self.api.close()
        self.placement.close()


@pytest.fixture(scope='module')
def cloud(nvme_serve):
    stack, ctrl = nvme_serve
    c = Cloud(stack)
    c.ctrl = ctrl
    yield c
    c.close()


def test_every_doc_section_with_commands_is_tested():
    tested = {'troubleshooting.md': {PREAMBLE, 'A device stuck in `error`',
                                     'A device stuck in `pending_cleaning` or `cleaning`',
                                     'An accelerator request (ARQ) stuck',
                                     'A bind answers 409',
                                     '"No compute-node resource provider named ..."',
                                     'The agent is not reporting',
                                     'RabbitMQ outage (multi-host)',
                                     'Database (PostgreSQL) outage (multi-host)'},
              'metrics.md': {'Metrics'}}
    for name, titles in tested.items():
        assert set(sections(name)) <= titles, (name, set(sections(name)) - titles)


def test_device_stuck_in_error(cloud):
    inst = cloud.bind()
    cloud.ctrl.inject(opcode=0x84, status=0x2, times=1)      # the sanitize is refused
    cloud.release(inst)
    cloud.wait('error')
    out = troubleshooting(cloud.stack, 'A device stuck in `error`')
    assert 'cyb.cleanup.sanitize_failed' in out
    assert 'cleaning -> error (fail) reason=cyb.cleanup.sanitize_failed' in out
    assert re.search(r'\| fail +\| cleaning +\| error +\| agent bench-host', out), out
    assert re.search(r'CUSTOM_NVME_8086_0A54 \|\s+1\.0 \|\s+1 \|\s+1 \|\s+1 \|', out), out
    assert '\nsanitize_crypto\nTrue\n' in out      # clean --plan -f value -c cleanup_action -c accepted
    assert '\navailable\n' in out and '\nCUSTOM_NVME_8086_0A54 0\n' in out
    assert 'cleaning -> available (cleaned)' in out and 'cleaning with nvme (operator)' in out
    assert cloud.state() == 'available'


def test_device_stuck_cleaning(cloud):
    inst = cloud.bind()
    cloud.ctrl.inject_sanitize_hang(progress=0.43)
    cloud.release(inst)
    cloud.wait('cleaning')
    wait_for(lambda: cloud.ctrl.sanitize_state()['mode'] == 'hang', what='the hang')
    try:
        out = troubleshooting(cloud.stack, 'A device stuck in `pending_cleaning` or '
                                           '`cleaning`')
        assert f'{HOST}\ncleaning\n' in out or f'{HOST} cleaning' in out, out
        assert 'running' in out and 'pending_cleaning -> cleaning' in out
    finally:
        cloud.ctrl.release_sanitize_hang()
    cloud.wait('available')


def test_arq_stuck_bound_to_a_gone_instance(cloud):
    inst = cloud.bind()
    cloud.placement.delete(f'/allocations/{inst}')          # Nova deleted the instance
    out = troubleshooting(cloud.stack, 'An accelerator request (ARQ) stuck')
    assert 'Bound' in out and inst in out and '\n204\n' in out
    assert 'Initial -> BindStarted (bind)' in out
    cloud.wait('available')


def test_bind_answers_409(cloud):
    holder = cloud.bind()
    cloud.bind(expect=409)
    out = troubleshooting(cloud.stack, 'A bind answers 409')
    assert 'answered 409 (cyb.bind.device_not_available)' in out
    assert cloud.dev['uuid'] in out and 'allocated' in out and holder in out
    cloud.release(holder)
    cloud.wait('available')


@pytest.mark.parametrize('title', ['"No compute-node resource provider named ..."',
                                   'The agent is not reporting',
                                   'RabbitMQ outage (multi-host)'])
def test_read_only_sections(cloud, title):
    out = troubleshooting(cloud.stack, title)
    assert out.strip()


def test_metrics_doc_scrape(cloud):
    out = run(cloud.stack, sections('metrics.md')['Metrics'])
    assert f'steward_devices{{host="{HOST}",state="available",type="NVME"}} 1.0' in out
    assert 'steward_accelerator_requests{state="Bound"}' in out
    assert 'steward_arq_bind_seconds_count{outcome="bound"}' in out


def test_metrics_doc_names_every_metric():
    from steward import metrics
    text = open(os.path.join(DOC, 'metrics.md')).read()
    process_metrics = metrics.Metrics()
    families = [f for source in (metrics.DatabaseCollector(None),
                                 metrics.PlacementCollector(), metrics.AgentCollector(),
                                 process_metrics.bind_seconds,
                                 process_metrics.cleanup_seconds, process_metrics.cleanups)
                for f in source.describe()]
    assert len(families) == 13
    for family in families:
        name = family.name + ('_total' if family.type == 'counter' else '')
        assert f'| `{name}` |' in text, name


def test_index_links_every_page_and_every_link_resolves():
    index = open(os.path.join(DOC, 'index.md')).read()
    links = re.findall(r'\]\(([^)#]+)(?:#([^)]+))?\)', index)
    for target, anchor in links:
        path = os.path.normpath(os.path.join(DOC, target))
        assert os.path.exists(path), target
        if anchor:
            headings = re.findall(r'^#+ (.+)$', open(path).read(), re.M)
            slugs = {re.sub(r'[^\w\- ]', '', h).strip().lower().replace(' ', '-')
                     for h in headings}
            assert anchor in slugs, (target, anchor)
    pages = {os.path.relpath(os.path.join(d, f), DOC) for d, _, files in os.walk(DOC)
             for f in files if f.endswith('.md') and f != 'index.md'}
    assert pages <= {t for t, _ in links}, pages - {t for t, _ in links}
