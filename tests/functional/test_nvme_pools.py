"""NVMe drives in a pool (issue 52, item 6): the promise between tenants holds on
pools. Two simulated controllers under the real nvme-cli, an ``[nvme]
device_spec`` entry tagged ``pool``, the real conductor, agent and Placement.

The drives of one NUMA node with one cleanup policy are one provider of total 2;
a tenant's drive, released, is out of the pool (one unit reserved) until its
cleanup is verified, whatever happens meanwhile (here: its agent is down), and
only then can a request for both drives land.
"""
import json
import uuid

from steward.common import states
from tests.fixtures import placement_fixture
from tests.fixtures import stack
from tests.functional import nvme_stack
from tests.functional.nvme_stack import RC, nvme  # noqa: F401 - the fixture

ADDRESSES = ('0000:0a:00.0', '0000:0b:00.0')


def _claim(st, inst, rp, units):
    with placement_fixture.admin_session(st.placement_url) as s:
        return s.put(f'/allocations/{inst}', json={
            'allocations': {rp: {'resources': {RC: units}}}, 'project_id': 'p',
            'user_id': 'u', 'consumer_generation': None, 'consumer_type': 'INSTANCE'})


def _boot(st, rp, units):
    """Nova's claim of ``units`` on the pool, then the bind of as many ARQs:
    (instance, claim answer, bind answer)."""
    name = f'nvme-x{units}'
    if name not in [p['name'] for p in st.api.get('/v2/device_profiles').json()[
            'device_profiles']]:
        assert st.api.post('/v2/device_profiles', json=[{'name': name, 'groups': [
            {f'resources:{RC}': str(units)}]}]).status_code == 201
    arqs = st.api.post('/v2/accelerator_requests',
                       json={'device_profile_name': name}).json()['arqs']
    inst = str(uuid.uuid4())
    claim = _claim(st, inst, rp, units)
    bind = st.api.patch('/v2/accelerator_requests', json={a['uuid']: [
        {'op': 'add', 'path': '/hostname', 'value': st.host},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
        {'op': 'add', 'path': '/instance_uuid', 'value': inst}] for a in arqs})
    return inst, claim, bind


def _held(st, inst):
    """The PCI address of each drive bound to ``inst``."""
    return sorted('%(domain)s:%(bus)s:%(device)s.%(function)s' % a['attach_handle_info']
                  for a in st.api.get('/v2/accelerator_requests',
                                      params={'instance': inst}).json()['arqs'])


def test_a_drive_being_cleaned_is_out_of_its_pool_until_verified(nvme):  # noqa: F811
    ctrls = {a: nvme.sim.add_controller(address=a, serial=f'SN-{a[5:7]}',
                                        sanitize_seconds=0.1) for a in ADDRESSES}
    nvme.conf.set_override('device_spec', ['{"vendor_id": "8086", "pool": true}'],
                           group='nvme')
    st = nvme.start()
    (rp,) = {d['rp_uuid'] for d in st.api.get('/v2/deployables').json()['deployables']}
    inv = st.inventory(rp)
    assert (inv['total'], inv['max_unit'], inv['reserved']) == (2, 2, 0)

    inst, claim, bind = _boot(st, rp, 1)
    assert claim.status_code == 204 and bind.status_code == 202, bind.text
    (address,) = _held(st, inst)
    ctrls[address].write(0, nvme_stack.TENANT)
    assert nvme_stack.tenant_bytes_anywhere(ctrls[address])
    # In use: Nova's allocation counts it, nothing is reserved.
    assert st.inventory(rp)['reserved'] == 0

    # The tenant leaves while the host's agent is down: its drive cannot be
    # cleaned yet, and stays out of the pool.
    st.kill_agent()
    st.release(inst)
    dev = next(d for d in st.devices()
               if json.loads(d['std_board_info'])['pci_address'] == address)
    # Released, its cleanup not dispatched (nobody to ask): still allocated,
    # with no tenant. Nova's allocation is gone; the pool reserves its unit.
    assert dev['device_state'] == states.DEV_ALLOCATED
    assert st.inventory(rp)['reserved'] == 1
    both = str(uuid.uuid4())
    assert _claim(st, both, rp, 2).status_code == 409        # one unit left

    st.start_agent()
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available'
    assert st.records(dev['uuid'])[0]['verification'] == 'passed'
    assert not nvme_stack.tenant_bytes_anywhere(ctrls[address])
    stack.wait_for(lambda: st.inventory(rp)['reserved'] == 0, 'the pool whole again')
    inst2, claim, bind = _boot(st, rp, 2)
    assert claim.status_code == 204 and bind.status_code == 202, bind.text
    assert _held(st, inst2) == list(ADDRESSES)
