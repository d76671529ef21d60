"""Nothing stuck, ever: an agent unreachable at unbind, a lost cleanup request, an
agent that died mid-cleanup, deletes left in Deleting. The conductor's own code on
the real database, Placement and in-memory RPC, with the periodic worker that
``steward serve`` and ``steward conductor`` start (ConductorManager.start)."""
import datetime
import logging
import threading
import uuid

from oslo_utils import timeutils
import pytest

from steward.common import context
from steward.common import states
from steward.conductor.manager import ConductorManager
from steward.db import arqs as arq_db
from steward.db import devices as device_db
from steward.db import models as m
from steward.db import transitions
from tests.functional import agent_doubles
from tests.functional import conductor_fixtures as cf
from tests.functional.lifecycle_stack import life, wait_for  # noqa: F401 (fixture)

# On every database Steward runs on (tests/conftest.py ``db``).
pytestmark = pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)


def _steps(history):
    return [(h['source_state'], h['event'], h['target_state'], h['actor'])
            for h in history]


def _no_tracebacks(caplog):
    assert not [r for r in caplog.records if r.exc_info and r.name.startswith('steward')], \
        'an expected condition was logged with a traceback'


def _fast_periodics(conf, **extra):
    conf.set_override('periodic_interval', 0.1, group='conductor')
    for name, value in extra.items():
        conf.set_override(name, value, group='nvme' if name == 'cleanup_timeout'
                          else 'conductor')


def _lose_the_cleanup_request(st, life, dev):
    """Bound, then released while the host's agent answers ping but loses the
    cleanup request: pending_cleaning with nothing started."""
    inst, _ = st.bind(dev)
    st.kill_agent()
    with agent_doubles.Served(agent_doubles.DeafAgent(life.host), life.transport) as deaf:
        st.release(inst)
        assert deaf.asked.wait(10)
    assert st.device(dev['uuid'])['device_state'] == 'pending_cleaning'


def test_agent_down_at_unbind_the_device_stays_allocated_until_its_agent_starts(database,
        life, conf, caplog):
    st = life.start()
    dev = st.device()
    rp = st.deployable(dev)['rp_uuid']
    inst, arq = st.bind(dev)
    st.kill_agent()
    with life.agent_unreachable(), caplog.at_level(logging.WARNING,
                                                   logger='steward.conductor'):
        st.release(inst)
    held = st.device(dev['uuid'])
    assert held['device_state'] == 'allocated'
    assert st.api.get('/v2/accelerator_requests').json()['arqs'] == []
    assert st.inventory(rp)['reserved'] == 1
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
             and r.name.startswith('steward')]
    assert len(lines) == 1, lines
    assert f'the agent of {life.host} is unreachable' in lines[0]
    assert 'will be cleaned when its agent starts' in lines[0]
    assert [h['event'] for h in st.history(dev['uuid'])] == ['bind']

    st.start_agent(discover=False)          # init_host: start-up recovery
    assert st.wait_state(dev['uuid'], ('available', 'error'))['device_state'] == 'available'
    assert life.driver.cleaned == [dev['uuid']]
    assert st.records(dev['uuid'])[0]['trigger'] == 'recovery'
    assert st.inventory(rp)['reserved'] == 0
    assert _steps(st.history(dev['uuid']))[1:] == [
        ('allocated', 'recover_missed_cleanup', 'pending_cleaning', f'agent {life.host}'),
        ('pending_cleaning', 'start_cleaning', 'cleaning', f'agent {life.host}'),
        ('cleaning', 'cleaned', 'available', f'agent {life.host}')]
    _no_tracebacks(caplog)


def test_a_lost_cleanup_request_is_cleaned_at_agent_start_not_failed(life):
    st = life.start()
    dev = st.device()
    _lose_the_cleanup_request(st, life, dev)
    st.start_agent(discover=False)
    assert st.wait_state(dev['uuid'], ('available', 'error'))['device_state'] == 'available'
    rec = st.records(dev['uuid'])
    assert [(r['status'], r['trigger']) for r in rec] == [('succeeded', 'recovery')]


def test_the_periodic_task_sends_a_lost_cleanup_request_again(life, conf, caplog):
    _fast_periodics(conf, cleanup_resend_interval=0.3)
    st = life.start()
    dev = st.device()
    _lose_the_cleanup_request(st, life, dev)
    st.start_agent(recover=False, discover=False)   # listening, no start-up recovery
    with caplog.at_level(logging.INFO, logger='steward.conductor'):
        st.conductor.start()
        assert st.wait_state(dev['uuid'], ('available', 'error'))[
            'device_state'] == 'available'
        st.conductor.stop()
    assert st.conductor.periodic._thread is None
    resent = [r.getMessage() for r in caplog.records if 'again' in r.getMessage()]
    assert resent and dev['uuid'] in resent[0] and r'never started' in resent[0]
    assert all(r.levelno == logging.WARNING for r in caplog.records
               if 'again' in r.getMessage())
    # The cleanup is the one the tenant's release asked for.
    assert [(r['status'], r['trigger']) for r in st.records(dev['uuid'])] == [
        ('succeeded', 'unbind')]
    _no_tracebacks(caplog)


def test_with_no_agent_a_pending_cleanup_goes_to_error_after_timeout_and_grace(database,
        life, conf, caplog):
    _fast_periodics(conf, cleanup_timeout=1, cleanup_grace=0.2,
                    cleanup_resend_interval=0.2)
    st = life.start()
    dev = st.device()
    rp = st.deployable(dev)['rp_uuid']
    _lose_the_cleanup_request(st, life, dev)
    with caplog.at_level(logging.INFO, logger='steward'):
        st.conductor.start()
        failed = st.wait_state(dev['uuid'], ('error',))
    assert failed['last_error'].startswith('cleanup stuck: no progress since ')
    assert failed['last_error'].endswith('(last step none: the agent never started it)')
    rec = st.records(dev['uuid'])[0]
    assert (rec['status'], rec['error_code'], rec['error_message']) == (
        'failed', 'cyb.cleanup.stuck', failed['last_error'])
    assert st.inventory(rp)['reserved'] == 1
    assert _steps(st.history(dev['uuid']))[-1] == (
        'pending_cleaning', 'fail', 'error', f'conductor {conf.host}')
    _no_tracebacks(caplog)


def test_a_cleanup_whose_agent_died_goes_to_error_when_stuck(database, life, conf, caplog):
    life.driver.hold = True
    st = life.start()
    dev = st.device()
    rp = st.deployable(dev)['rp_uuid']
    inst, _ = st.bind(dev)
    st.release(inst)
    assert life.driver.started.wait(10)
    wait_for(lambda: (st.records(dev['uuid']) or [{}])[0].get('phase') == 'erase',
             'the progress of the cleanup')
    st.kill_agent()                          # dies mid-cleanup: reports nothing more
    assert st.device(dev['uuid'])['device_state'] == 'cleaning'
    _fast_periodics(conf, cleanup_timeout=1, cleanup_grace=0.2)
    with caplog.at_level(logging.INFO, logger='steward'):
        st.conductor.start()
        failed = st.wait_state(dev['uuid'], ('error',))
    assert failed['last_error'].startswith('cleanup stuck: no progress since ')
    assert failed['last_error'].endswith('(last step erase 50 %)')
    rec = st.records(dev['uuid'])[0]
    assert (rec['status'], rec['error_code'], rec['assurance_level']) == (
        'failed', 'cyb.cleanup.stuck', 'none')
    assert rec['finished_at']
    assert st.inventory(rp)['reserved'] == 1
    _no_tracebacks(caplog)


def test_a_missed_release_is_cleaned_once_its_agent_answers(life, conf, caplog):
    _fast_periodics(conf, cleanup_resend_interval=0.3)
    st = life.start()
    dev = st.device()
    inst, _ = st.bind(dev)
    st.kill_agent()
    with life.agent_unreachable():
        st.release(inst)
        assert st.device(dev['uuid'])['device_state'] == 'allocated'
        with caplog.at_level(logging.WARNING, logger='steward.conductor'):
            st.conductor.start()
            # Unreachable: asked again each interval, still allocated and reserved.
            wait_for(lambda: len([r for r in caplog.records
                                  if 'is unreachable' in r.getMessage()]) >= 3,
                     'the periodic task to try again')
            assert st.device(dev['uuid'])['device_state'] == 'allocated'
    with caplog.at_level(logging.WARNING, logger='steward.conductor'):
        st.start_agent(recover=False, discover=False)
        assert st.wait_state(dev['uuid'], ('available', 'error'))[
            'device_state'] == 'available'
    assert ('allocated', 'recover_missed_cleanup', 'pending_cleaning',
            f'conductor {conf.host}') in _steps(st.history(dev['uuid']))
    assert st.records(dev['uuid'])[0]['trigger'] == 'recovery'
    _no_tracebacks(caplog)


def test_conductors_racing_on_a_stuck_cleanup_fail_it_once(life, conf):
    st = life.start()
    dev = st.device()
    _lose_the_cleanup_request(st, life, dev)
    conf.set_override('cleanup_grace', 0, group='conductor')
    later = timeutils.utcnow() + datetime.timedelta(hours=1)
    barrier = threading.Barrier(2)
    results = []

    def sweep():
        barrier.wait()
        results.append(st.conductor.periodic.fail_stuck_cleanups(
            context.get_admin_context(), now=later))
    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [[], [dev['uuid']]]
    assert [h['event'] for h in st.history(dev['uuid'])].count('fail') == 1
    assert len(st.records(dev['uuid'])) == 1


def test_deletes_left_in_deleting_are_finished_by_the_periodic_task(transport, database, db, conf):
    _fast_periodics(conf, stale_delete_grace=0.2)
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    arq = conductor.arq_create(cf.admin(), 'dp1', 'proj')[0]
    dep = cf.deployable(database)
    conductor.arq_bind(cf.admin(), [{'uuid': arq['uuid'], 'hostname': 'host-a',
                                     'device_rp_uuid': dep.rp_uuid,
                                     'instance_uuid': str(uuid.uuid4())}])
    with database.writer() as s:         # what a conductor that died mid-delete leaves
        row = arq_db.arq_get_many(s, [arq['uuid']])[0]
        transitions.advance(s, m.ExtARQ, row, states.ARQ_DELETING, event='delete')
    other = ConductorManager(cf.deps(database, transport))
    other.start()
    try:
        wait_for(lambda: _arqs(database) == [], 'the Deleting ARQ to be finished')
    finally:
        other.stop()
    with database.reader() as s:
        assert device_db.device_list(s)[0].device_state == states.DEV_AVAILABLE
        assert device_db.device_handles_in_use(s, dep.device_id) == 0


def _arqs(database):
    with database.reader() as s:
        return arq_db.arq_list(s)
