"""[upgrade_levels] in a running deployment: an API capped at conductor RPC 1.0 (as
while conductors of the previous release still run) keeps serving everything
1.0 offers and refuses what needs 1.1 in the API process itself."""
import pytest

from tests.multihost import cluster as cluster_mod
from tests.multihost import flows
from tests.multihost import rabbit

pytestmark = pytest.mark.slow


@pytest.fixture
def capped_api(cluster):
    port = rabbit.free_port()
    conf = cluster.common_conf('api-capped', 'mh-ctl-api-capped')
    conf['api'] = {'host_ip': '127.0.0.1', 'port': port, 'workers': 1,
                   'metrics_listen': f'127.0.0.1:{rabbit.free_port()}'}
    conf['upgrade_levels'] = {'conductor': '1.0'}
    svc = cluster_mod.Service('api-capped', 'api', cluster.write_conf('api-capped', conf),
                              str(cluster.base / 'api-capped.log')).start()
    url = f'http://127.0.0.1:{port}'
    try:
        import httpx

        def answers():
            with httpx.Client(base_url=url, timeout=5) as c:
                return c.get('/v2').status_code == 200
        cluster.wait_for(answers, 'the capped API')
        yield url, svc
    finally:
        svc.stop()


def test_api_capped_at_conductor_1_0_serves_a_boot_delete_cycle(cluster, capped_api):
    url, svc = capped_api
    host = cluster.hosts[0]
    original = cluster.api_url
    cluster.api_url = url          # the whole cycle through the capped API
    try:
        flows.boot_delete_cycle(cluster, host)
    finally:
        cluster.api_url = original
    assert 'Traceback' not in svc.log()


def test_api_capped_at_conductor_1_0_refuses_a_1_1_call_without_hanging(cluster,
                                                                       capped_api):
    url, svc = capped_api
    import httpx
    device = next(iter(cluster.db_view(cluster.hosts[0])[0]))
    with httpx.Client(base_url=url, timeout=30) as api:
        r = api.post(f'/v2/devices/{device}/clean',
                     headers={'OpenStack-API-Version': 'accelerator latest'})
    # Never sent: the conductors saw no device_clean (the refusal is local).
    assert not any('device_clean' in c.log() and device in c.log()
                   for c in cluster.conductors)
    assert r.headers['content-type'].startswith('application/json')
    assert 'Traceback' not in r.text
    assert r.status_code == 409, r.text
    body = r.json()
    assert body['error_code'] == 'cyb.rpc.version_capped'
    assert '[upgrade_levels]' in body['error_message'] and '1.0' in body['error_message']
