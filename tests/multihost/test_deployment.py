"""The multi-host deployment working normally: API, conductors and one agent per
host as separate processes over RabbitMQ and PostgreSQL, some tests on MariaDB too
(see cluster.py)."""
import concurrent.futures
import threading
import uuid

import pytest

from tests.multihost import flows

pytestmark = pytest.mark.slow


def test_every_host_registered_under_its_own_compute_node(healthy_on):
    cluster = healthy_on
    for host in cluster.hosts:
        tree = cluster.placement_tree(host)
        assert set(tree) == {host, f'{host}_FakeDevice'} | {
            f'{host}_{bdf}' for bdf in ('0000:81:00.0', '0000:82:00.0')}
        devices, _ = cluster.db_view(host)
        assert {d['hostname'] for d in devices.values()} == {host}
    assert flows.transient(cluster) == ([], [])


@pytest.mark.parametrize('index', [0, 1, 2])
def test_boot_delete_cycle_on_each_host(cluster, index):
    flows.boot_delete_cycle(cluster, cluster.hosts[index])


def test_32_concurrent_binds_on_16_handles_across_conductors_and_api_workers(healthy_on):
    """On PostgreSQL and on MariaDB: no handle twice."""
    cluster = healthy_on
    host = cluster.hosts[0]
    rp = cluster.fake_rp(host)
    offsets = {c.name: c.log_size() for c in cluster.conductors}
    api_offset = cluster.api.log_size()
    with cluster.api_client() as api:
        flows.ensure_profile(api, name='mh-fpga', rc='FPGA')
        arqs = [api.post('/v2/accelerator_requests',
                         json={'device_profile_name': 'mh-fpga'}).json()['arqs'][0]
                for _ in range(32)]
    instances = [str(uuid.uuid4()) for _ in arqs]
    start = threading.Barrier(len(arqs))

    def bind(arq, instance):
        # A client (and connection) per request: the API workers share one
        # listening socket, so separate connections spread over both.
        with cluster.api_client() as api:
            start.wait()
            return api.patch('/v2/accelerator_requests',
                             json=flows.bind_body([arq], host, rp, instance))

    with concurrent.futures.ThreadPoolExecutor(len(arqs)) as pool:
        answers = list(pool.map(bind, arqs, instances))
    codes = sorted(r.status_code for r in answers)
    assert codes == [202] * 16 + [409] * 16, [r.text for r in answers]
    assert {r.json()['error_code'] for r in answers if r.status_code == 409} == {
        'cyb.bind.no_free_handle'}

    with cluster.api_client() as api:
        mine = {a['uuid'] for a in arqs}
        now = [a for a in api.get('/v2/accelerator_requests').json()['arqs']
               if a['uuid'] in mine]
        bound = [a for a in now if a['state'] == 'Bound']
        assert len(bound) == 16
        assert sorted(a['state'] for a in now if a['state'] != 'Bound') == ['Initial'] * 16
        assert len({a['attach_handle_uuid'] for a in bound}) == 16
        assert len({tuple(sorted(a['attach_handle_info'].items())) for a in bound}) == 16

        # The API workers bound them themselves (the API runs the ARQ
        # operations: doc/multihost.md), each line of a transition naming its
        # process (which worker accepts which connection is the kernel's choice);
        # no conductor was asked.
        workers = cluster.api_worker_pids()
        lines = [line for line in cluster.api.log_since(api_offset).splitlines()
                 if 'BindStarted' in line]
        binding = {int(line.split()[2]) for line in lines}
        assert binding and binding <= set(workers), lines
        assert len(workers) == cluster.api_workers
        assert not any('BindStarted' in c.log_since(offsets[c.name])
                       for c in cluster.conductors)

        r = api.delete('/v2/accelerator_requests',
                       params={'arqs': ','.join(sorted(mine))})
        assert r.status_code == 204, r.text
    assert flows.transient(cluster) == ([], [])
