"""What heals by itself (steward/conductor/selfheal.py), on the real conductor,
the real database and the real Placement:

* a single-accelerator device released while Placement is unreachable comes back
  into service by itself once Placement is back (issue 30's case, against the
  embedded Placement child stopped and started again on its port and database);
* a provider's reserved, inventory or traits changed behind Steward's back are
  repaired;
* an ARQ left Initial with no instance past [conductor] initial_arq_max_age is
  deleted, and only such an ARQ.
Each repair: one log line and one count of steward_healed_total{what}.
"""
import datetime
import logging
import os

from oslo_utils import timeutils
import pytest

from steward.common import context
from steward.placement import handle
from tests.fixtures import placement_fixture
from tests.functional.lifecycle_stack import V26
from tests.functional.lifecycle_stack import life  # noqa: F401 (fixture)
from tests.fixtures.stack import free_port
from tests.fixtures.stack import wait_for

pytestmark = pytest.mark.slow


def _healed(st, what):
    return st.conductor.metrics.heals.labels(what)._value.get()


@pytest.fixture
def own_placement(tmp_path):
    """A Placement child of this test's own (steward serve's embedded one),
    which the test may stop and start again: same port, same database."""
    url = f'sqlite:///{tmp_path}/placement.sqlite'
    port = free_port()
    log = os.path.join(tmp_path, 'placement.log')

    class Own:
        child = handle.start_subprocess(url, port=port, log_file=log, workers=1)

        @classmethod
        def stop(cls):
            cls.child.stop()

        @classmethod
        def start(cls):
            cls.child = handle.start_subprocess(url, port=port, log_file=log, workers=1)

    yield Own
    Own.child.stop()


def test_a_release_during_a_placement_outage_heals_when_placement_returns(
        life, own_placement, conf, caplog):  # noqa: F811
    st = life.start(placement_url=own_placement.child.url)
    dev = st.device()
    rp = st.deployable(dev)['rp_uuid']
    inst, _ = st.bind(dev)
    assert st.inventory(rp)['reserved'] == 1
    # Nova's side first (its allocation), then Placement goes away and Nova
    # deletes the ARQs: the release and the cleanup go on without Placement.
    with placement_fixture.admin_session(st.placement_url) as s:
        assert s.delete(f'/allocations/{inst}').status_code == 204
    own_placement.stop()
    with caplog.at_level(logging.INFO):
        r = st.api.delete(f'/v2/accelerator_requests?instance={inst}')
        assert r.status_code == 204, r.text
        assert st.wait_state(dev['uuid'], ('available', 'error'))['device_state'] == \
            'available'
    assert _healed(st, 'placement_reserved') == 0
    # What needs Placement meanwhile answers 503, never 500: a disable or an
    # enable (their reservation; the status itself is committed, and the drift
    # repair writes its reservation once Placement is back).
    with caplog.at_level(logging.INFO):
        for r in (st.api.post(f'/v2/devices/{dev["uuid"]}/disable', headers=V26),
                  st.api.post(f'/v2/devices/{dev["uuid"]}/enable', headers=V26)):
            assert r.status_code == 503, r.text
            assert r.json()['error_code'] == 'cyb.service.unavailable', r.text
    assert not [r for r in caplog.records if r.exc_info]

    own_placement.start()
    # Placement still says what it said before the outage: nobody can be
    # scheduled on the device, although Steward has it available.
    assert st.inventory(rp)['reserved'] == 1
    conf.set_override('periodic_interval', 0.2, group='conductor')
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger='steward.conductor'):
        st.conductor.start()
        wait_for(lambda: st.inventory(rp)['reserved'] == 0,
                 'the reservation lifted by the periodic repair', timeout=60)
        wait_for(lambda: _healed(st, 'placement_reserved') == 1, 'the repair counted')
    repairs = [r.getMessage() for r in caplog.records if 'Placement drift' in r.getMessage()]
    assert len(repairs) == 1 and rp in repairs[0] and 'reserved was 1' in repairs[0], repairs
    assert not [r for r in caplog.records if r.exc_info]
    # In service again: the next tenant binds it.
    st.bind(dev)


def test_a_provider_read_once_is_compared_from_memory_after(life, own_placement):  # noqa: F811
    """A provider this conductor's client does not remember (another conductor
    registered it, or this one restarted) is read by one drift run, then the next
    runs compare it from memory: one read, the listing."""
    st = life.start(placement_url=own_placement.child.url)
    st.device()
    tasks = st.conductor.periodic
    ctx = context.get_admin_context()
    st.placement.forget()
    before = dict(st.placement.stats)
    assert tasks.repair_placement_drift(ctx) == []
    assert st.placement.stats['reads'] - before['reads'] > 1
    before = dict(st.placement.stats)
    assert tasks.repair_placement_drift(ctx) == []
    assert (st.placement.stats['reads'] - before['reads'],
            st.placement.stats['writes'] - before['writes']) == (1, 0)


def test_reserved_inventory_and_traits_changed_behind_stewards_back_are_repaired(
        life, own_placement):  # noqa: F811
    st = life.start(placement_url=own_placement.child.url)
    dev = st.device()
    rp = st.deployable(dev)['rp_uuid']
    tasks = st.conductor.periodic
    ctx = context.get_admin_context()
    assert tasks.repair_placement_drift(ctx) == []          # in line: nothing done
    # In a quiet cloud a run costs Placement one read: the providers' generations.
    before = dict(st.placement.stats)
    assert tasks.repair_placement_drift(ctx) == []
    assert (st.placement.stats['reads'] - before['reads'],
            st.placement.stats['writes'] - before['writes']) == (1, 0)
    with placement_fixture.admin_session(st.placement_url) as s:
        body = s.get(f'/resource_providers/{rp}/inventories').json()
        rc = next(iter(body['inventories']))
        r = s.put(f'/resource_providers/{rp}/inventories/{rc}', json=dict(
            body['inventories'][rc], reserved=1,
            resource_provider_generation=body['resource_provider_generation']))
        assert r.status_code == 200, r.text
    assert tasks.repair_placement_drift(ctx) == [(rp, 'reserved')]
    assert st.inventory(rp)['reserved'] == 0
    assert _healed(st, 'placement_reserved') == 1

    with placement_fixture.admin_session(st.placement_url) as s:
        assert s.delete(f'/resource_providers/{rp}/inventories').status_code == 204
    assert tasks.repair_placement_drift(ctx) == [(rp, 'inventory')]
    assert st.inventory(rp)['total'] == 1 and st.inventory(rp)['reserved'] == 0
    assert _healed(st, 'placement_inventory') == 1
    assert tasks.repair_placement_drift(ctx) == []

    # A trait of Steward's removed (an operator's own trait is kept).
    with placement_fixture.admin_session(st.placement_url) as s:
        body = s.get(f'/resource_providers/{rp}/traits').json()
        assert 'OWNER_CYBORG' in body['traits']
        assert s.put('/traits/CUSTOM_OPERATOR_MARK').status_code in (201, 204)
        r = s.put(f'/resource_providers/{rp}/traits', json={
            'resource_provider_generation': body['resource_provider_generation'],
            'traits': ['CUSTOM_OPERATOR_MARK']})
        assert r.status_code == 200, r.text
    assert tasks.repair_placement_drift(ctx) == [(rp, 'traits')]
    with placement_fixture.admin_session(st.placement_url) as s:
        traits = set(s.get(f'/resource_providers/{rp}/traits').json()['traits'])
    assert traits == set(body['traits']) | {'CUSTOM_OPERATOR_MARK'}
    assert _healed(st, 'placement_traits') == 1
    assert tasks.repair_placement_drift(ctx) == []


def test_only_old_instanceless_initial_arqs_are_removed(life, conf, caplog):  # noqa: F811
    st = life.start()
    dev = st.device()
    st.bind(dev)                                 # Bound: never touched
    r = st.api.post('/v2/accelerator_requests', json={'device_profile_name': 'life'})
    leaked = r.json()['arqs'][0]['uuid']
    tasks = st.conductor.periodic
    ctx = context.get_admin_context()
    conf.set_override('initial_arq_max_age', 600, group='conductor')
    # Younger than the limit: kept.
    assert tasks.remove_stale_initial_arqs(ctx) == []
    later = timeutils.utcnow() + datetime.timedelta(seconds=601)
    newer = st.api.post('/v2/accelerator_requests',
                        json={'device_profile_name': 'life'}).json()['arqs'][0]['uuid']
    with caplog.at_level(logging.WARNING, logger='steward.conductor'):
        removed = tasks.remove_stale_initial_arqs(ctx, now=later)
    # ``newer`` is as old as ``leaked`` at ``later`` (both under a second apart):
    # both past the limit, both gone; the Bound one stays.
    assert sorted(removed) == sorted([leaked, newer])
    left = st.api.get('/v2/accelerator_requests').json()['arqs']
    assert [a['state'] for a in left] == ['Bound']
    assert _healed(st, 'initial_arq_removed') == 2
    lines = [r.getMessage() for r in caplog.records if 'Initial with no instance' in
             r.getMessage()]
    assert len(lines) == 2
    # Judged again when locked: one younger than the cutoff then is kept.
    fresh = st.api.post('/v2/accelerator_requests',
                        json={'device_profile_name': 'life'}).json()['arqs'][0]['uuid']
    from steward.conductor import selfheal
    assert selfheal._remove_initial(st.conductor.deps, ctx, [fresh],
                                    timeutils.utcnow() - datetime.timedelta(days=1)) == []
    assert fresh in {a['uuid'] for a in st.api.get('/v2/accelerator_requests').json()['arqs']}
