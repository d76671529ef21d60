"""The conductor's side of device health (steward/conductor/health_ops.py) on a real
SQLite database: what a reading stores, when it changes the state, what the
history and last_error say, and the fault latch an operator alone clears."""
import pytest

from steward.arqs import reservation
from steward.common import context
from steward.common import exception
from steward.common import health
from steward.common import report_digest
from steward.common import states
from steward.conductor import health_ops
from steward.db import device_history as history_db
from steward.db import models as m

UUID = '6a0b0a5e-08f3-4b7e-9a55-4b4a2a6f2f02'
CTX = context.get_admin_context()


def _device(s, state):
    dev = m.Device(uuid=UUID, type='PCI', vendor='v', model='m', hostname='h',
                   status='enabled', device_state=state)
    s.add(dev)
    s.flush()
    return dev


def _reading(*conditions):
    return health.read_now([health.Condition(*c) for c in conditions])


def _events(s):
    return [(h.event, h.source_state, h.target_state)
            for h in history_db.device_history_list(s, UUID)]


def test_a_first_healthy_reading_is_stored_without_history(database):
    with database.writer() as s:
        dev = _device(s, states.DEV_AVAILABLE)
        assert health_ops.apply(s, CTX, dev, _reading()) is False
        assert (dev.health, dev.health_conditions, dev.health_fault) == ('ok', '[]', None)
        assert dev.health_read_at is not None
        assert _events(s) == []


def test_a_warning_is_a_note_and_changes_nothing_else(database):
    with database.writer() as s:
        dev = _device(s, states.DEV_AVAILABLE)
        health_ops.apply(s, CTX, dev, _reading(('pci.aer_nonfatal', 'warning', '1')))
        assert dev.device_state == states.DEV_AVAILABLE and dev.health_fault is None
        assert _events(s) == [('health_warning', 'available', 'available')]
        assert reservation.policy(s, dev, accelerators=1).bindable
        health_ops.apply(s, CTX, dev, _reading())
        assert _events(s)[-1] == ('health_ok', 'available', 'available')


def test_unhealthy_in_error_keeps_the_errors_reason(database):
    with database.writer() as s:
        dev = _device(s, states.DEV_ERROR)
        dev.last_error = 'cyb.cleanup.verify_failed: tenant bytes found'
        assert health_ops.apply(s, CTX, dev, _reading(('pci.aer_fatal', 'unhealthy', '2')))
        assert dev.last_error.startswith('cyb.cleanup.verify_failed')
        assert 'pci.aer_fatal' in dev.health_fault
        assert _events(s)[-1] == ('unhealthy', 'error', 'error')    # after 'discovered'


def test_the_fault_latches_until_an_operator_clears_it(database):
    with database.writer() as s:
        dev = _device(s, states.DEV_ALLOCATED)
        health_ops.apply(s, CTX, dev, _reading(('pci.aer_fatal', 'unhealthy', '1')))
        rule = reservation.policy(s, dev, accelerators=4)
        assert rule.reserved_for(m.Deployable(num_accelerators=4)) == 4   # shared too
        assert rule.refusal.code == 'cyb.bind.device_unhealthy'
        with pytest.raises(exception.DeviceStillUnhealthy):
            health_ops.check_recoverable(dev)
        # a second unhealthy reading adds no second fault note
        health_ops.apply(s, CTX, dev, _reading(('pci.aer_fatal', 'unhealthy', '1')))
        assert [e for e in _events(s) if e[0] == 'unhealthy'] == [
            ('unhealthy', 'allocated', 'allocated')]
        health_ops.apply(s, CTX, dev, _reading())          # cleared by itself...
        assert dev.health == 'ok' and dev.health_fault     # ...is still a fault
        health_ops.check_recoverable(dev)                  # but may be brought back
        health_ops.clear_fault(s, CTX, dev)
        assert dev.health_fault is None
        assert reservation.policy(s, dev, accelerators=4).refusal is None


def test_an_unreadable_payload_is_no_reading():
    assert health_ops.parse(None) is None
    assert health_ops.parse({'conditions': [{'code': 'nvme.made_up',
                                             'severity': 'unhealthy'}]}) is None
    assert health_ops.parse({'conditions': [{'code': 'pci.aer_fatal',
                                             'severity': 'fatal'}]}) is None
    assert health_ops.parse('unhealthy') is None


def test_the_digest_ignores_only_the_time():
    a = [{'uuid': 1, 'health': {'state': 'ok', 'read_at': 't1', 'conditions': []}}]
    b = [{'uuid': 1, 'health': {'state': 'ok', 'read_at': 't2', 'conditions': []}}]
    c = [{'uuid': 1, 'health': {'state': 'warning', 'read_at': 't2', 'conditions': []}}]
    assert report_digest.without_read_at(a) == report_digest.without_read_at(b)
    assert report_digest.without_read_at(a) != report_digest.without_read_at(c)
    assert report_digest.digest('h', a) == report_digest.digest('h', b)
    assert report_digest.digest('h', a) != report_digest.digest('h', c)
    assert report_digest.digest('h', a) != report_digest.digest('other', a)
    assert report_digest.newest_read_at(a + b) == 't2'
    assert a[0]['health']['read_at'] == 't1'            # the payload is not changed
