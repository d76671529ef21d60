"""Orphan reconciliation with Nova: an ARQ left Bound to an instance Nova deleted
(its DELETE ?instance= failed) is deleted by the conductor's periodic task once Nova
has answered 404 for the instance for longer than [conductor] orphan_grace; and the
set of ARQs a finished move left on another host than the instance's (Nova's
DELETE ?arqs= of it failed) once Nova has said that long that the instance is
elsewhere and not moving. While it moves, nothing is deleted.

The real conductor, the ARQ operations (steward/arqs/ops.py), database and
Placement (lifecycle_stack), and a Nova-compatible endpoint answering GET
/v2.1/servers/<uuid> over real HTTP."""
import datetime
import http.server
import logging
import socket
import threading

import pytest
from oslo_utils import timeutils

from steward.common import context
from steward.db import arqs as arq_db
from tests.fixtures import http_double
from tests.functional.lifecycle_stack import life, wait_for  # noqa: F401 (fixture)

COUNTER = 'steward_orphan_arqs_released_total'


class FakeNova(http_double.JsonHandler):
    known = set()           # server uuids that exist
    servers = {}            # server uuid -> its host, status and task_state
    status = None           # answer this status to everything (e.g. 500)
    seen = []

    def do_GET(self):
        self.seen.append(self.path)
        prefix = '/v2.1/servers/'
        server = self.path[len(prefix):] if self.path.startswith(prefix) else None
        if self.status is not None:
            code, body = self.status, {'computeFault': {
                'code': self.status, 'message': 'Unexpected API Error.'}}
        elif server in self.servers:
            code, body = 200, {'server': http_double.nova_server(
                server, **self.servers[server])}
        elif server in self.known:
            code, body = 200, {'server': {'id': server, 'status': 'ACTIVE',
                                          'name': 'vm'}}
        else:
            code, body = 404, {'itemNotFound': {
                'code': 404, 'message': f'Instance {server} could not be found.'}}
        self._send(code, body)


def _point_nova_at(conf, port):
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', f'http://127.0.0.1:{port}/v2.1',
                      group='nova')
    # [nova] event_timeout stays the product's (10 s): the fake Nova answers at
    # once, and a shorter client timeout could expire on a loaded machine.


@pytest.fixture
def fake_nova():
    FakeNova.known, FakeNova.servers, FakeNova.status, FakeNova.seen = set(), {}, None, []
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), FakeNova)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def nova_conf(conf, fake_nova):
    _point_nova_at(conf, fake_nova.server_address[1])
    yield conf
    for name in ('auth_type', 'endpoint_override'):
        conf.clear_override(name, group='nova')


def _released(st):
    return st.conductor.metrics.registry.get_sample_value(COUNTER) or 0.0


def _arqs_of(database, inst):
    with database.reader() as s:
        return [(a.uuid, a.state) for a in arq_db.arq_list(s, instance_uuid=inst)]


def _task_lines(caplog):
    return [r for r in caplog.records if r.name == 'steward.conductor.periodic'
            and r.levelno >= logging.DEBUG and r.funcName in (
                'release_orphan_arqs', '_left_behind', '_release_left_behind')]


def _later(seconds):
    return timeutils.utcnow() + datetime.timedelta(seconds=seconds)


def test_an_arq_of_an_instance_nova_deleted_is_released_after_the_grace(database,
        life, nova_conf, caplog):
    nova_conf.set_override('periodic_interval', 0.05, group='conductor')
    nova_conf.set_override('orphan_grace', 0.3, group='conductor')
    st = life.start()
    dev = st.device()
    inst, arq = st.bind(dev)            # Nova then deletes the server; its DELETE
    before = _released(st)                # of the ARQs never reached Steward
    with caplog.at_level(logging.WARNING, logger='steward'):
        st.conductor.start()
        assert st.wait_state(dev['uuid'], ('available', 'error'))[
            'device_state'] == 'available'
        st.conductor.stop()
    assert _arqs_of(database, inst) == []
    assert st.api.get('/v2/accelerator_requests').json()['arqs'] == []
    assert life.driver.cleaned == [dev['uuid']]      # released and cleaned
    assert f'/v2.1/servers/{inst}' in FakeNova.seen
    lines = [r for r in _task_lines(caplog) if inst in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert arq in lines[0].getMessage()
    assert _released(st) == before + 1
    assert not [r for r in caplog.records if r.exc_info]


def test_the_grace_counts_from_the_first_404_and_a_server_seen_again_is_forgotten(database,
        life, nova_conf, caplog):
    nova_conf.set_override('orphan_grace', 600, group='conductor')
    st = life.start()
    dev = st.device()
    inst, arq = st.bind(dev)
    periodic, ctx = st.conductor.periodic, context.get_admin_context()
    before = _released(st)
    with caplog.at_level(logging.DEBUG, logger='steward.conductor.periodic'):
        assert periodic.release_orphan_arqs(ctx, now=_later(0)) == []      # first 404
        assert periodic.release_orphan_arqs(ctx, now=_later(300)) == []    # in grace
        FakeNova.known.add(inst)                                           # exists
        assert periodic.release_orphan_arqs(ctx, now=_later(400)) == []
        FakeNova.known.discard(inst)
        assert periodic.release_orphan_arqs(ctx, now=_later(700)) == []    # 404 again
        assert _task_lines(caplog) == []
        assert _arqs_of(database, inst) == [(arq, 'Bound')]
        assert periodic.release_orphan_arqs(ctx, now=_later(1301)) == [inst]
    assert _arqs_of(database, inst) == []
    assert len(FakeNova.seen) == 5
    assert st.wait_state(dev['uuid'], ('available', 'error'))[
        'device_state'] == 'available'
    assert _released(st) == before + 1


def test_an_instance_nova_knows_keeps_its_arq(database, life, nova_conf, caplog):
    nova_conf.set_override('orphan_grace', 0, group='conductor')
    st = life.start()
    dev = st.device()
    inst, arq = st.bind(dev)
    FakeNova.known.add(inst)
    periodic, ctx = st.conductor.periodic, context.get_admin_context()
    before = _released(st)
    with caplog.at_level(logging.DEBUG, logger='steward.conductor.periodic'):
        for hours in (0, 1, 24):
            assert periodic.release_orphan_arqs(ctx, now=_later(hours * 3600)) == []
    assert FakeNova.seen == [f'/v2.1/servers/{inst}'] * 3
    assert _arqs_of(database, inst) == [(arq, 'Bound')]
    assert st.device(dev['uuid'])['device_state'] == 'allocated'
    assert _task_lines(caplog) == []
    assert _released(st) == before


def test_a_nova_that_answers_500_releases_nothing(database, life, nova_conf, caplog):
    nova_conf.set_override('orphan_grace', 0, group='conductor')
    st = life.start()
    dev = st.device()
    inst, arq = st.bind(dev)
    FakeNova.status = 500
    periodic, ctx = st.conductor.periodic, context.get_admin_context()
    before = _released(st)
    with caplog.at_level(logging.DEBUG, logger='steward.conductor.periodic'):
        for hours in (0, 1, 24):
            assert periodic.release_orphan_arqs(ctx, now=_later(hours * 3600)) == []
    assert len(FakeNova.seen) == 3
    assert _arqs_of(database, inst) == [(arq, 'Bound')]
    assert st.device(dev['uuid'])['device_state'] == 'allocated'
    lines = _task_lines(caplog)
    assert len(lines) == 3                          # one per run
    assert all('HTTP 500' in r.getMessage() for r in lines)
    assert _released(st) == before
    assert not [r for r in caplog.records if r.exc_info]


def _closed_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def test_an_unreachable_nova_releases_nothing(database, life, conf, caplog):
    _point_nova_at(conf, _closed_port())
    conf.set_override('orphan_grace', 0, group='conductor')
    try:
        st = life.start()
        dev = st.device()
        inst, arq = st.bind(dev)
        periodic, ctx = st.conductor.periodic, context.get_admin_context()
        before = _released(st)
        with caplog.at_level(logging.DEBUG, logger='steward.conductor.periodic'):
            for hours in (0, 1, 24):
                assert periodic.release_orphan_arqs(ctx, now=_later(hours * 3600)) == []
    finally:
        for name in ('auth_type', 'endpoint_override'):
            conf.clear_override(name, group='nova')
    assert _arqs_of(database, inst) == [(arq, 'Bound')]
    assert st.device(dev['uuid'])['device_state'] == 'allocated'
    lines = _task_lines(caplog)
    assert len(lines) == 3
    assert all('ConnectFailure' in r.getMessage() for r in lines)
    assert _released(st) == before
    assert not [r for r in caplog.records if r.exc_info]


def test_without_nova_nothing_is_asked(database, life, conf, fake_nova, caplog):
    """[nova] names no endpoint: the endpoint that would answer sees no request,
    the task logs nothing and the ARQ stays, however long."""
    conf.set_override('orphan_grace', 0, group='conductor')
    st = life.start()
    dev = st.device()
    inst, arq = st.bind(dev)
    periodic = st.conductor.periodic
    before = _released(st)
    with caplog.at_level(logging.DEBUG, logger='steward.conductor.periodic'):
        for hours in (0, 1, 24):
            assert periodic.release_orphan_arqs(context.get_admin_context(),
                                                now=_later(hours * 3600)) == []
            periodic.run_once(now=_later(hours * 3600))
    assert FakeNova.seen == []
    assert _task_lines(caplog) == []
    assert _arqs_of(database, inst) == [(arq, 'Bound')]
    assert _released(st) == before


# -- a move's sets: the one left behind after it finished ---------------------------
def _moved(st, conf):
    """An instance moved from A to B with both sets Bound (Nova's DELETE of the
    source's never reached Steward): (host B, the move's facts)."""
    from tests.functional import lifecycle_stack
    from tests.functional.test_arq_two_hosts import move
    b = lifecycle_stack.second_host(st, conf)
    return b, move(st, b)


def test_the_set_a_finished_move_left_behind_is_deleted_after_the_grace(database, life,
        nova_conf, caplog):
    nova_conf.set_override('orphan_grace', 600, group='conductor')
    st = life.start()
    b, mv = _moved(st, nova_conf)
    try:
        inst = mv['inst']
        FakeNova.servers[inst] = {'host': b.name}      # confirmed: ACTIVE on B
        periodic, ctx = st.conductor.periodic, context.get_admin_context()
        before = _released(st)
        with caplog.at_level(logging.DEBUG, logger='steward.conductor.periodic'):
            assert periodic.release_orphan_arqs(ctx, now=_later(0)) == []
            assert periodic.release_orphan_arqs(ctx, now=_later(599)) == []   # in grace
            assert _task_lines(caplog) == []
            assert periodic.release_orphan_arqs(ctx, now=_later(601)) == [inst]
        assert _arqs_of(database, inst) == [(mv['dst'], 'Bound')]
        assert st.wait_state(mv['dev_a']['uuid'], ('available', 'error'))[
            'device_state'] == 'available'
        assert life.driver.cleaned == [mv['dev_a']['uuid']]
        assert st.device(mv['dev_b']['uuid'])['device_state'] == 'allocated'
        assert b.driver.cleaned == []
        lines = _task_lines(caplog)
        assert len(lines) == 1 and lines[0].levelno == logging.WARNING
        text = lines[0].getMessage()
        assert mv['src'] in text and mv['dst'] not in text
        assert b.name in text and st.host in text
        assert _released(st) == before + 1
        # Nothing more to do: the instance holds one set, on its host.
        assert periodic.release_orphan_arqs(ctx, now=_later(5000)) == []
        assert _arqs_of(database, inst) == [(mv['dst'], 'Bound')]
        assert not [r for r in caplog.records if r.exc_info]
    finally:
        b.stop()


@pytest.mark.parametrize('status,task_state', [
    ('RESIZE', 'resize_migrating'), ('RESIZE', 'resize_finish'),
    ('VERIFY_RESIZE', None), ('REVERT_RESIZE', 'resize_reverting'),
    ('MIGRATING', 'migrating'), ('ACTIVE', 'resize_prep')])
def test_nothing_is_deleted_while_the_instance_moves(database, life, nova_conf, caplog,
                                                     status, task_state):
    nova_conf.set_override('orphan_grace', 600, group='conductor')
    st = life.start()
    b, mv = _moved(st, nova_conf)
    try:
        inst = mv['inst']
        periodic, ctx = st.conductor.periodic, context.get_admin_context()
        both = sorted([(mv['src'], 'Bound'), (mv['dst'], 'Bound')])
        with caplog.at_level(logging.DEBUG, logger='steward.conductor.periodic'):
            for host in (st.host, b.name):          # wherever Nova has it meanwhile
                FakeNova.servers[inst] = {'host': host, 'status': status,
                                          'task_state': task_state}
                for hours in (0, 1, 24):
                    assert periodic.release_orphan_arqs(
                        ctx, now=_later(hours * 3600)) == []
            assert sorted(_arqs_of(database, inst)) == both
            assert _task_lines(caplog) == []
            # Reverted: ACTIVE on A again. The grace counts from now, and only the
            # destination's set is left behind.
            FakeNova.servers[inst] = {'host': st.host}
            assert periodic.release_orphan_arqs(ctx, now=_later(86400 + 10)) == []
            # A new move during the grace starts it over.
            FakeNova.servers[inst] = {'host': st.host, 'status': status,
                                      'task_state': task_state}
            assert periodic.release_orphan_arqs(ctx, now=_later(86400 + 400)) == []
            FakeNova.servers[inst] = {'host': st.host}
            assert periodic.release_orphan_arqs(ctx, now=_later(86400 + 700)) == []
            assert periodic.release_orphan_arqs(ctx, now=_later(86400 + 1299)) == []
            assert sorted(_arqs_of(database, inst)) == both
            assert periodic.release_orphan_arqs(ctx, now=_later(86400 + 1301)) == [inst]
        assert _arqs_of(database, inst) == [(mv['src'], 'Bound')]
        assert st.wait_state(mv['dev_b']['uuid'], ('available', 'error'))[
            'device_state'] == 'available'
        assert b.driver.cleaned == [mv['dev_b']['uuid']]
        assert life.driver.cleaned == []
    finally:
        b.stop()


def test_a_host_no_agent_reports_keeps_every_set(database, life, nova_conf, caplog):
    """Nova names a host Steward has no device on (the agents' [DEFAULT] host is
    not Nova's compute host name): nothing is deleted, and it is said once."""
    nova_conf.set_override('orphan_grace', 0, group='conductor')
    st = life.start()
    dev = st.device()
    inst, arq = st.bind(dev)
    FakeNova.servers[inst] = {'host': 'compute-as-nova-names-it'}
    periodic, ctx = st.conductor.periodic, context.get_admin_context()
    before = _released(st)
    with caplog.at_level(logging.DEBUG, logger='steward.conductor.periodic'):
        for hours in (0, 1, 24):
            assert periodic.release_orphan_arqs(ctx, now=_later(hours * 3600)) == []
    assert _arqs_of(database, inst) == [(arq, 'Bound')]
    lines = _task_lines(caplog)
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert 'compute-as-nova-names-it' in lines[0].getMessage()
    assert arq in lines[0].getMessage()
    assert _released(st) == before


def test_an_instance_on_the_host_of_its_arqs_keeps_them(database, life, nova_conf, caplog):
    nova_conf.set_override('orphan_grace', 0, group='conductor')
    st = life.start()
    dev = st.device()
    inst, arq = st.bind(dev)
    FakeNova.servers[inst] = {'host': st.host}
    periodic, ctx = st.conductor.periodic, context.get_admin_context()
    with caplog.at_level(logging.DEBUG, logger='steward.conductor.periodic'):
        for hours in (0, 1, 24):
            assert periodic.release_orphan_arqs(ctx, now=_later(hours * 3600)) == []
    assert _arqs_of(database, inst) == [(arq, 'Bound')]
    assert _task_lines(caplog) == []
    assert not [r for r in caplog.records if r.name == 'steward.conductor.periodic']
