"""Microversion 2.5 (device_state, POST /clean, clean_plan, erase_records), against
the real stack on simulated controllers. `openstack accelerator device clean` is
tested in tests/functional/test_osc_plugin.py."""
import time
import uuid

from steward.db import models as m
from tests.functional import agent_doubles
from tests.functional.nvme_stack import LATEST, nvme  # noqa: F401 (fixture)

MEMBER = {'X-Roles': 'member,reader', 'X-Project-Id': 'p1', 'X-User-Id': 'u1'}
MANAGER = {'X-Roles': 'manager,member,reader', 'X-Project-Id': 'p1', 'X-User-Id': 'u1'}


def _v(version, **extra):
    return {'OpenStack-API-Version': f'accelerator {version}', **extra}


def _error_state(st, ctrl):
    """A device in error after a failed cleanup (injected sanitize status)."""
    dev = st.device()
    inst, _, _, bind = st.bind(dev)
    assert bind.status_code == 202, bind.text
    ctrl.inject(opcode=0x84, status=0x2, times=1)        # Invalid Field in Command
    st.release(inst)
    assert st.wait_state(dev['uuid'], ('error', 'available'))[-1] == 'error'
    return dev


def test_device_state_only_from_2_5(nvme):
    nvme.sim.add_controller()
    st = nvme.start()
    for version, present in (('2.0', False), ('2.4', False), ('2.5', True),
                             ('latest', True)):
        dev = st.api.get('/v2/devices', headers=_v(version)).json()['devices'][0]
        assert ('device_state' in dev) is present, version
        one = st.api.get(f'/v2/devices/{dev["uuid"]}', headers=_v(version)).json()
        assert ('device_state' in one) is present, version
    assert st.device()['device_state'] == 'available'
    r = st.api.get('/v2/devices?device_state=available', headers=LATEST)
    assert len(r.json()['devices']) == 1
    assert st.api.get('/v2/devices?device_state=error', headers=LATEST).json()[
        'devices'] == []
    r = st.api.get('/v2/devices?device_state=available', headers=_v('2.4'))
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.request.invalid_query'


def test_clean_answers(nvme):
    ctrl = nvme.sim.add_controller(sanitize_seconds=0.2)
    st = nvme.start()
    dev = _error_state(st, ctrl)
    u = dev['uuid']
    # Refusals that change nothing.
    r = st.clean(u, headers=_v('2.4'))
    assert r.status_code == 404 and r.json()['error_code'] == 'cyb.request.path_not_found'
    r = st.clean(u, headers=_v('2.5', **MEMBER))
    assert r.status_code == 403
    r = st.clean(u, headers=_v('2.5', **MANAGER))
    assert r.status_code == 403
    r = st.clean(str(uuid.uuid4()))
    assert r.status_code == 404 and r.json()['error_code'] == 'cyb.device.not_found'
    assert st.clean('not-a-uuid').status_code == 400
    assert st.device()['device_state'] == 'error'
    # The plan, executing nothing.
    plan = st.api.get(f'/v2/devices/{u}/clean_plan', headers=LATEST).json()
    assert plan['accepted'] is True and plan['refusal'] is None
    assert plan['cleanup_action'] == 'sanitize_crypto'
    assert plan['assurance_level'] == 'purge-crypto'
    assert plan['capabilities'] == {'ces': True, 'bes': True, 'wzs': True, 'ns_mgmt': True,
                                    'format_erase': True, 'format_crypto': True}
    assert plan['policy'] == {'clear_action': 'auto', 'clear_strategy': 'auto'}
    assert 'CES sanitize' in plan['reason'] and len(plan['steps']) == 7
    assert 'canonical' in plan['steps'][1] and 'crypto-erase' in plan['steps'][3]
    assert plan['last_erase_record']['error_code'] == 'cyb.cleanup.sanitize_failed'
    assert len([c for c in ctrl.commands() if c.get('opcode') == 0x84]) == 1
    # Accepted: 202 and already pending_cleaning (or further) when it answers.
    ctrl.inject_sanitize_hang(progress=0.2)
    r = st.clean(u)
    assert r.status_code == 202 and r.content == b''
    assert st.wait_state(u, ('cleaning',))[-1] == 'cleaning'
    for state_now in ('cleaning',):
        r = st.clean(u)
        assert r.status_code == 409, state_now
        assert r.json()['error_code'] == 'cyb.cleaning.in_progress'
        assert 'cleaning' in r.json()['error_message']
    plan = st.api.get(f'/v2/devices/{u}/clean_plan', headers=LATEST).json()
    assert plan['accepted'] is False
    assert plan['refusal']['code'] == 'cyb.cleaning.in_progress'
    # The running record shows the sanitize's progress.
    deadline = time.monotonic() + 10
    while True:
        rec = st.records(u)[0]
        if rec['phase'] == 'erase' and rec['progress'] == 20.0:
            break
        assert time.monotonic() < deadline, rec
        time.sleep(0.1)
    assert rec['status'] == 'running' and rec['trigger'] == 'operator'
    assert 'sanitize still in progress 20 %' in rec['progress_detail']
    ctrl.release_sanitize_hang()
    assert st.wait_state(u, ('available', 'error'))[-1] == 'available'
    r = st.clean(u)
    assert r.status_code == 409 and 'available' in r.json()['error_message']
    inst, _, _, bind = st.bind(st.device(), profile='again')
    assert bind.status_code == 202
    r = st.clean(u)
    assert r.status_code == 409 and 'allocated' in r.json()['error_message']


def test_clean_refused_while_pending_cleaning(nvme):
    ctrl = nvme.sim.add_controller()
    st = nvme.start()
    dev = st.device()
    inst, _, _, bind = st.bind(dev)
    st.kill_agent()
    # An agent that answers ping but loses the cleanup request: pending_cleaning stays.
    with agent_doubles.Served(agent_doubles.DeafAgent(nvme.host), nvme.transport) as deaf:
        st.release(inst)
        assert deaf.asked.wait(10)
    assert st.device()['device_state'] == 'pending_cleaning'
    r = st.clean(dev['uuid'])
    assert r.status_code == 409 and 'pending_cleaning' in r.json()['error_message']
    assert ctrl.commands() == [c for c in ctrl.commands() if c.get('opcode') != 0x84]


def test_clean_refused_for_devices_that_need_no_cleaning(database, nvme, db):
    st = nvme.start(agent=False)
    with database.writer() as s:
        s.add(m.Device(uuid='5d6b6c8e-0000-4000-8000-000000000001', type='FPGA',
                       vendor='v', model='m', hostname='h', status='enabled',
                       device_state='error'))
    r = st.clean('5d6b6c8e-0000-4000-8000-000000000001')
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.device.cannot_clean'
    assert 'FPGA' in r.json()['error_message']


def test_erase_records_endpoint(nvme):
    ctrl = nvme.sim.add_controller(sanitize_seconds=0.1)
    st = nvme.start()
    dev = _error_state(st, ctrl)
    assert st.clean(dev['uuid']).status_code == 202
    st.wait_state(dev['uuid'], ('available',))
    url = f'/v2/devices/{dev["uuid"]}/erase_records'
    recs = st.api.get(url, headers=LATEST).json()['erase_records']
    assert [r['status'] for r in recs] == ['succeeded', 'failed']
    assert recs[0]['links'][0]['href'].endswith(url)
    assert [r['uuid'] for r in st.api.get(url + '?limit=1', headers=LATEST).json()[
        'erase_records']] == [recs[0]['uuid']]
    assert st.api.get(url, headers=_v('2.4')).status_code == 404
    # Serials and every tenant's cleanup history: the cloud's operator only.
    assert st.api.get(url, headers=_v('2.5', **MEMBER)).status_code == 403
    assert st.api.get(url, headers=_v('2.5', **MANAGER)).status_code == 403
    assert st.api.get(url + '?limit=0', headers=LATEST).status_code == 400
    assert st.api.get(url + '?limit=x', headers=LATEST).status_code == 400
    assert st.api.get(url + '?bogus=1', headers=LATEST).status_code == 400
    r = st.api.get(f'/v2/devices/{uuid.uuid4()}/erase_records', headers=LATEST)
    assert r.status_code == 404
