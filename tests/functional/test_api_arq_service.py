"""Where a standalone API's accelerator requests are served: by the API process
itself (Root.api_arqs: a LocalArqAPI over an ARQService of its own) when
[placement] names the Placement service and [upgrade_levels] conductor lets 1.2
through, else by the conductors over RPC (an ArqRPCAPI), as the previous release
did; said once at start either way."""
import logging
import uuid

import pytest
from starlette import testclient

from steward.arqs import api as arq_api
from steward.conductor.rpcapi import ConductorAPI
from tests.fixtures import placement_fixture
from tests.fixtures import roots
from tests.functional.api.conftest import make_profile


@pytest.fixture
def api_conf(conf, tmp_path):
    """[placement] naming the test's Placement, read from a file as a service reads
    it; returns a function that applies extra lines."""
    server = placement_fixture.get_placement()

    def apply(extra=''):
        path = tmp_path / 'api.conf'
        path.write_text(f'[placement]\nauth_type = admin_token\ntoken = admin\n'
                        f'endpoint = {server.url}\nendpoint_override = {server.url}\n'
                        + extra)
        conf(['--config-file', str(path)], project='steward', default_config_files=[])
        return server
    yield apply
    conf([], project='steward', default_config_files=[])


def _service(database, transport, cap=None):
    root = roots.api_root(database)
    conductor = ConductorAPI(transport=transport, version_cap=cap)
    return root, conductor, root.api_arqs(conductor)


def test_the_api_runs_them_with_placement_and_no_cap(api_conf, database, transport,
                                                     caplog):
    api_conf()
    with caplog.at_level(logging.INFO, logger='steward.cmd.root'):
        root, conductor, arqs = _service(database, transport)
    assert isinstance(arqs, arq_api.LocalArqAPI) and arqs.local
    assert arqs.service.actor.startswith('api ')
    # Its released devices' cleanups are cast to a conductor.
    assert arqs.service._dispatch == conductor.device_release_for_cleaning
    assert any('by this API process itself' in r.getMessage() for r in caplog.records)
    # No conductor listens on the broker: a create and a delete are the API's own.
    with testclient.TestClient(root.api_app(conductor, arqs),
                               raise_server_exceptions=False) as client:
        make_profile(client)
        r = client.post('/v2/accelerator_requests', json={'device_profile_name': 'dp1'})
        assert r.status_code == 201, r.text
        arq = r.json()['arqs'][0]['uuid']
        r = client.delete('/v2/accelerator_requests', params={'arqs': arq})
        assert r.status_code == 204, r.text
        assert client.get(f'/v2/accelerator_requests/{arq}').status_code == 404


@pytest.mark.parametrize('cap', ['1.0', '1.1'])
def test_conductors_of_an_earlier_release_keep_them(api_conf, database, transport,
                                                    caplog, cap):
    api_conf()
    with caplog.at_level(logging.WARNING, logger='steward.cmd.root'):
        _, conductor, arqs = _service(database, transport, cap=cap)
    assert isinstance(arqs, arq_api.ArqRPCAPI) and not arqs.local
    assert arqs.conductor_api is conductor
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and '[upgrade_levels] conductor' in warned[0], warned


def test_an_api_without_placement_keeps_sending_them(conf, database, transport, caplog):
    with caplog.at_level(logging.WARNING, logger='steward.cmd.root'):
        _, conductor, arqs = _service(database, transport)
    assert isinstance(arqs, arq_api.ArqRPCAPI) and arqs.conductor_api is conductor
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and '[placement] names no Placement service' in warned[0]


def test_a_bind_refused_in_the_api_is_the_same_answer(api_conf, database, transport):
    """What the conductor answered over RPC, the API answers itself: an unknown
    device provider is 404 with its stable code, nothing stored changes."""
    api_conf()
    root, conductor, arqs = _service(database, transport)
    assert isinstance(arqs, arq_api.LocalArqAPI)
    with testclient.TestClient(root.api_app(conductor, arqs),
                               raise_server_exceptions=False) as client:
        make_profile(client)
        arq = client.post('/v2/accelerator_requests',
                          json={'device_profile_name': 'dp1'}).json()['arqs'][0]
        r = client.patch('/v2/accelerator_requests', json={arq['uuid']: [
            {'op': 'add', 'path': '/hostname', 'value': 'h'},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': str(uuid.uuid4())},
            {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())}]})
        assert r.status_code == 404, r.text
        assert r.json()['error_code'].startswith('cyb.'), r.text
        after = client.get(f'/v2/accelerator_requests/{arq["uuid"]}').json()
        assert after['state'] == 'Initial'
