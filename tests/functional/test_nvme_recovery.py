"""Policy at discovery (excluded and invalid devices, the locked-in action, no runtime
fallback), crash recovery at agent start, and N-1 agents (spec 1, upgrade impact)."""
import json
import logging

import oslo_messaging as messaging
import pytest

from steward.agent import rpcapi as agent_rpcapi
from steward.conf import CONF
from steward.db import models as m
from steward.common import rpc as steward_rpc
from tests.functional import nvme_stack
from tests.functional.nvme_stack import LATEST, nvme  # noqa: F401 (fixture)


def _board(dev):
    return json.loads(dev['std_board_info'])


# --- policy at discovery ------------------------------------------------------------
def test_unmeetable_policy_excludes_the_device(nvme, caplog):
    ctrl = nvme.sim.add_controller(ces=False, bes=True)
    nvme.conf.set_override('device_spec', [
        '{"address": "0000:0a:00.*", "clear_action": "sanitize", '
        '"clear_strategy": "crypto"}'], group='nvme')
    with caplog.at_level(logging.WARNING):
        st = nvme.start()
    dev = st.device()
    assert dev['device_state'] == 'error'                 # reported, never available
    assert _board(dev)['cleanup_action'] is None
    assert 'excluded' in _board(dev)['cleanup']['excluded']
    # a fact about the hardware, not a configuration error: one WARNING
    assert [r.levelno for r in caplog.records if r.name == 'steward.drivers.nvme.driver'
            and 'excluded from the pool' in r.getMessage()] == [logging.WARNING]
    dep = st.deployable(dev)
    inv = st.inventory(dep['rp_uuid'])
    assert inv['reserved'] == inv['total'] == 1
    assert st.traits(dep['rp_uuid']) == {'OWNER_CYBORG', 'HW_NVME_BES', 'HW_NVME_WZS'}
    _, _, alloc, bind = st.bind(dev)
    assert alloc.status_code == 409 and bind.status_code == 409
    r = st.clean(dev['uuid'])
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.device.cannot_clean'
    assert 'CES' in r.json()['error_message']
    plan = st.api.get(f'/v2/devices/{dev["uuid"]}/clean_plan', headers=LATEST).json()
    assert plan['cleanup_action'] is None and plan['refusal']['code'] == \
        'cyb.device.cannot_clean'

    # The operator corrects the policy: the error device takes the new action (error
    # is the one state where it may change) and a clean returns it to the pool.
    nvme.conf.set_override('device_spec', [
        '{"address": "0000:0a:00.*", "clear_action": "sanitize"}'], group='nvme')
    st.kill_agent()
    st.start_agent()
    assert _board(st.device())['cleanup_action'] == 'sanitize_block'
    assert st.device()['device_state'] == 'error'
    assert st.clean(dev['uuid']).status_code == 202
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available'
    assert st.inventory(dep['rp_uuid'])['reserved'] == 0
    assert [c['cdw10'] & 7 for c in ctrl.commands() if c.get('opcode') == 0x84] == [2]


def test_zero_with_crypto_is_rejected_at_discovery(nvme, caplog):
    nvme.sim.add_controller()
    nvme.conf.set_override('device_spec', [
        '{"vendor_id": "8086", "clear_action": "zero", "clear_strategy": "crypto"}'],
        group='nvme')
    with caplog.at_level(logging.ERROR, logger='steward.drivers.nvme'):
        st = nvme.start()
    assert any('invalid configuration' in r.getMessage() for r in caplog.records
               if r.levelno == logging.ERROR)
    dev = st.device()
    assert dev['device_state'] == 'error' and _board(dev)['cleanup_action'] is None


def test_an_available_device_that_loses_its_capability_leaves_the_pool(nvme):
    ctrl = nvme.sim.add_controller()
    nvme.conf.set_override('device_spec', ['{"clear_strategy": "crypto"}'], group='nvme')
    st = nvme.start()
    assert st.device()['device_state'] == 'available'
    ctrl.update(ces=False)                  # e.g. a firmware update
    st.discover()
    dev = st.device()
    assert dev['device_state'] == 'error'
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 1


def test_locked_in_action_and_no_runtime_fallback(nvme):
    """The action is not overwritten while the device is in use or being cleaned;
    a failing action is not replaced by another at run time; in error it may
    change, and the retry uses what is then locked in."""
    ctrl = nvme.sim.add_controller(sanitize_seconds=0.1)
    st = nvme.start()
    dev = st.device()
    inst, _, _, bind = st.bind(dev)
    assert bind.status_code == 202
    ctrl.update(ces=False)
    st.discover()
    dev = st.device()
    assert dev['device_state'] == 'allocated'
    assert _board(dev)['cleanup_action'] == 'sanitize_crypto'          # locked
    assert _board(dev)['cleanup']['capabilities']['ces'] is True
    st.release(inst)
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'error'
    # The controller no longer advertises crypto erase: the locked-in action is not
    # sent (it would be refused) and no block erase is tried instead.
    assert [c['cdw10'] & 7 for c in ctrl.commands() if c.get('opcode') == 0x84] == []
    rec = st.records(dev['uuid'])[0]
    assert rec['error_code'] == 'cyb.cleanup.unsupported'
    assert 'SANICAP bit 0' in rec['error_message'] and 'nothing was sent' in \
        rec['error_message']
    assert rec['capability_decision']['changed_since_discovery'] == {
        'sanicap': ['0x3', '0x2'], 'fna': ['0x4', '0x0']}   # FNA bit 2 follows CES here
    st.discover()
    assert _board(st.device())['cleanup_action'] == 'sanitize_block'  # error: may change
    assert st.clean(dev['uuid']).status_code == 202
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available'
    assert [c['cdw10'] & 7 for c in ctrl.commands() if c.get('opcode') == 0x84] == [2]


# --- recovery at agent start --------------------------------------------------------
def test_missed_cleanup_is_run_at_agent_start(database, nvme):
    """An allocated device with no active ARQ (the conductor released it while this
    agent could not be told): init_host cleans it."""
    ctrl = nvme.sim.add_controller(sanitize_seconds=0.1)
    st = nvme.start()
    dev = st.device()
    inst, arq, _, _ = st.bind(dev)
    ctrl.write(0, nvme_stack.TENANT)
    st.kill_agent()
    with database.writer() as s:     # what an N-1 conductor leaves behind
        row = s.query(m.ExtARQ).filter_by(uuid=arq).one()
        s.query(m.AttachHandle).filter_by(id=row.attach_handle_id).update({'in_use': False})
        s.delete(row)
    assert st.device()['device_state'] == 'allocated'
    st.start_agent(discover=False)
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available'
    assert st.records(dev['uuid'])[0]['trigger'] == 'recovery'
    assert not nvme_stack.tenant_bytes_anywhere(ctrl)
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 0


def test_reservation_drift_is_reported_at_agent_start(nvme, caplog):
    nvme.sim.add_controller()
    st = nvme.start()
    dev = st.device()
    rp = st.deployable(dev)['rp_uuid']
    st.placement.set_reserved(rp, nvme_stack.RC, 1)       # behind Steward's back
    st.kill_agent()
    with caplog.at_level(logging.WARNING, logger='steward.agent.cleanup'):
        st.start_agent(discover=False)
    warnings = [r.getMessage() for r in caplog.records if 'disagrees' in r.getMessage()]
    assert warnings and dev['uuid'] in warnings[0] and 'available' in warnings[0]


def test_backfill_runs_at_agent_start(database, nvme):
    nvme.sim.add_controller()
    st = nvme.start()
    dev = st.device()
    with database.writer() as s:
        s.query(m.Device).filter_by(uuid=dev['uuid']).update({'device_state': None})
    st.kill_agent()
    st.start_agent(discover=False)
    assert st.device()['device_state'] == 'available'


# --- N-1 agents ------------------------------------------------------------------
class OldAgent:
    """A 2026.1 agent: RPC 1.0, knows ping only."""
    target = messaging.Target(version='1.0')

    def ping(self, ctx):
        return {'host': 'old', 'version': '1.0'}


def test_old_agent_never_gets_cleanup_device_and_the_device_goes_to_error(nvme):
    ctrl = nvme.sim.add_controller()
    st = nvme.start()                              # discovery by a current agent
    dev = st.device()
    inst, _, _, _ = st.bind(dev)
    ctrl.write(0, nvme_stack.TENANT)
    st.kill_agent()
    # The host now runs an old agent: the conductor asks it its version (ping).
    old = nvme.transport.start_server(CONF.rpc_topic_agent, nvme.host, [OldAgent()])
    try:
        # The conductor learns the old version from the agent's ping at the release.
        st.release(inst)
        assert st.device()['device_state'] == 'error'
        rec = st.records(dev['uuid'])[0]
        assert rec['error_code'] == 'cyb.rpc.agent_too_old' and rec['status'] == 'failed'
        assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 1
        r = st.clean(dev['uuid'])
        assert r.status_code == 400 and r.json()['error_code'] == 'cyb.rpc.agent_too_old'
        assert nvme_stack.tenant_bytes_anywhere(ctrl)     # nobody touched it
    finally:
        steward_rpc.stop_server(old)
    # The agent is upgraded: it announces 1.1 at start, the retry is accepted.
    st.start_agent(discover=False)
    assert st.clean(dev['uuid']).status_code == 202
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available'


def test_upgrade_levels_cap_keeps_cleanup_from_old_agents(nvme):
    ctrl = nvme.sim.add_controller()
    st = nvme.start(agent_api=agent_rpcapi.AgentAPI(nvme.transport, version_cap='1.0'))
    dev = st.device()
    inst, _, _, _ = st.bind(dev)
    st.release(inst)
    assert st.device()['device_state'] == 'error'
    assert st.records(dev['uuid'])[0]['error_code'] == 'cyb.rpc.agent_too_old'
    assert not [c for c in ctrl.commands() if c.get('opcode') == 0x84]


def test_device_payload_downlevels_for_1_0_agents():
    class Row:
        uuid, type, vendor, model = 'u', 'NVME', '8086', '0a54'
        std_board_info, vendor_board_info = '{}', '{}'
        hostname, status, device_state = 'h', 'enabled', 'cleaning'
    payload = agent_rpcapi.device_payload(Row(), driver_name='nvme')
    assert payload['device_state'] == 'cleaning' and payload['driver_name'] == 'nvme'
    old = agent_rpcapi.make_compatible(payload, '1.0')
    assert 'device_state' not in old and 'driver_name' not in old
    assert old == {k: payload[k] for k in agent_rpcapi.DEVICE_FIELDS['1.0']}
    assert agent_rpcapi.make_compatible(payload, '1.1') == payload
    with pytest.raises(ValueError):
        agent_rpcapi.make_compatible(payload, '2.0')
    assert agent_rpcapi.version_at_least('1.1', '1.1')
    assert not agent_rpcapi.version_at_least('1.0', '1.1')
    assert not agent_rpcapi.version_at_least('2.0', '1.1')
