"""Failures a multi-host deployment must survive: an agent killed (-9) and
restarted, a conductor killed and restarted, RabbitMQ restarted, PostgreSQL
restarted. After each: the services are back, nothing is left in a transient
state, and a boot/delete cycle works."""
import os
import shutil
import time

import pytest
import sqlalchemy as sa

from tests.multihost import cluster as cluster_mod
from tests.multihost import flows
from tests.fixtures.sysfs_tree import make_pci

pytestmark = pytest.mark.slow
NEW_BDF = '0000:83:00.0'


def names(cluster, host):
    return sorted(d['name'] for d in cluster.deployables(host))


def _swap_pci(cluster, host, remove, add):
    """Hardware change on ``host``: one PCI function gone, another one new."""
    root = cluster.sysfs_for(host)
    shutil.rmtree(root / 'devices' / 'pci0000:00' / remove)
    os.unlink(root / 'bus' / 'pci' / 'devices' / remove)
    make_pci(root, add, f'0x{cluster_mod.PCI_VENDOR}', f'0x{cluster_mod.PCI_PRODUCT}',
             cls='0x030200')


def _provider_names(cluster, host):
    return sorted(cluster.placement_tree(host))


def test_agent_killed_and_restarted_rereports_and_leaves_nothing_transient(healthy):
    cluster = healthy
    host = cluster.hosts[1]
    agent = cluster.agents[host]
    with cluster.api_client() as api:
        flows.ensure_profile(api)
        instance, _ = flows.boot(cluster, api, host, cluster.pci_rp(host))
        # Mid-work: the devices change and the agent dies while it discovers and
        # reports every second.
        _swap_pci(cluster, host, remove='0000:82:00.0', add=NEW_BDF)
        agent.kill()
        assert not agent.alive()
        # The instance goes away while its host's agent is down: a PCI device needs
        # nothing from the agent to be released.
        flows.delete(cluster, api, instance)
    restart_at = agent.log_size()
    agent.start()
    expected = sorted([f'{host}_FakeDevice', f'{host}_0000:81:00.0', f'{host}_{NEW_BDF}'])
    cluster.wait_for(lambda: names(cluster, host) == expected, 'the re-report')
    cluster.wait_for(lambda: _provider_names(cluster, host) == sorted([host] + expected),
                     'Placement in line with the re-report')
    assert flows.transient(cluster) == ([], [])
    devices, _ = cluster.db_view(host)
    assert sorted(d['device_state'] for d in devices.values()) == ['available'] * 3
    log = agent.log_since(restart_at)
    assert 'Traceback' not in log
    # The agent asked the conductor what to recover as it started (spec 1).
    if 'Start-up recovery of' in log:
        pytest.fail('start-up recovery failed: ' + log[log.index('Start-up recovery'):][:500])

    _swap_pci(cluster, host, remove=NEW_BDF, add='0000:82:00.0')
    cluster.wait_for(lambda: cluster.host_registered(host) and NEW_BDF not in str(
        _provider_names(cluster, host)), 'the original devices back')


def test_conductor_killed_and_restarted_finishes_interrupted_deletes(healthy):
    """A conductor that dies between a delete's two transactions leaves the ARQ in
    Deleting: the next conductor start finishes it (handle freed, device back,
    reservation lifted). BindStarted is never committed by a bind (one
    transaction); a row left in it by anything else is deleted by Nova's delete."""
    cluster = healthy
    host = cluster.hosts[0]
    rp = cluster.pci_rp(host)
    placement_before = cluster.placement_tree(host)
    engine = sa.create_engine(cluster.db_url)
    try:
        with cluster.api_client() as api:
            flows.ensure_profile(api)
            crashed, _ = flows.boot(cluster, api, host, rp)
            with engine.begin() as conn:      # what the dead conductor committed
                conn.execute(sa.text("UPDATE extended_accelerator_requests SET "
                                     "state = 'Deleting' WHERE instance_uuid = :i"),
                             {'i': crashed})
            victim = cluster.conductors[0]
            victim.kill()
            # The survivor serves everything meanwhile.
            flows.boot_delete_cycle(cluster, cluster.hosts[2])
            victim.start()
            cluster.wait_for(lambda: api.get('/v2/accelerator_requests', params={
                'instance': crashed}).json()['arqs'] == [], 'the Deleting ARQ finished')
            flows.unclaim(cluster, crashed)

            stuck, _ = flows.boot(cluster, api, host, rp)
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE extended_accelerator_requests SET "
                                     "state = 'BindStarted' WHERE instance_uuid = :i"),
                             {'i': stuck})
            flows.delete(cluster, api, stuck)
    finally:
        engine.dispose()
    assert flows.transient(cluster) == ([], [])
    after = flows.wait_equal(lambda: cluster.placement_tree(host), placement_before)
    assert after == placement_before


def test_rabbitmq_restart_services_reconnect(healthy, capsys):
    cluster = healthy
    pids = {s.name: s.pid for s in cluster.services()}
    started = time.monotonic()
    cluster.rabbit.restart()
    broker_back = time.monotonic() - started
    queues = ['steward-conductor'] + [f'steward-agent.{h}' for h in cluster.hosts]
    expected = [len(cluster.conductors)] + [1] * len(cluster.hosts)
    cluster.wait_for(lambda: [cluster.rabbit.consumers(q) for q in queues] == expected,
                     'every service consuming again', timeout=90)
    reconnected = time.monotonic() - started
    with capsys.disabled():
        print(f'\nRabbitMQ restart: broker back after {broker_back:.1f} s, every '
              f'service consuming again after {reconnected:.1f} s')
    # Reconnected, not restarted.
    assert {s.name: s.pid for s in cluster.services()} == pids
    assert all(s.alive() for s in cluster.services())
    flows.boot_delete_cycle(cluster, cluster.hosts[2])
    # Agent -> conductor too: a new device is reported and registered.
    host = cluster.hosts[2]
    _swap_pci(cluster, host, remove='0000:82:00.0', add=NEW_BDF)
    cluster.wait_for(lambda: f'{host}_{NEW_BDF}' in _provider_names(cluster, host),
                     'a report after the restart')
    _swap_pci(cluster, host, remove=NEW_BDF, add='0000:82:00.0')
    cluster.wait_for(lambda: cluster.host_registered(host) and NEW_BDF not in str(
        _provider_names(cluster, host)), 'the original devices back')


def _clean_error(r):
    assert r.headers['content-type'].startswith('application/json'), r.text
    body = r.json()
    assert body['error_code'] and 'Traceback' not in r.text and 'File "' not in r.text
    return body


def test_database_restart_api_and_conductors_recover(healthy_on):
    """PostgreSQL, and MariaDB, restarted under the deployment."""
    cluster = healthy_on
    with cluster.api_client(timeout=60) as api:
        assert api.get('/v2/devices').status_code == 200
        cluster.stop_database()
        try:
            for call in (lambda: api.get('/v2/devices'),       # the API's own read
                         lambda: api.post('/v2/accelerator_requests', json={
                             'device_profile_name': flows.PCI_PROFILE})):  # conductor
                started = time.monotonic()
                r = call()
                assert time.monotonic() - started < 30, 'hung on the dead database'
                assert r.status_code >= 500
                _clean_error(r)
        finally:
            cluster.start_database()
        first = api.get('/v2/devices')
        if first.status_code != 200:
            assert first.status_code == 503, first.text
            _clean_error(first)
        assert api.get('/v2/devices').status_code == 200
    flows.boot_delete_cycle(cluster, cluster.hosts[1])
    assert flows.transient(cluster) == ([], [])


def test_database_outage_answers_503(healthy_on):
    cluster = healthy_on
    with cluster.api_client(timeout=60) as api:
        cluster.stop_database()
        try:
            r = api.get('/v2/devices')
            assert r.status_code == 503 and _clean_error(r)['error_code'] == \
                'cyb.service.unavailable'
            r = api.post('/v2/accelerator_requests',
                         json={'device_profile_name': flows.PCI_PROFILE})
            assert r.status_code == 503 and _clean_error(r)['error_code'] == \
                'cyb.service.unavailable'
        finally:
            cluster.start_database()
        assert api.get('/v2/devices').status_code in (200, 503)
        assert api.get('/v2/devices').status_code == 200
