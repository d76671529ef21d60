"""The patched Nova against the real upstream Cyborg 17.0.0, which stops at
microversion 2.3 and answers 406 above it: Nova still reads the bound ARQs (no
microversion asked) and builds the guest, as the released Nova does.

Cyborg runs as tests/fixtures/cyborg_upstream.py runs it for the bench and the import tests
(its functions are imported, not copied): .venv-cyborg with openstack-cyborg==17.0.0, a throw-away RabbitMQ, the
embedded Placement, cyborg-conductor, cyborg-agent with upstream's fake driver and
the API under gunicorn. The API's paste pipeline gets, in place of
keystonemiddleware's authtoken, a filter that sets the identity keystonemiddleware
would set for Nova's user + service token (Nova's client sends neither here).
Upstream's fake driver offers TEST_PCI handles only: Nova reads them and, as
always, leaves them out of the XML; that the patched client asks no microversion of
a 2.3 Cyborg is what this test shows, with the 406 it avoids.
"""
import os
import subprocess
import uuid

import httpx
import pytest

from tests.fixtures import requirements
from tests.multihost import rabbit as rabbit_mod
from tests.nova import series
from tests.fixtures.stack import free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(series.XDIST_GROUP)]

IDENTITY_FILTER = '''
def factory(global_conf, **local_conf):
    def filter_(app):
        def identity(environ, start_response):
            environ.update({'HTTP_X_ROLES': 'admin,member,reader',
                            'HTTP_X_PROJECT_ID': 'd6b075b76bc54cd89fdedcfcf106ad45',
                            'HTTP_X_USER_ID': '468c59863fdf4bc3a98ee6e7441c22da',
                            'HTTP_X_SERVICE_ROLES': 'service'})
            return app(environ, start_response)
        return identity
    return filter_
'''


@pytest.fixture(scope='module')
def cyborg(tmp_path_factory, request):
    from tests.fixtures import cyborg_upstream as up
    if not rabbit_mod.installed():
        requirements.need('rabbitmq', 'rabbitmq-server is not installed')
    try:
        up.ensure_venv()
    except (RuntimeError, OSError) as err:
        requirements.need('cyborg', f'cannot build {up.VENV}: {str(err)[-1500:]}')
    tmp = str(tmp_path_factory.mktemp('cyborg17'))
    rabbit = rabbit_mod.RabbitServer(base=os.path.join(tmp, 'rabbit'))
    nova = up.start_nova_stub()
    placement = services = None
    saved_paste, saved_pythonpath = up.PASTE, os.environ.get('PYTHONPATH')
    try:
        rabbit.start()
        from steward.placement import handle as embedded
        placement = embedded.start_subprocess(
            f'sqlite:///{tmp}/placement.db', port=free_port(),
            log_file=os.path.join(tmp, 'placement.log'))
        httpx.post(f'{placement.url}/resource_providers', headers=up.PLACEMENT_HEADERS,
                   json={'name': up.HOST, 'uuid': str(uuid.uuid4())}).raise_for_status()
        with open(os.path.join(tmp, 'nova_identity.py'), 'w') as f:
            f.write(IDENTITY_FILTER)
        up.PASTE = saved_paste.replace(
            'pipeline = cors http_proxy_to_wsgi request_id api_v2',
            'pipeline = cors http_proxy_to_wsgi request_id identity api_v2') + (
            '\n[filter:identity]\npaste.filter_factory = nova_identity:factory\n')
        conf = up.write_config(tmp, rabbit.url(), placement.url,
                               f'http://127.0.0.1:{nova.server_address[1]}/v2.1',
                               f'sqlite:///{tmp}/cyborg.db')
        services = up.Services(tmp, conf)
        out = subprocess.run([os.path.join(up.VENV, 'bin', 'cyborg-dbsync'),
                              '--config-file', conf, 'create_schema'],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        api_port = free_port()
        services.run('cyborg-conductor')
        os.environ['PYTHONPATH'] = tmp          # gunicorn imports nova_identity
        services.run('gunicorn', '-c', up.write_gunicorn_config(tmp, conf, api_port))
        up.wait_for('cyborg-conductor to consume its queue',
                    lambda: rabbit.consumers('cyborg-conductor'), services)
        services.run('cyborg-agent')
        url = f'http://127.0.0.1:{api_port}'
        rp = up.wait_for('the fake deployable in Cyborg and Placement',
                         lambda: up.offered_rp(url, placement.url), services)
        yield url, rp, services
    finally:
        up.PASTE = saved_paste
        if saved_pythonpath is None:
            os.environ.pop('PYTHONPATH', None)
        else:
            os.environ['PYTHONPATH'] = saved_pythonpath
        if services:
            services.stop()
        if placement:
            placement.stop()
        nova.shutdown()
        rabbit.destroy()


def bind(url, rp):
    """Nova's conductor's part: a device profile, an ARQ, the bind; the instance."""
    with httpx.Client(base_url=url, timeout=60) as c:
        r = c.post('/v2/device_profiles', json=[{'name': 'dp-fake',
                                                  'groups': [{'resources:FPGA': '1'}]}])
        assert r.status_code == 201, r.text
        r = c.post('/v2/accelerator_requests', json={'device_profile_name': 'dp-fake'})
        assert r.status_code == 201, r.text
        (arq,) = r.json()['arqs']
        inst = str(uuid.uuid4())
        r = c.patch('/v2/accelerator_requests', json={arq['uuid']: [
            {'op': 'add', 'path': '/hostname', 'value': 'bench-host'},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
            {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
        assert r.status_code == 202, r.text
        wait_for(lambda: c.get(f'/v2/accelerator_requests/{arq["uuid"]}').json()['state']
                 == 'Bound', f'ARQ {arq["uuid"]} to bind', timeout=60)
        return inst


def test_patched_nova_reads_upstream_cyborg_17_without_2_4(cyborg, tmp_path):
    url, rp, services = cyborg
    version = httpx.get(f'{url}/v2', timeout=60).json()
    assert version['max_version'] == '2.3', version
    refused = httpx.get(f'{url}/v2/accelerator_requests', timeout=60,
                        headers={'OpenStack-API-Version': 'accelerator 2.4'})
    assert refused.status_code == 406, refused.text
    inst = bind(url, rp)
    for patched in (True, False):
        (tmp_path / str(patched)).mkdir()
        (result,) = series.consume(f'{url}/v2', [inst], tmp_path / str(patched),
                                   patched=patched).values()
        assert 'error' not in result, (patched, result, services.tail('gunicorn'))
        assert result['arq_microversion'] is None
        (arq,) = result['arqs']
        assert (arq['state'], arq['instance_uuid'], arq['attach_handle_type']) == (
            'Bound', inst, 'TEST_PCI')
        assert 'managed' not in arq['attach_handle_info']
        assert '<hostdev' not in result['xml'] and '<domain' in result['xml']
