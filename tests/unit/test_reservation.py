"""The one reservation rule (steward/arqs/reservation.py) on real SQLite rows:
every device_state x status x single/shared device, and missing devices."""
import itertools
import uuid

from oslo_utils import timeutils
import pytest

from steward.arqs import device_ops
from steward.arqs import reservation
from steward.common import exception
from steward.common import states
from steward.conductor import deps as conductor_deps
from steward.db import models as m

ALL_STATES = (None,) + states.DEVICE_STATES
# Deployables of a device, by shape: one function; 16 functions on one deployable
# (the fake FPGA); two 1-instance mdev types on one parent (shared all the same).
SHAPES = {'single': (1,), 'multi': (16,), 'two_types': (1, 1)}

# Placement ``reserved`` of an enabled device, per state (T: the deployable's total;
# None: leave Placement alone, the state is not backfilled yet).
T = 'total'
RESERVED_SINGLE = {None: None, 'available': 0, 'allocated': T, 'pending_cleaning': T,
                   'cleaning': T, 'error': T}
RESERVED_SHARED = {None: None, 'available': 0, 'allocated': 0, 'pending_cleaning': T,
                   'cleaning': T, 'error': T}
BINDABLE_SINGLE = {'available'}
BINDABLE_SHARED = {'available', 'allocated'}


def _device(s, state, status, shape, missing=False):
    dev = m.Device(uuid=str(uuid.uuid4()), type='FPGA', vendor='v', model='m',
                   hostname='h', status=status, device_state=state,
                   missing_since=timeutils.utcnow() if missing else None)
    s.add(dev)
    s.flush()
    deps = []
    for i, count in enumerate(SHAPES[shape]):
        dep = m.Deployable(uuid=str(uuid.uuid4()), name=f'{dev.uuid}-{i}',
                           num_accelerators=count, device_id=dev.id)
        s.add(dep)
        deps.append(dep)
    s.flush()
    return dev, deps


CASES = list(itertools.product(ALL_STATES, states.DEVICE_STATUSES, SHAPES))


@pytest.mark.parametrize('state,status,shape', CASES)
def test_reserved_and_bindable(database, db, state, status, shape):
    with database.writer() as s:
        dev, deps = _device(s, state, status, shape)
        rule = reservation.policy(s, dev)
        assert rule.single is (shape == 'single')
        # Counted in the database or from the deployables the caller holds: same.
        assert reservation.policy(s, dev, deps) == rule
        maintaining = status == states.DEVICE_STATUS_MAINTAINING
        table = RESERVED_SINGLE if shape == 'single' else RESERVED_SHARED
        for dep in deps:
            want = dep.num_accelerators if maintaining else table[state]
            if want == T:
                want = dep.num_accelerators
            assert rule.reserved_for(dep) == want, (state, status, shape)
        bindable = (not maintaining and state in (
            BINDABLE_SINGLE if shape == 'single' else BINDABLE_SHARED))
        assert rule.bindable is bindable
        if bindable:
            assert rule.refusal is None
            assert device_ops.check_bindable(s, deps[0]) is dev
        else:
            want = (exception.DeviceMaintaining if maintaining
                    else exception.DeviceNotAvailable)
            assert type(rule.refusal) is want
            with pytest.raises(want):
                device_ops.check_bindable(s, deps[0])
        s.rollback()


@pytest.mark.parametrize('state,status,shape', CASES)
def test_a_missing_device_is_never_bindable(database, db, state, status, shape):
    with database.writer() as s:
        dev, deps = _device(s, state, status, shape, missing=True)
        rule = reservation.policy(s, dev)
        assert not rule.bindable
        maintaining = status == states.DEVICE_STATUS_MAINTAINING
        want = exception.DeviceMaintaining if maintaining else exception.DeviceMissing
        assert type(rule.refusal) is want
        with pytest.raises(want):
            device_ops.check_bindable(s, deps[0])
        # Its reservation is what its state asks: it is kept only while in use.
        present = reservation.policy(s, dev)
        assert [rule.reserved_for(d) for d in deps] == \
            [present.reserved_for(d) for d in deps]
        s.rollback()


def test_current_reserved_reads_the_committed_rows(database, db):
    with database.writer() as s:
        dev, deps = _device(s, states.DEV_ALLOCATED, states.DEVICE_STATUS_ENABLED,
                            'single')
        single_id = deps[0].id
        dev, deps = _device(s, None, states.DEVICE_STATUS_ENABLED, 'multi')
        unset_id = deps[0].id
    # Only the database of the conductor's Deps is read.
    deps = conductor_deps.Deps(database=database, metrics=None, placement_client=None,
                               nova=None, notifier=None, agent_api=None)
    assert device_ops.current_reserved(deps, single_id) == 1
    # Not backfilled: the fallback (Placement is left as it is).
    assert device_ops.current_reserved(deps, unset_id, 'keep') == 'keep'
    assert device_ops.current_reserved(deps, 10 ** 9, 'gone') == 'gone'


# -- pools (issue 52): one provider for several single-function devices ------------
# A pool's reserved counts its devices out of service; its devices in use are
# Nova's allocations, not reservations.
POOL_OUT = {None: True, 'available': False, 'allocated': False,
            'pending_cleaning': True, 'cleaning': True, 'error': True}


def _pool(s, rp, members, released=()):
    """Devices of one function each, all on provider ``rp``; ``members``:
    [(state, status, health_fault, missing)]. An allocated one holds its handle
    (a tenant's), unless its index is in ``released`` (its tenant left, its
    cleanup not dispatched yet)."""
    ids = []
    for i, (state, status, fault, missing) in enumerate(members):
        dev, (dep,) = _device(s, state, status, 'single', missing=missing)
        dev.health_fault = fault
        dep.rp_uuid = rp
        cpid = m.ControlpathID(uuid=str(uuid.uuid4()), device_id=dev.id, hostname='h',
                               cpid_type='PCI', cpid_info=dev.uuid)
        s.add(cpid)
        s.flush()
        s.add(m.AttachHandle(uuid=str(uuid.uuid4()), deployable_id=dep.id,
                             cpid_id=cpid.id, attach_type='PCI', attach_info=dev.uuid,
                             in_use=state == 'allocated' and i not in released))
        ids.append(dep.id)
    s.flush()
    return ids


@pytest.mark.parametrize('state,status', list(itertools.product(
    ALL_STATES, states.DEVICE_STATUSES)))
def test_a_pool_reserves_its_devices_out_of_service(database, db, state, status):
    deps = conductor_deps.Deps(database=database, metrics=None, placement_client=None,
                               nova=None, notifier=None, agent_api=None)
    rp = str(uuid.uuid4())
    with database.writer() as s:
        # Three in service (two in use), and the one under test.
        ids = _pool(s, rp, [('available', 'enabled', None, False),
                            ('allocated', 'enabled', None, False),
                            ('allocated', 'enabled', None, False),
                            (state, status, None, False)])
    out = status == states.DEVICE_STATUS_MAINTAINING or POOL_OUT[state]
    # Whichever member is asked, the answer is the pool's.
    assert {device_ops.current_reserved(deps, i) for i in ids} == {1 if out else 0}


def test_unhealthy_and_missing_devices_leave_their_pool(database, db):
    deps = conductor_deps.Deps(database=database, metrics=None, placement_client=None,
                               nova=None, notifier=None, agent_api=None)
    rp = str(uuid.uuid4())
    with database.writer() as s:
        ids = _pool(s, rp, [('available', 'enabled', 'nvme.critical_warning.spare', False),
                            ('allocated', 'enabled', None, True),
                            ('available', 'enabled', None, False)])
    assert device_ops.current_reserved(deps, ids[2]) == 2


def test_a_released_device_awaiting_its_cleanup_is_out_of_its_pool(database, db):
    """Allocated with no handle in use: its tenant left (Nova's allocation is
    gone) and its agent was not reached yet to clean it. Counted out, or
    Placement would offer a unit no device can give."""
    deps = conductor_deps.Deps(database=database, metrics=None, placement_client=None,
                               nova=None, notifier=None, agent_api=None)
    with database.writer() as s:
        ids = _pool(s, str(uuid.uuid4()), [('allocated', 'enabled', None, False)] * 3,
                    released={1})
    assert device_ops.current_reserved(deps, ids[0]) == 1


def test_a_provider_of_one_device_is_not_a_pool(database, db):
    """One member: the single-device rule (an allocated function reserved whole,
    even if Nova's allocation is lost), not the pool's."""
    deps = conductor_deps.Deps(database=database, metrics=None, placement_client=None,
                               nova=None, notifier=None, agent_api=None)
    with database.writer() as s:
        (one,) = _pool(s, str(uuid.uuid4()), [('allocated', 'enabled', None, False)])
    assert device_ops.current_reserved(deps, one) == 1
