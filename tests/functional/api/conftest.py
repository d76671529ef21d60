"""Fixtures of the API tests: a seeded database, the real conductor and the app.

The database (``db``, ``conf``) comes from tests/conftest.py. The seed is one
fake-driver-like FPGA device with a 16-accelerator deployable and 16 TEST_PCI
handles: binds on it make no Placement calls.
"""
import json
import socket
import threading
import time
import uuid

import pytest
from starlette import testclient

from steward.conductor.manager import ConductorManager
from steward.conductor.local_api import LocalConductorAPI
from steward.db import models as m
from tests.fixtures import roots
from tests.functional import conductor_fixtures as cf


MEMBER_PROJECT = 'p-member'


@pytest.fixture(autouse=True)
def _parsed_conf(parsed_conf):
    """Every API test runs on a parsed CONF (tests/conftest.py)."""
    yield


class FakePlacement:
    """Records the reservations enable/disable asks for."""

    def __init__(self):
        self.calls = []

    def set_reserved(self, rp_uuid, rc, reserved):
        # The real client evaluates a callable when it writes (PlacementClient).
        self.calls.append((rp_uuid, rc, reserved() if callable(reserved) else reserved))


@pytest.fixture
def seed(database, db):
    """One device, one deployable (16 accelerators), its attributes and handles."""
    ids = {'device': str(uuid.uuid4()), 'deployable': str(uuid.uuid4()),
           'rp': str(uuid.uuid4())}
    with database.writer() as s:
        dev = m.Device(uuid=ids['device'], type='FPGA', vendor='0xABCD',
                       model='miss model info',
                       std_board_info='{"device_id": "0xabcd", "class": "Fake class"}',
                       vendor_board_info='fake_vendor_info', hostname='host-a',
                       status='enabled', device_state='available')
        s.add(dev)
        s.flush()
        cpid = m.ControlpathID(uuid=str(uuid.uuid4()), device_id=dev.id, cpid_type='PCI',
                               cpid_info=json.dumps({'domain': '0000', 'bus': '0c',
                                                     'device': '00', 'function': '0'}))
        s.add(cpid)
        dep = m.Deployable(uuid=ids['deployable'], name='host-a_FakeDevice',
                           num_accelerators=16, device_id=dev.id, rp_uuid=ids['rp'],
                           driver_name='fake')
        s.add(dep)
        s.flush()
        for key, value in (('rc', 'FPGA'), ('trait0', 'CUSTOM_FAKE_DEVICE')):
            s.add(m.Attribute(uuid=str(uuid.uuid4()), deployable_id=dep.id, key=key,
                              value=value))
        for fn in range(16):
            s.add(m.AttachHandle(
                uuid=str(uuid.uuid4()), deployable_id=dep.id, cpid_id=cpid.id,
                attach_type='TEST_PCI', in_use=False,
                attach_info=json.dumps({'domain': '0000', 'bus': '0c',
                                        'device': f'{fn:02x}', 'function': '0'})))
        s.flush()
        ids['device_id'] = dev.id
        ids['deployable_id'] = dep.id
    return ids


@pytest.fixture
def manager(database, transport, request):
    # A test that asks for ``placement`` gets a conductor that uses it.
    fake = (request.getfixturevalue('placement') if 'placement' in request.fixturenames
            else None)
    mgr = ConductorManager(cf.deps(database, transport, fake))
    mgr.init_host()
    yield mgr
    mgr.stop()


@pytest.fixture
def placement():
    return FakePlacement()


@pytest.fixture
def app(manager):
    return roots.api_app(LocalConductorAPI(manager), manager.database)


@pytest.fixture
def client(app, seed):
    with testclient.TestClient(app, raise_server_exceptions=False) as c:
        yield c


# Identities (noauth headers) -------------------------------------------------------
def identity(roles, project=MEMBER_PROJECT, service=False, user='u1'):
    headers = {'X-Roles': ','.join(roles), 'X-User-Id': user}
    if project:
        headers['X-Project-Id'] = project
    if service:
        headers['X-Service-Roles'] = 'service'
    return headers


ADMIN = {}      # no identity headers: noauth admin + service
MEMBER = identity(['member', 'reader'])
MEMBER_SERVICE = identity(['member', 'reader'], service=True)
READER = identity(['reader'])
MANAGER = identity(['manager', 'member', 'reader'])
OTHER_MEMBER_SERVICE = identity(['member', 'reader'], project='p-other', service=True)


def mv(version):
    return {'OpenStack-API-Version': f'accelerator {version}'}


def snapshot(database):
    """Everything an API call could change."""
    with database.reader() as s:
        return {
            'arqs': sorted((a.uuid, a.state, a.hostname, a.device_rp_uuid,
                            a.instance_uuid, a.project_id, a.attach_handle_id)
                           for a in s.query(m.ExtARQ)),
            'profiles': sorted((p.uuid, p.name, p.profile_json, p.description)
                               for p in s.query(m.DeviceProfile)),
            'in_use': sorted(h.id for h in s.query(m.AttachHandle).filter_by(in_use=True)),
            'devices': sorted((d.uuid, d.status, d.device_state)
                              for d in s.query(m.Device)),
            'attributes': sorted((a.uuid, a.key, a.value) for a in s.query(m.Attribute)),
        }


def make_profile(client, name='dp1', groups=None, headers=None):
    r = client.post('/v2/device_profiles', headers=headers or {},
                    json=[{'name': name, 'groups': groups or [{'resources:FPGA': '1'}]}])
    assert r.status_code == 201, r.text
    return r.json()


# A real server for openstacksdk ----------------------------------------------------
def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(app, seed):
    import uvicorn
    port = _free_port()
    config = uvicorn.Config(app, host='127.0.0.1', port=port, log_level='warning',
                            lifespan='off')
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError('uvicorn did not start')
        time.sleep(0.01)
    yield f'http://127.0.0.1:{port}'
    srv.should_exit = True
    thread.join(timeout=10)
