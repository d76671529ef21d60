"""Switching a live cloud from upstream Cyborg to Steward (doc/switching-from-cyborg.md),
end to end, once per database backend of Cyborg and Steward (SQLite, PostgreSQL,
and MariaDB as Cyborg is deployed: its schema made by its own migrations, PyMySQL
on both sides, Steward's database on the same server).

A real upstream Cyborg 17.0.0 (its conductor, API and agent with the fake driver,
tests/fixtures/cyborg_upstream.py) runs against a real RabbitMQ and the real Placement; it
holds a device profile, two instances' Bound ARQs (with Nova's allocations in
Placement) and one Initial ARQ. Cyborg is stopped; `steward db import-cyborg` runs
as an operator runs it (subprocess), first with --dry-run, then for real, then
again; `steward serve` starts against the same Placement. Every profile, device,
deployable and ARQ must read the same through the v2 API; Placement must hold the
same providers and allocations (only OWNER_CYBORG added, by the import); the
first discovery must recognise the device; a delete by instance must free the
device and a new bind must work.
"""
import json
import os
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from tests.fixtures import cyborg_upstream as cu
from tests.fixtures import requirements
from tests.multihost import rabbit as rabbit_mod
from tests.fixtures.stack import free_port, wait_for

# One xdist worker runs the Cyborg tests one after another: two Cyborg deployments
# at once would share the CI's two cores with everything else.
pytestmark = pytest.mark.xdist_group('cyborg')
STEWARD = os.path.join(os.path.dirname(sys.executable), 'steward')
PROFILE = 'fake-dp'
DEVICE_VERSION = {'OpenStack-API-Version': 'accelerator 2.3'}


@pytest.fixture(scope='module')
def cyborg_venv():
    try:
        cu.ensure_venv()
    except (RuntimeError, OSError) as err:
        requirements.need('cyborg', f'cannot build .venv-cyborg: {err}')


@pytest.fixture(scope='module')
def rabbit(tmp_path_factory):
    with rabbit_mod.running(tmp_path_factory.mktemp('rabbit')) as server:
        yield server


def _databases(backend, tmp):
    """(Cyborg's URL, Steward's URL) on ``backend``."""
    if backend == 'sqlite':
        return f'sqlite:///{tmp}/cyborg.db', f'sqlite:///{tmp}/steward.db'
    if backend == 'mariadb':
        from tests.fixtures import mariadb_fixture
        server = mariadb_fixture.get_mariadb()
        if server is None:
            requirements.need('mariadb', 'MariaDB server binaries not installed')
        requirements.need_import('pymysql', 'mariadb',
                                 "PyMySQL (Steward's mysql extra) not installed")
        # Steward's own database on the same server, as a deployment that moves
        # from Cyborg on MariaDB puts it; Cyborg's through PyMySQL, the driver
        # upstream Cyborg's (eventlet) services need.
        suffix = uuid.uuid4().hex[:10]
        return (server.create_database(f'cyborg_{suffix}', driver='pymysql'),
                server.create_database(f'steward_{suffix}'))
    from tests.fixtures import pg_fixture
    server = pg_fixture.get_postgres()
    if server is None:
        requirements.need('postgres', 'PostgreSQL server binaries not installed')
    suffix = uuid.uuid4().hex[:10]
    urls = []
    # Cyborg's database through the driver upstream Cyborg's venv has.
    for name, driver in ((f'cyborg_{suffix}', 'psycopg2'), (f'steward_{suffix}', 'psycopg')):
        server.psql(f'CREATE DATABASE {name}')
        urls.append(server.url(name, driver=driver))
    return urls


def _placement_state(url):
    """Everything of Placement the switch must leave alone: providers, their
    traits, inventories and usages, and the instances' allocations."""
    with httpx.Client(base_url=url, headers=cu.PLACEMENT_HEADERS, timeout=30) as p:
        state = {}
        for rp in p.get('/resource_providers').json()['resource_providers']:
            u = rp['uuid']
            state[u] = {
                'name': rp['name'], 'parent': rp['parent_provider_uuid'],
                'generation': rp['generation'],
                'traits': sorted(p.get(f'/resource_providers/{u}/traits')
                                 .json()['traits']),
                'inventories': p.get(f'/resource_providers/{u}/inventories')
                .json()['inventories'],
                'usages': p.get(f'/resource_providers/{u}/usages').json()['usages']}
        return state


def _allocations(url, instances):
    with httpx.Client(base_url=url, headers=cu.PLACEMENT_HEADERS, timeout=30) as p:
        # Without the providers' generations: adding OWNER_CYBORG moves them.
        return {i: {rp: a['resources'] for rp, a in
                    p.get(f'/allocations/{i}').json()['allocations'].items()}
                for i in instances}


def _api_view(url, headers=None):
    """What Nova and operators read: profiles, devices, deployables, ARQs."""
    with httpx.Client(base_url=url, headers=headers or {}, timeout=30) as c:
        profiles = {p['uuid']: {k: p[k] for k in ('name', 'groups', 'description')}
                    for p in c.get('/v2/device_profiles').json()['device_profiles']}
        devices = {d['uuid']: {k: d[k] for k in ('type', 'vendor', 'model', 'hostname',
                                                 'status', 'std_board_info')}
                   for d in c.get('/v2/devices', headers=DEVICE_VERSION)
                   .json()['devices']}
        deployables = {d['uuid']: {k: d[k] for k in ('name', 'rp_uuid',
                                                     'num_accelerators', 'driver_name')}
                       for d in c.get('/v2/deployables').json()['deployables']}
        # Attributes by uuid and value: a trait's key may differ (upstream's fake
        # driver says traits1, Steward's trait0).
        attributes = {a['uuid']: a['value']
                      for a in c.get('/v2/attributes').json()['attributes']}
        arqs = {a['uuid']: {k: a[k] for k in (
            'state', 'device_profile_name', 'device_profile_group_id', 'hostname',
            'device_rp_uuid', 'instance_uuid', 'project_id', 'attach_handle_type',
            'attach_handle_uuid', 'attach_handle_info')}
            for a in c.get('/v2/accelerator_requests').json()['arqs']}
    return {'device_profiles': profiles, 'devices': devices, 'deployables': deployables,
            'attributes': attributes, 'arqs': arqs}


def _nova_boots(cyborg, placement_url, rp_uuid, n):
    """Nova's part and Cyborg's for ``n`` instances; returns their uuids."""
    instances = []
    with httpx.Client(base_url=cyborg.url, headers=cu.IDENTITY, timeout=60) as c:
        for _ in range(n):
            arq = c.post('/v2/accelerator_requests',
                         json={'device_profile_name': PROFILE}).json()['arqs'][0]['uuid']
            inst = str(uuid.uuid4())
            httpx.put(f'{placement_url}/allocations/{inst}', headers=cu.PLACEMENT_HEADERS,
                      json={'allocations': {rp_uuid: {'resources': {'FPGA': 1}}},
                            'project_id': cu.IDENTITY['X-Project-Id'], 'user_id': 'u',
                            'consumer_generation': None, 'consumer_type': 'INSTANCE'}
                      ).raise_for_status()
            r = c.patch('/v2/accelerator_requests', json={arq: [
                {'op': 'add', 'path': '/hostname', 'value': cu.HOST},
                {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
                {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
            assert r.status_code == 202, r.text
            assert c.get(f'/v2/accelerator_requests/{arq}').json()['state'] == 'Bound'
            instances.append(inst)
    return instances


def _steward_conf(tmp, db_url, placement_url, api_port):
    path = os.path.join(tmp, 'steward.conf')
    with open(path, 'w') as f:
        f.write(f"""[DEFAULT]
state_path = {tmp}/steward
host = {cu.HOST}

[database]
connection = {db_url}

[api]
port = {api_port}
metrics_listen = 127.0.0.1:{free_port()}

[agent]
enabled_drivers = fake
discovery_interval = 3600

[placement]
auth_type = admin_token
token = admin
endpoint_override = {placement_url}
""")
    return path


def _steward_rows(url):
    """{table: rows} of Steward's database, tables with rows only."""
    import sqlalchemy as sa
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            counts = {t: conn.execute(sa.text(f'SELECT COUNT(*) FROM {t}')).scalar()
                      for t in ('device_profiles', 'devices', 'deployables',
                                'attach_handles', 'extended_accelerator_requests')}
    finally:
        engine.dispose()
    return {t: n for t, n in counts.items() if n}


def _steward(*args, conf):
    return subprocess.run([STEWARD, *args, '--config-file', conf], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize('backend', ['sqlite', 'postgresql', 'mariadb'])
def test_switch_from_cyborg(backend, cyborg_venv, rabbit, tmp_path):
    from steward.placement import handle as embedded
    tmp = str(tmp_path)
    cyborg_db, steward_db = _databases(backend, tmp)
    placement = embedded.start_subprocess(f'sqlite:///{tmp}/placement.db',
                                          port=free_port(),
                                          log_file=os.path.join(tmp, 'placement.log'))
    cyborg = serve = None
    try:
        httpx.post(f'{placement.url}/resource_providers', headers=cu.PLACEMENT_HEADERS,
                   json={'name': cu.HOST, 'uuid': str(uuid.uuid4())}).raise_for_status()

        # -- Cyborg holds a profile and two instances' Bound ARQs ---------------------
        cyborg = cu.Deployment(tmp, rabbit, placement.url, cyborg_db)
        rp_uuid = cyborg.start()
        with httpx.Client(base_url=cyborg.url, headers=cu.IDENTITY, timeout=60) as c:
            r = c.post('/v2/device_profiles', json=[{
                'name': PROFILE, 'description': 'from Cyborg',
                'groups': [{'resources:FPGA': '1',
                            'trait:CUSTOM_FAKE_DEVICE': 'required'}]}])
            assert r.status_code == 201, r.text
        instances = _nova_boots(cyborg, placement.url, rp_uuid, 2)
        with httpx.Client(base_url=cyborg.url, headers=cu.IDENTITY, timeout=60) as c:
            assert c.post('/v2/accelerator_requests',
                          json={'device_profile_name': PROFILE}).status_code == 201
        before = _api_view(cyborg.url, cu.IDENTITY)
        assert len(before['arqs']) == 3 and len(before['devices']) == 1
        placement_before = _placement_state(placement.url)
        allocations_before = _allocations(placement.url, instances)
        assert all(OWNER not in rp['traits'] for rp in placement_before.values())

        # -- the switch: a dry run first, Cyborg stopped, the import, Steward started
        api_port = free_port()
        conf = _steward_conf(tmp, steward_db, placement.url, api_port)
        out = _steward('db', 'sync', conf=conf)
        assert out.returncode == 0, out.stderr
        dry = _steward('db', 'import-cyborg', '--cyborg-connection', cyborg_db,
                       '--dry-run', conf=conf)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert 'Dry run: would write 1 device_profiles, 1 devices' in dry.stdout
        assert 'conflicts: none' in dry.stdout
        assert f'provider {rp_uuid} ({cu.HOST}_FakeDevice): add trait OWNER_CYBORG' \
            in dry.stdout
        assert _placement_state(placement.url) == placement_before
        assert _steward_rows(steward_db) == {}

        cyborg.stop()
        cyborg = None
        t0 = time.monotonic()
        first = _steward('db', 'import-cyborg', '--cyborg-connection', cyborg_db,
                         conf=conf)
        import_time = time.monotonic() - t0
        assert first.returncode == 0, first.stdout + first.stderr
        assert 'wrote 1 device_profiles, 1 devices, 1 controlpath_ids, 1 deployables, ' \
               '2 attributes, 16 attach_handles, 3 extended_accelerator_requests' \
               in first.stdout, first.stdout
        placement_after = _placement_state(placement.url)
        expected = json.loads(json.dumps(placement_before))
        expected[rp_uuid]['traits'] = sorted(expected[rp_uuid]['traits'] + [OWNER])
        expected[rp_uuid]['generation'] += 1          # the one trait write
        assert placement_after == expected

        serve_log = open(os.path.join(tmp, 'serve.log'), 'w')
        t0 = time.monotonic()
        serve = subprocess.Popen([STEWARD, 'serve', '--config-file', conf],
                                 stdout=serve_log, stderr=subprocess.STDOUT)
        url = f'http://127.0.0.1:{api_port}'

        def answering():
            assert serve.poll() is None, open(serve_log.name).read()[-3000:]
            try:
                return httpx.get(f'{url}/v2/accelerator_requests',
                                 params={'instance': instances[0]},
                                 timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
        wait_for(answering, 'steward serve', timeout=60)
        start_time = time.monotonic() - t0
        print(f'\naccelerator API downtime ({backend}): import {import_time:.1f} s + '
              f'steward serve answering {start_time:.1f} s = '
              f'{import_time + start_time:.1f} s (2-core host, '
              f'{os.getloadavg()[0]:.1f} load)')

        # -- Steward serves what Cyborg held -----------------------------------------
        wait_for(lambda: 'recognised by discovery' in open(serve_log.name).read(),
                 'the first discovery to recognise the imported device', timeout=60)
        after = _api_view(url)
        assert after == before
        assert _allocations(placement.url, instances) == allocations_before
        providers = _placement_state(placement.url)
        assert set(providers) == set(placement_before)
        assert {u: (p['name'], p['parent'], p['traits'], p['usages'])
                for u, p in providers.items()} == \
            {u: (p['name'], p['parent'], p['traits'], p['usages'])
             for u, p in placement_after.items()}
        assert 'discovered on' not in open(serve_log.name).read()   # no new device row

        settled = _placement_state(placement.url)
        again = _steward('db', 'import-cyborg', '--cyborg-connection', cyborg_db,
                         conf=conf)
        assert again.returncode == 0, again.stdout + again.stderr
        assert 'wrote nothing (already imported)' in again.stdout
        assert 'Placement: wrote 0 provider trait update(s)' in again.stdout
        assert _placement_state(placement.url) == settled
        assert _api_view(url) == before

        # -- Nova deletes an instance, then boots a new one ----------------------------
        with httpx.Client(base_url=url, timeout=30) as api:
            [device_uuid] = after['devices']
            for inst in instances:
                httpx.delete(f'{placement.url}/allocations/{inst}',
                             headers=cu.PLACEMENT_HEADERS).raise_for_status()
                r = api.delete('/v2/accelerator_requests', params={'instance': inst})
                assert r.status_code == 204, r.text
                assert api.get('/v2/accelerator_requests',
                               params={'instance': inst}).json()['arqs'] == []
            device = api.get(f'/v2/devices/{device_uuid}',
                             headers={'OpenStack-API-Version': 'accelerator 2.5'}).json()
            assert device['device_state'] == 'available'
            from tests.fixtures.stack import bind_instance
            new = bind_instance(url, placement.url, PROFILE, 'FPGA', cu.HOST)
            [arq] = api.get('/v2/accelerator_requests',
                            params={'instance': new}).json()['arqs']
            assert arq['state'] == 'Bound' and arq['device_rp_uuid'] == rp_uuid
            # The first free handle is the one the first instance held (Cyborg's
            # function 1), released with the attach info Steward's fake driver
            # reports for it: the first in address order.
            first = next(a for a in after['arqs'].values()
                         if a['instance_uuid'] == instances[0])
            assert first['attach_handle_info'] == {
                'domain': '0000', 'bus': '0c', 'device': '0', 'function': '1'}
            assert arq['attach_handle_uuid'] == first['attach_handle_uuid']
            assert arq['attach_handle_info'] == {
                'domain': '0000', 'bus': '0c', 'device': '00', 'function': '0'}
        assert set(_placement_state(placement.url)) == set(placement_before)

        # Once more after Nova acted on Steward: the deleted ARQs do not come back.
        steward_view = _api_view(url)
        late = _steward('db', 'import-cyborg', '--cyborg-connection', cyborg_db,
                        conf=conf)
        assert late.returncode == 0, late.stdout + late.stderr
        assert late.stdout.count('(deleted since the import): not imported again') == 2
        assert 'wrote nothing (already imported)' in late.stdout
        assert _api_view(url) == steward_view
    finally:
        if serve is not None:
            serve.terminate()
            serve.wait(30)
        if cyborg is not None:
            cyborg.stop()
        placement.stop()


OWNER = 'OWNER_CYBORG'
