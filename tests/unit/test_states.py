"""The declared transition table and the advance() choke point."""
import pytest

from steward.common import exception
from steward.common import states
from steward.db import models as m
from steward.db import transitions


def test_every_state_is_reachable_or_initial():
    for kind, all_states, initial in (('arq', states.ARQ_STATES, {states.ARQ_INITIAL}),
                                      ('device', states.DEVICE_STATES, set())):
        targets = {t.target for t in states._TABLES[kind]}
        assert set(all_states) - targets <= initial, kind


def test_transition_sources_are_known_states():
    for t in states.ARQ_TRANSITIONS:
        assert t.source in states.ARQ_STATES and t.target in states.ARQ_STATES
    for t in states.DEVICE_TRANSITIONS:
        assert t.source in states.DEVICE_STATES + (None,)
        assert t.target in states.DEVICE_STATES


@pytest.mark.parametrize('target,allowed', [
    (states.ARQ_BIND_STARTED, {states.ARQ_INITIAL, states.ARQ_UNBOUND}),
    (states.ARQ_BOUND, {states.ARQ_BIND_STARTED}),
    (states.ARQ_BIND_FAILED, {states.ARQ_BIND_STARTED, states.ARQ_BOUND}),
])
def test_upstream_arq_edges(target, allowed):
    assert set(states.sources('arq', target)) == allowed


def test_error_is_left_only_by_operator_clean():
    # A device that needs cleaning is cleaned again; one that needs none (back
    # from a health fault, issue 38) returns at once: both by the operator.
    assert [t for t in states.DEVICE_TRANSITIONS if t.source == states.DEV_ERROR] == [
        states.Transition(states.DEV_ERROR, 'operator_clean', states.DEV_PENDING_CLEANING),
        states.Transition(states.DEV_ERROR, 'operator_clean', states.DEV_AVAILABLE)]


def _device(s, state):
    dev = m.Device(uuid='6a0b0a5e-08f3-4b7e-9a55-4b4a2a6f2f01', type='FPGA', vendor='v',
                   model='m', hostname='h', status='enabled', device_state=state)
    s.add(dev)
    s.flush()
    return dev


def test_advance_persists_and_rejects_undeclared(database, db):
    with database.writer() as s:
        dev = _device(s, states.DEV_AVAILABLE)
        transitions.advance(s, m.Device, dev, states.DEV_ALLOCATED, event='bind')
        dev_id = dev.id
    with database.reader() as s:
        assert s.get(m.Device, dev_id).device_state == states.DEV_ALLOCATED
    with pytest.raises(exception.InvalidStateTransition):
        with database.writer() as s:
            transitions.advance(s, m.Device, s.get(m.Device, dev_id), states.DEV_CLEANING)
    with database.reader() as s:
        assert s.get(m.Device, dev_id).device_state == states.DEV_ALLOCATED


def test_advance_detects_concurrent_change(database, db):
    with database.writer() as s:
        dev_id = _device(s, states.DEV_AVAILABLE).id
    with database.reader() as s:
        stale = s.get(m.Device, dev_id)
    with database.writer() as s:
        transitions.advance(s, m.Device, s.get(m.Device, dev_id), states.DEV_ALLOCATED,
                            event='bind')
    with pytest.raises(exception.ConcurrentUpdate):
        with database.writer() as s:
            # ``stale`` still believes the device is available.
            transitions.advance(s, m.Device, stale, states.DEV_ALLOCATED, event='bind')


def test_a_transaction_logs_its_transitions_as_one_line_in_order():
    line = transitions._transitions_line([
        ('arq', 'a1', 'Initial', 'BindStarted', 'bind', None, 'req-1'),
        ('arq', 'a1', 'BindStarted', 'Bound', 'bind_done', None, 'req-1'),
        ('device', 'd1', 'available', 'allocated', 'bind', None, 'req-1')])
    assert line == ('arq a1: Initial -> BindStarted (bind); '
                    'arq a1: BindStarted -> Bound (bind_done); '
                    'device d1: available -> allocated (bind) request_id=req-1')


def test_transitions_of_several_requests_keep_each_its_request_id():
    line = transitions._transitions_line([
        ('device', 'd1', 'cleaning', 'error', 'fail', 'cyb.cleanup.x', 'req-1'),
        ('device', 'd2', 'cleaning', 'available', 'cleaned', None, 'req-2'),
        ('device', 'd3', 'cleaning', 'available', 'cleaned', None, None)])
    assert line == ('device d1: cleaning -> error (fail) reason=cyb.cleanup.x '
                    'request_id=req-1; device d2: cleaning -> available (cleaned) '
                    'request_id=req-2; device d3: cleaning -> available (cleaned)')


def test_transition_listeners_are_on_stewards_sessions_only(database, db):
    """advance()'s commit log and created-device history listen on the sessions of
    a Database, not on every SQLAlchemy Session and Mapper of the process."""
    from sqlalchemy import event
    from sqlalchemy import orm
    listeners = (('after_flush', transitions._created_history),
                 ('after_commit', transitions._flush_logs),
                 ('after_rollback', transitions._drop_logs))
    for name, listener in listeners:
        assert not event.contains(orm.Session, name, listener), name
        for factory in (database._reader_factory, database._writer_factory):
            assert event.contains(factory, name, listener), name
    assert not any(event.contains(orm.Mapper, 'after_insert', f) for f in
                   vars(transitions).values() if callable(f))


def _arq(s, state):
    profile = m.DeviceProfile(uuid='0c1d0a5e-08f3-4b7e-9a55-4b4a2a6f2f02', name='dp',
                              profile_json='[]')
    s.add(profile)
    s.flush()
    arq = m.ExtARQ(uuid='1e2d0a5e-08f3-4b7e-9a55-4b4a2a6f2f03', state=state,
                   device_profile_id=profile.id)
    s.add(arq)
    s.flush()
    return arq


@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_advance_via_a_state_checks_and_logs_both_edges_in_one_update(database, db,
                                                                     caplog):
    with database.writer() as s:
        arq_id = _arq(s, states.ARQ_INITIAL).id
    caplog.set_level('INFO', logger='steward.common.states')
    with database.writer() as s:
        arq = s.get(m.ExtARQ, arq_id)
        transitions.advance(s, m.ExtARQ, arq, states.ARQ_BOUND, event='bind_done',
                            via=(states.ARQ_BIND_STARTED, 'bind'), request_id='req-1')
    with database.reader() as s:
        assert s.get(m.ExtARQ, arq_id).state == states.ARQ_BOUND
    assert [r.getMessage() for r in caplog.records] == [
        'arq 1e2d0a5e-08f3-4b7e-9a55-4b4a2a6f2f03: Initial -> BindStarted (bind); '
        'arq 1e2d0a5e-08f3-4b7e-9a55-4b4a2a6f2f03: BindStarted -> Bound (bind_done) '
        'request_id=req-1']
    # Either edge missing refuses the whole move, and nothing is written.
    for via, target, event in (((states.ARQ_BIND_STARTED, 'bind'), states.ARQ_BOUND,
                                'bind_done'),
                               ((states.ARQ_DELETING, 'delete'), states.ARQ_BOUND,
                                'bind_done')):
        with pytest.raises(exception.InvalidStateTransition):
            with database.writer() as s:
                transitions.advance(s, m.ExtARQ, s.get(m.ExtARQ, arq_id), target,
                                    event=event, via=via)
    with database.reader() as s:
        assert s.get(m.ExtARQ, arq_id).state == states.ARQ_BOUND


@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_remove_deletes_the_row_in_the_state_read_only(database, db, caplog):
    with database.writer() as s:
        arq_id = _arq(s, states.ARQ_INITIAL).id
    with database.reader() as s:
        stale = s.get(m.ExtARQ, arq_id)
    with database.writer() as s:
        transitions.advance(s, m.ExtARQ, s.get(m.ExtARQ, arq_id),
                            states.ARQ_BIND_STARTED, event='bind')
    with pytest.raises(exception.ConcurrentUpdate):
        with database.writer() as s:
            # ``stale`` still believes the ARQ is Initial: nothing is removed.
            transitions.remove(s, m.ExtARQ, stale, states.ARQ_DELETING, event='delete')
    with pytest.raises(exception.InvalidStateTransition):
        with database.writer() as s:
            transitions.remove(s, m.ExtARQ, s.get(m.ExtARQ, arq_id),
                               states.ARQ_DELETING, event='bind')
    with database.reader() as s:
        assert s.get(m.ExtARQ, arq_id).state == states.ARQ_BIND_STARTED
    caplog.set_level('INFO', logger='steward.common.states')
    with database.writer() as s:
        transitions.remove(s, m.ExtARQ, s.get(m.ExtARQ, arq_id), states.ARQ_DELETING,
                           event='delete', request_id='req-2')
    with database.reader() as s:
        assert s.get(m.ExtARQ, arq_id) is None
    assert [r.getMessage() for r in caplog.records] == [
        'arq 1e2d0a5e-08f3-4b7e-9a55-4b4a2a6f2f03: BindStarted -> Deleting (delete) '
        'request_id=req-2']


def test_remove_refuses_a_row_with_history(database, db):
    with database.writer() as s:
        dev = _device(s, states.DEV_AVAILABLE)
        with pytest.raises(TypeError):
            transitions.remove(s, m.Device, dev, states.DEV_ALLOCATED, event='bind')
