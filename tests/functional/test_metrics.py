"""Prometheus metrics (steward/metrics.py) and request-id propagation in the logs.

* In process: the API app, the real conductor and the nvme agent over the real
  oslo.messaging transport, simulated controllers under the real nvme-cli
  (tests/functional/nvme_stack.py): ``/metrics`` before and after bind/delete/cleanup
  cycles, and one operator clean whose request id names every log line from the API
  through the conductor to the agent and back.
* ``steward serve`` as a real process with a simulated NVMe controller: the same
  cycle seen by scraping its ``/metrics``, and the request id in its oslo.log file.
* The standalone agent's endpoint, in process and as ``steward agent`` beside a
  ``steward conductor`` on a throw-away RabbitMQ.
"""
import contextlib
import logging
import os
import pathlib
import re
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import httpx
from oslo_context import context as oslo_context
from prometheus_client import parser
import pytest

from steward import metrics
from steward.api import auth
from steward.common import context
from steward.common import exception
from steward.drivers.fake import FakeDriver
from tests.fixtures import placement_fixture
from tests.fixtures import requirements
from tests.functional import conductor_fixtures as cf
from tests.functional.nvme_stack import LATEST, RC, agent_version_api
from tests.functional.nvme_stack import nvme  # noqa: F401 (fixture)
from tests.fixtures.stack import free_port, running_stack

STEWARD = os.path.join(os.path.dirname(sys.executable), 'steward')


# --- reading a scrape -----------------------------------------------------------------
class Scrape:
    """One scrape: ``value(name, **labels)`` (0 when absent), ``families``."""

    def __init__(self, text):
        self.text = text
        self.families = {}
        self.samples = {}
        for fam in parser.text_string_to_metric_families(text):
            self.families[fam.name] = fam
            for s in fam.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value

    def value(self, name, **labels):
        return self.samples.get((name, frozenset(labels.items())), 0)

    def has(self, name, **labels):
        return (name, frozenset(labels.items())) in self.samples

    def by_label(self, name, label):
        return {dict(k[1])[label]: v for k, v in self.samples.items() if k[0] == name}


def scrape_client(source):
    """Metrics as Prometheus reads them, over HTTP: from ``source``, a URL (a
    steward serve's [api] metrics_listen) or an in-process stack (its Metrics on a
    listener of their own). The API's port has no /metrics."""
    url = source if isinstance(source, str) else source.metrics_url()
    r = httpx.get(url, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers['content-type'].startswith('text/plain; version=0.0.4')
    return Scrape(r.text)


def wait_for(predicate, timeout=30, what='condition'):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f'timed out waiting for {what}'
        time.sleep(0.05)


# --- the endpoint -----------------------------------------------------------------------
def test_metrics_have_their_own_listener_not_the_api_port(nvme):
    nvme.sim.add_controller()
    st = nvme.start()
    # The API port has no /metrics (no authentication there: a listener of its own).
    for path in ('/metrics', '/metrics/', '/v2/metrics'):
        r = st.api.get(path)
        assert r.status_code == 404, path
        assert r.json()['error_code'] == 'cyb.request.path_not_found', r.text
    got = scrape_client(st)
    for family in ('steward_devices', 'steward_accelerator_requests',
                   'steward_database_up', 'steward_placement_requests',
                   'steward_placement_errors', 'steward_arq_bind_seconds',
                   'steward_cleanup_seconds', 'steward_cleanups',
                   'process_resident_memory_bytes'):
        assert family in got.families, family
    assert got.value('steward_database_up') == 1
    assert got.value('steward_devices', type='NVME', state='available', host=nvme.host) == 1
    # Every ARQ state is there, zero or not, so a rate or an alert never misses one.
    assert set(got.by_label('steward_accelerator_requests', 'state')) == {
        'Initial', 'BindStarted', 'Bound', 'BindFailed', 'Unbound', 'UnbindFailed',
        'Deleting'}


def test_metrics_survive_a_database_outage(nvme, conf, tmp_path):
    nvme.sim.add_controller()
    st = nvme.start()
    # The database file gone (its pooled connections closed first): the next
    # connection opens an empty one, where the queries fail.
    database = st.conductor.database
    path = pathlib.Path(database.url[len('sqlite:///'):])
    database.dispose()
    path.rename(tmp_path / 'moved.sqlite')
    try:
        got = scrape_client(st)
    finally:
        database.dispose()
        path.unlink()
        (tmp_path / 'moved.sqlite').rename(path)
    assert got.value('steward_database_up') == 0
    assert 'steward_devices' not in got.families
    assert got.has('steward_placement_requests_total', kind='read')


# --- bind, delete, cleanup ---------------------------------------------------------------
def test_bind_delete_cleanup_cycles_move_the_metrics(nvme):
    ctrl = nvme.sim.add_controller(sanitize_seconds=0.2)
    st = nvme.start()
    dev = st.device()
    before = scrape_client(st)

    inst, arq, _, bind = st.bind(dev)
    assert bind.status_code == 202, bind.text
    bound = scrape_client(st)
    assert bound.value('steward_arq_bind_seconds_count', outcome='bound') == \
        before.value('steward_arq_bind_seconds_count', outcome='bound') + 1
    assert bound.value('steward_arq_bind_seconds_sum', outcome='bound') > \
        before.value('steward_arq_bind_seconds_sum', outcome='bound')
    assert bound.value('steward_accelerator_requests', state='Bound') == \
        before.value('steward_accelerator_requests', state='Bound') + 1
    assert bound.value('steward_devices', type='NVME', state='allocated', host=nvme.host) == 1

    st.release(inst)
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available'
    st.agent.cleaner.wait(10)
    after = scrape_client(st)
    assert after.by_label('steward_accelerator_requests', 'state') == \
        before.by_label('steward_accelerator_requests', 'state')
    assert after.value('steward_devices', type='NVME', state='available', host=nvme.host) == 1
    assert not after.has('steward_devices', type='NVME', state='allocated', host=nvme.host)
    ok = dict(action='sanitize_crypto', outcome='succeeded')
    assert after.value('steward_cleanups_total', **ok) == \
        before.value('steward_cleanups_total', **ok) + 1
    assert after.value('steward_cleanup_seconds_count', **ok) == \
        before.value('steward_cleanup_seconds_count', **ok) + 1
    took = after.value('steward_cleanup_seconds_sum', **ok) - \
        before.value('steward_cleanup_seconds_sum', **ok)
    assert 0.2 <= took < 60
    # Reservation up at bind, down after the cleanup: Placement writes happened.
    assert after.value('steward_placement_requests_total', kind='write') > \
        before.value('steward_placement_requests_total', kind='write')
    assert after.value('steward_placement_requests_total', kind='read') >= \
        before.value('steward_placement_requests_total', kind='read')

    # A failing cleanup: outcome failed, the device counted in error.
    inst, _, _, bind = st.bind(dev, profile='again')
    assert bind.status_code == 202
    ctrl.inject(opcode=0x84, status=0x2, times=1)        # Invalid Field in Command
    st.release(inst)
    assert st.wait_state(dev['uuid'], ('error', 'available'))[-1] == 'error'
    st.agent.cleaner.wait(10)
    failed = scrape_client(st)
    bad = dict(action='sanitize_crypto', outcome='failed')
    assert failed.value('steward_cleanups_total', **bad) == \
        after.value('steward_cleanups_total', **bad) + 1
    assert failed.value('steward_devices', type='NVME', state='error', host=nvme.host) == 1


def test_a_refused_bind_is_observed_as_failed(nvme):
    nvme.sim.add_controller()
    st = nvme.start()
    dev = st.device()
    before = scrape_client(st)
    inst, arq, _, bind = st.bind(dev)
    assert bind.status_code == 202
    # The same device again: no free attach handle, 409.
    _, _, _, again = st.bind(dev, profile='second')
    assert again.status_code == 409, again.text
    after = scrape_client(st)
    assert after.value('steward_arq_bind_seconds_count', outcome='failed') == \
        before.value('steward_arq_bind_seconds_count', outcome='failed') + 1
    assert after.value('steward_arq_bind_seconds_count', outcome='bound') == \
        before.value('steward_arq_bind_seconds_count', outcome='bound') + 1


def test_an_interrupted_cleanup_is_counted(nvme):
    ctrl = nvme.sim.add_controller(sanitize_seconds=0.2)
    st = nvme.start()
    dev = st.device()
    before = Scrape(metrics.render(st.metrics.registry).decode())
    inst, _, _, bind = st.bind(dev)
    assert bind.status_code == 202
    ctrl.inject_sanitize_hang(progress=0.3)
    st.release(inst)
    wait_for(lambda: ctrl.sanitize_state()['mode'] == 'hang', what='the hung sanitize')
    st.kill_agent()                                      # a crash mid-cleanup
    ctrl.release_sanitize_hang()
    ctrl.wait_sanitize()
    st.start_agent(discover=False)                       # recovery: -> error
    assert st.device()['device_state'] == 'error'
    after = Scrape(metrics.render(st.metrics.registry).decode())
    key = dict(action='sanitize_crypto', outcome='interrupted')
    assert after.value('steward_cleanups_total', **key) == \
        before.value('steward_cleanups_total', **key) + 1
    # No duration for an interruption: the end was never seen.
    assert after.value('steward_cleanup_seconds_count', **key) == \
        before.value('steward_cleanup_seconds_count', **key)


def test_a_cleanup_an_old_agent_cannot_run_is_counted_not_dispatched(nvme):
    nvme.sim.add_controller()
    st = nvme.start(agent_api=agent_version_api('1.0', nvme.transport))
    dev = st.device()
    before = Scrape(metrics.render(st.metrics.registry).decode())
    inst, _, _, bind = st.bind(dev)
    assert bind.status_code == 202
    st.release(inst)
    assert st.device()['device_state'] == 'error'
    after = Scrape(metrics.render(st.metrics.registry).decode())
    key = dict(action='sanitize_crypto', outcome='not_dispatched')
    assert after.value('steward_cleanups_total', **key) == \
        before.value('steward_cleanups_total', **key) + 1


# --- request ids ---------------------------------------------------------------------------
class ContextRecorder(logging.Handler):
    """Every record with the request id oslo.log's formatter would print for it
    (the record's context, else the emitting thread's current one)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        ctx = record.__dict__.get('context') or oslo_context.get_current()
        self.records.append((record.name, record.getMessage(),
                             getattr(ctx, 'request_id', None), threading.current_thread().name))


@contextlib.contextmanager
def recording(logger='steward'):
    log = logging.getLogger(logger)
    handler, level = ContextRecorder(), log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def test_an_operator_clean_carries_its_request_id_to_the_agent_and_back(nvme):
    ctrl = nvme.sim.add_controller(sanitize_seconds=0.2)
    st = nvme.start()
    dev = st.device()
    u = dev['uuid']
    inst, _, _, bind = st.bind(dev)
    assert bind.status_code == 202
    ctrl.inject(opcode=0x84, status=0x2, times=1)
    st.release(inst)
    assert st.wait_state(u, ('error', 'available'))[-1] == 'error'
    st.agent.cleaner.wait(10)

    with recording() as rec:
        r = st.clean(u)
        assert r.status_code == 202, r.text
        rid = r.headers['x-openstack-request-id']
        assert st.wait_state(u, ('available', 'error'))[-1] == 'available'
        st.agent.cleaner.wait(10)

    lines = [m for name, m, _, _ in rec.records
             if name == 'steward.common.states' and u in m]
    # One line per transaction, its transitions joined by '; ' (the erase record's
    # shares the line of the device's last one).
    transitions = [t for line in lines for t in line.split('; ')
                   if t.startswith(f'device {u}:')]
    events = [re.search(r'\((\w+)\)', m).group(1) for m in transitions]
    assert events == ['operator_clean', 'start_cleaning', 'cleaned'], transitions
    for line in lines:
        assert line.endswith(f'request_id={rid}'), line
    agent_said = [m for name, m, _, _ in rec.records if name == 'steward.agent.manager']
    assert f'cleanup_device {u} (operator) request_id={rid}' in agent_said
    # Every line of the clean, in whichever thread (API worker, RPC server, the
    # cleanup supervisor and pool), has the request's context for oslo.log.
    # (The request log names the device in every request about it, each with
    # its own request id: the state polls are not lines of the clean.)
    mine = [(name, m, got, thread) for name, m, got, thread in rec.records
            if (u in m and name != 'steward.api.requestlog')
            or name.startswith(('steward.drivers', 'steward.agent.cleanup'))]
    threads = {thread for *_, thread in mine}
    assert len(threads) >= 3, mine
    assert [x for x in mine if x[2] != rid] == [], rid
    assert any(name.startswith('steward.drivers.nvme') for name, *_ in mine)


def test_current_context_is_set_for_the_block_and_restored():
    seen = {}

    def run():
        ctx = context.RequestContext(request_id='req-a', overwrite=False)
        seen['created'] = oslo_context.get_current()
        made = auth._detached(lambda: context.RequestContext(request_id='req-b',
                                                             overwrite=False))
        seen['after_detached'] = oslo_context.get_current()
        with auth.current_context(made):
            seen['inside'] = oslo_context.get_current().request_id
        seen['after'] = oslo_context.get_current()
        ctx.update_store()
        with auth.current_context(made):
            pass
        seen['restored'] = oslo_context.get_current().request_id

    t = threading.Thread(target=run)
    t.start()
    t.join()
    # The trap _detached avoids: a thread with no context adopts the first one made
    # (a service's start-up context in the thread that becomes the event loop).
    assert seen['created'].request_id == 'req-a'
    assert seen['after_detached'] is None
    assert seen['inside'] == 'req-b'
    assert seen['after'] is None
    assert seen['restored'] == 'req-a'


# --- the standalone agent -----------------------------------------------------------------
def test_agent_endpoint_serves_its_discovery_cycles(transport, database, db, conf):
    _, agent = cf.stack(database, transport, conf, host='metrics-host',
                        drivers=[FakeDriver(conf, 'metrics-host')])
    server = metrics.serve_agent(agent, f'127.0.0.1:{free_port()}')
    try:
        got = Scrape(httpx.get(server.url, timeout=60).text)
        assert got.value('steward_discovery_cycles_total', host='metrics-host') == 1
        assert got.value('steward_discovery_last_cycle_seconds', host='metrics-host') > 0
        assert 'process_cpu_seconds' in got.families
        # An agent has no database and no Placement client: not its families.
        for family in ('steward_devices', 'steward_arq_bind_seconds',
                       'steward_placement_requests', 'steward_cleanups'):
            assert family not in got.families
        agent.run_cycle()
        got = Scrape(httpx.get(server.url, timeout=60).text)
        assert got.value('steward_discovery_cycles_total', host='metrics-host') == 2
    finally:
        server.stop()
    with pytest.raises(httpx.TransportError):
        httpx.get(server.url, timeout=2)


@pytest.mark.parametrize('value', ['9464', 'localhost', ':9464', 'host:0',
                                   'host:65536', 'host:http', '[::1]'])
def test_bad_metrics_listen_is_a_configuration_error(value):
    with pytest.raises(exception.InvalidConfiguration,
                       match=r'\[agent\] metrics_listen = .*expected HOST:PORT'):
        metrics.parse_listen(value)


def test_metrics_listen_forms():
    assert metrics.parse_listen('127.0.0.1:9464') == ('127.0.0.1', 9464)
    assert metrics.parse_listen(' [::1]:9464 ') == ('::1', 9464)
    assert metrics.parse_listen('compute-1.example.org:9464') == \
        ('compute-1.example.org', 9464)


def test_metrics_listen_in_use_is_a_configuration_error(transport, database, db, conf):
    _, agent = cf.stack(database, transport, conf, host='busy-host', drivers=[FakeDriver(conf, 'busy-host')])
    first = metrics.serve_agent(agent, f'127.0.0.1:{free_port()}')
    try:
        with pytest.raises(exception.InvalidConfiguration, match='cannot listen there'):
            metrics.serve_agent(agent, f'127.0.0.1:{first.port}')
    finally:
        first.stop()


@pytest.mark.slow
def test_steward_agent_alone_serves_metrics(tmp_path):
    from tests.multihost import rabbit
    if not rabbit.installed():
        requirements.need('rabbitmq', 'rabbitmq-server is not installed')
    broker = rabbit.RabbitServer(base=str(tmp_path / 'rabbit'))
    broker.start()
    placement = placement_fixture.get_placement()
    host = placement_fixture.unique_name('agent-alone')
    port = free_port()
    common = f'[DEFAULT]\ntransport_url = {broker.url()}\nstate_path = {tmp_path}\n'
    (tmp_path / 'conductor.conf').write_text(
        common + f'host = conductor-1\n[database]\nconnection = sqlite:///{tmp_path}/s.db\n'
        f'[placement]\nauth_type = admin_token\nendpoint = {placement.url}\n'
        f'token = admin\nendpoint_override = {placement.url}\n')
    (tmp_path / 'agent.conf').write_text(
        common + f'host = {host}\n[agent]\ndiscovery_interval = 1\n'
        f'metrics_listen = 127.0.0.1:{port}\n')
    # The operator's step before a conductor starts (it does not migrate at start).
    subprocess.run([STEWARD, 'db', 'sync', '--config-file', str(tmp_path / 'conductor.conf')],
                   check=True, capture_output=True, timeout=300)
    procs = []
    try:
        for role in ('conductor', 'agent'):
            with open(tmp_path / f'{role}.log', 'w') as log:
                procs.append(subprocess.Popen(
                    [STEWARD, role, '--config-file', str(tmp_path / f'{role}.conf')],
                    stdout=log, stderr=subprocess.STDOUT))
            if role == 'conductor':
                # The agent's first call (start-up recovery) waits for a conductor.
                wait_for(lambda: procs[0].poll() is not None or
                         broker.consumers('steward-conductor'), timeout=60,
                         what='the conductor to consume')
                assert procs[0].poll() is None, (tmp_path / 'conductor.log').read_text()

        def cycles():
            for proc in procs:
                assert proc.poll() is None, (tmp_path / 'agent.log').read_text()[-3000:]
            try:
                got = Scrape(httpx.get(f'http://127.0.0.1:{port}/metrics', timeout=2).text)
            except httpx.TransportError:
                return None
            return got if got.value('steward_discovery_cycles_total', host=host) >= 2 \
                else None
        got = wait_for(cycles, timeout=90, what='two discovery cycles')
        assert got.value('steward_discovery_last_cycle_seconds', host=host) > 0
        assert 'steward_devices' not in got.families
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        broker.destroy()
    # Its shutdown closed the endpoint too.
    with pytest.raises(httpx.TransportError):
        httpx.get(f'http://127.0.0.1:{port}/metrics', timeout=2)


def test_bad_metrics_listen_stops_steward_agent(tmp_path):
    conf = tmp_path / 'agent.conf'
    conf.write_text('[DEFAULT]\ntransport_url = rabbit://u:p@127.0.0.1:1/\n'
                    f'state_path = {tmp_path}\n[agent]\nmetrics_listen = 9464\n')
    out = subprocess.run([STEWARD, 'agent', '--config-file', str(conf)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert 'Traceback' not in out.stderr
    assert "[agent] metrics_listen = '9464': expected HOST:PORT" in out.stderr


# --- steward serve with an NVMe controller ----------------------------------------------
def _nvme_wrapper(sim, path):
    """``[nvme] nvme_cli`` for the stack process: the real nvme-cli under the
    simulation's shim, which only nvme-cli then runs under."""
    env = ' '.join(f'{k}={v}' for k, v in sim.env.items())
    path.write_text(f'#!/bin/sh\nexec env {env} {sim.nvme_cli} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(scope='module')
def nvme_serve():
    from tests.nvme_sim import Simulation
    with tempfile.TemporaryDirectory(prefix='steward-metrics-sim-') as tmp:
        with Simulation(os.path.join(tmp, 'sim')) as sim:
            ctrl = sim.add_controller(sanitize_seconds=0.3)
            wrapper = _nvme_wrapper(sim, pathlib.Path(tmp) / 'nvme')
            extra = (f'[DEFAULT]\nsysfs_root = {sim.sysfs_root}\ndev_root = {sim.dev_root}\n'
                     f'[agent]\nenabled_drivers = nvme\n'
                     f'[nvme]\nnvme_cli = {wrapper}\ndevice_spec = {{"vendor_id": "8086"}}\n'
                     f'cleanup_timeout = 60\n')
            with running_stack(extra_conf=extra) as stack:
                yield stack, ctrl


@pytest.mark.slow
def test_serve_metrics_before_and_after_a_bind_delete_cleanup_cycle(nvme_serve):
    stack, ctrl = nvme_serve
    api = httpx.Client(base_url=stack.url, timeout=30, headers=LATEST)
    placement = placement_fixture.admin_session(stack.placement_url)
    dev = api.get('/v2/devices').json()['devices'][0]
    dep = api.get('/v2/deployables').json()['deployables'][0]
    before = scrape_client(stack.metrics_url)
    assert before.value('steward_devices', type='NVME', state='available',
                        host='bench-host') == 1

    def cycle(profile, inject=None):
        r = api.post('/v2/device_profiles', json=[
            {'name': profile, 'groups': [{f'resources:{RC}': '1'}]}])
        assert r.status_code == 201, r.text
        arq = api.post('/v2/accelerator_requests', json={
            'device_profile_name': profile}).json()['arqs'][0]['uuid']
        inst = str(uuid.uuid4())
        r = placement.put(f'/allocations/{inst}', json={
            'allocations': {dep['rp_uuid']: {'resources': {RC: 1}}}, 'project_id': 'p',
            'user_id': 'u', 'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert r.status_code == 204, r.text
        r = api.patch('/v2/accelerator_requests', json={arq: [
            {'op': 'add', 'path': '/hostname', 'value': 'bench-host'},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': dep['rp_uuid']},
            {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
        assert r.status_code == 202, r.text
        bound = scrape_client(stack.metrics_url)
        if inject:
            inject()
        placement.delete(f'/allocations/{inst}')
        assert api.delete('/v2/accelerator_requests',
                          params={'instance': inst}).status_code == 204
        return bound

    bound = cycle('metrics-ok')
    assert bound.value('steward_arq_bind_seconds_count', outcome='bound') == \
        before.value('steward_arq_bind_seconds_count', outcome='bound') + 1
    assert bound.value('steward_accelerator_requests', state='Bound') == \
        before.value('steward_accelerator_requests', state='Bound') + 1
    assert bound.value('steward_devices', type='NVME', state='allocated',
                       host='bench-host') == 1
    ok = dict(action='sanitize_crypto', outcome='succeeded')

    def cleaned():
        got = scrape_client(stack.metrics_url)
        return got if got.value('steward_cleanups_total', **ok) > \
            before.value('steward_cleanups_total', **ok) else None
    after = wait_for(cleaned, what='the cleanup to finish')
    assert after.value('steward_cleanup_seconds_count', **ok) == \
        before.value('steward_cleanup_seconds_count', **ok) + 1
    assert after.value('steward_cleanup_seconds_sum', **ok) - \
        before.value('steward_cleanup_seconds_sum', **ok) >= 0.3
    assert after.value('steward_devices', type='NVME', state='available',
                       host='bench-host') == 1
    assert after.by_label('steward_accelerator_requests', 'state') == \
        before.by_label('steward_accelerator_requests', 'state')
    assert after.value('steward_placement_requests_total', kind='write') > \
        before.value('steward_placement_requests_total', kind='write')
    # Generation conflicts count as errors (each is retried): present, not zero.
    assert after.has('steward_placement_errors_total')

    # A failed cleanup, then the operator's clean: its request id through the log.
    cycle('metrics-fail', inject=lambda: ctrl.inject(opcode=0x84, status=0x2, times=1))
    bad = dict(action='sanitize_crypto', outcome='failed')
    wait_for(lambda: scrape_client(stack.metrics_url).value('steward_cleanups_total', **bad) ==
             after.value('steward_cleanups_total', **bad) + 1, what='the failed cleanup')
    u = dev['uuid']
    assert api.get(f'/v2/devices/{u}').json()['device_state'] == 'error'
    r = api.post(f'/v2/devices/{u}/clean')
    assert r.status_code == 202, r.text
    rid = r.headers['x-openstack-request-id']
    wait_for(lambda: api.get(f'/v2/devices/{u}').json()['device_state'] == 'available',
             what='the operator clean')

    def finished_line():
        lines = [ln for ln in stack.log().splitlines() if rid in ln]
        return lines if any('cleanup succeeded -> available' in ln for ln in lines) \
            else None
    lines = wait_for(finished_line, what='the agent to log the end of the clean')
    text = '\n'.join(lines)
    for expected in (f'device {u}: error -> pending_cleaning (operator_clean)',
                     f'cleanup_device {u} (operator)',
                     f'device {u}: pending_cleaning -> cleaning (start_cleaning)',
                     f'device {u}: cleaning with nvme (operator)',
                     f'device {u}: cleaning -> available (cleaned)',
                     f'device {u}: cleanup succeeded -> available'):
        assert expected in text, (expected, text)
    # oslo.log prints the id in the context part of the line, not only where the
    # message names it: "[<global id> req-... <user identity>]".
    for line in lines:
        assert re.search(rf'\[[^\]]*{rid}[^\]]*\]', line), line
    # An error answer is logged by the event loop's thread, which serves every request
    # in flight: its context part may not name another request (nor a start-up one).
    r = api.post(f'/v2/devices/{u}/clean')
    assert r.status_code == 409
    refused = r.headers['x-openstack-request-id']
    line = wait_for(lambda: next((ln for ln in stack.log().splitlines()
                                  if f'request_id={refused}' in ln), None),
                    what='the 409 to be logged')
    assert 'answered 409 (cyb.cleaning.in_progress)' in line
    for ln in stack.log().splitlines():
        context_part = re.match(r'^\S+ \S+ \d+ \w+ \S+ \[([^\]]*)\]', ln)
        said = re.search(r'request_id=(req-[0-9a-f-]+)', ln)
        if context_part and said:
            named = re.findall(r'req-[0-9a-f-]+', context_part.group(1))
            assert named in ([], [said.group(1)]), ln
    placement.close()
    api.close()
