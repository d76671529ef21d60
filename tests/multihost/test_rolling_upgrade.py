"""A rolling upgrade from the previous release (tests/fixtures/previous_release.py)
to this tree in the multi-host deployment, as doc/multihost.md orders it (issue
37, item 1), on each database the release runs on (``previous_release.DATABASES``:
PostgreSQL; the recorded release predates Steward's MariaDB support):

1. the previous release runs everything (its db sync, two conductors, the API
   with two workers, an agent per host; ``[database] sync_on_startup = false`` as
   the guide says to set on it), and an instance stays bound on the first host
   from the start to the end;
2. this tree's ``steward-manage db sync`` runs under it;
3. the conductors are replaced one by one (capped at agent RPC 1.0 while agents
   of the previous release run), then the API, then the agents;
4. the caps are removed (the conductors restarted), the online data migrations
   run, ``steward-status upgrade check`` passes.

After every step: a whole boot and delete on the other host (the ARQ bound, its
device allocated and reserved in Placement, then everything as before), the
long-lived instance still Bound on its device, no ARQ or device left in a
transitional state, and no service of either release exited.

Not here: Nova-like clients booting and deleting *throughout* (each step is
checked between steps, not under concurrent load), the 503-only-while-restarting
accounting, and the old services' version caps in the other direction (API
and agents capped at conductor 1.0 while old conductors run: conductors go first).
"""
import os
import subprocess

import pytest

from tests.fixtures import previous_release
from tests.fixtures import requirements
from tests.multihost import cluster as cluster_mod
from tests.multihost import flows

pytestmark = pytest.mark.slow
NEW = cluster_mod.BIN
HOSTS = ('up-a', 'up-b')


@pytest.fixture(scope='module')
def previous_bin():
    try:
        return os.path.join(previous_release.ensure(), 'bin')
    except previous_release.BuildError as err:
        requirements.need('pypi', f'the previous release\'s side venv: {err}')


def _replace(cluster, svc, conf_path=None, **kw):
    """``svc`` stopped (SIGTERM: in-flight calls finish) and started again from this
    tree, on the same configuration file and log."""
    svc.stop()
    new = cluster_mod.Service(svc.name, svc.role, conf_path or svc.conf_path,
                              svc.log_path, netns=svc.netns, env=svc.env, bin_dir=NEW, **kw)
    return new.start()


def _invariants(cluster, step, kept):
    """What must hold after ``step``: the other host boots and deletes, the
    instance bound since the start is intact, nothing transitional, nobody
    exited."""
    for svc in cluster.services():
        assert svc.alive(), f'{step}: {svc.name} exited:\n{svc.log()[-3000:]}'
    flows.boot_delete_cycle(cluster, HOSTS[1])
    instance, arq_uuid, rp = kept
    with cluster.api_client() as api:
        arqs = api.get('/v2/accelerator_requests', params={'instance': instance}).json()
    assert [(a['uuid'], a['state'], a['device_rp_uuid']) for a in arqs['arqs']] == [
        (arq_uuid, 'Bound', rp)], step
    inv = cluster.placement_tree(HOSTS[0])[f'{HOSTS[0]}_{cluster_mod.PCI_ADDRESSES[0]}'][0]
    assert inv[cluster_mod.PCI_RC]['reserved'] == 1, step
    assert flows.transient(cluster) == ([], []), step
    # (Logs are not required clean: an agent's report in flight to a conductor that
    # is being replaced times out and is logged, then sent again next cycle.)


def _previous_deployment(previous_bin, database, size, tag):
    """The previous release's deployment, started: ``size`` conductors and API
    workers, its services not migrating at start (as doc/multihost.md has the
    operator set before upgrading). ``tag`` names its namespaces and veths apart
    from the session's own deployments of this test process ('v' and 'm')."""
    cluster_mod.require(database)
    cluster = cluster_mod.Cluster(
        hosts=HOSTS, conductors=size, api_workers=size, database=database,
        bin_dir=previous_bin, extra_conf={'database': {'sync_on_startup': 'false'}},
        pg_driver='psycopg2')
    cluster.netns_tag = tag
    return cluster.start()


@pytest.mark.parametrize('database', previous_release.DATABASES)
def test_rolling_upgrade_from_the_previous_release(previous_bin, database):
    cluster = _previous_deployment(previous_bin, database, 2, 'u')
    try:
        sync_conf = cluster.write_conf('db-sync', cluster.common_conf('db-sync', 'mh-sync'))

        def manage(*argv):
            return subprocess.run([os.path.join(NEW, 'steward-manage'), *argv,
                                   '--config-file', sync_conf], capture_output=True,
                                  text=True, timeout=300)

        def revision():
            return subprocess.run([os.path.join(NEW, 'steward'), 'db', 'version',
                                   '--config-file', sync_conf], capture_output=True,
                                  text=True, timeout=300).stdout.strip()

        assert revision() == previous_release.SCHEMA
        rp = cluster.pci_rp(HOSTS[0])
        with cluster.api_client() as api:
            flows.ensure_profile(api)
            instance, arqs = flows.boot(cluster, api, HOSTS[0], rp)
        kept = (instance, arqs[0]['uuid'], rp)
        _invariants(cluster, 'the previous release', kept)

        out = manage('db', 'sync')
        assert out.returncode == 0, out.stderr
        from steward.db import migration
        assert revision() == migration.head_revision() != previous_release.SCHEMA
        _invariants(cluster, 'the new schema under the previous release', kept)

        capped = {}
        for i, old in enumerate(list(cluster.conductors)):
            name, path = cluster.conductor_conf(i + 1)
            conf = cluster.common_conf(name, f'mh-ctl-{i + 1}')
            conf['placement'] = {'auth_type': 'admin_token',
                                 'endpoint': cluster.placement_url, 'token': 'admin',
                                 'endpoint_override': cluster.placement_url,
                                 'create_compute_node': 'false'}
            conf['upgrade_levels'] = {'agent': '1.0'}
            capped[i] = (path, cluster.write_conf(f'{name}-capped', conf))
            cluster.conductors[i] = _replace(cluster, old, conf_path=capped[i][1])
            cluster.wait_ready(settle=False)
            _invariants(cluster, f'conductor {i + 1} replaced', kept)

        cluster.api = _replace(cluster, cluster.api)
        cluster.wait_ready(settle=False)
        _invariants(cluster, 'the API replaced', kept)

        for host in HOSTS:
            cluster.agents[host] = _replace(cluster, cluster.agents[host])
            cluster.wait_ready()
            _invariants(cluster, f'agent {host} replaced', kept)

        for i, old in enumerate(list(cluster.conductors)):     # the caps removed
            cluster.conductors[i] = _replace(cluster, old, conf_path=capped[i][0])
        cluster.wait_ready()
        out = manage('db', 'online_data_migrations')
        assert out.returncode == 0, out.stderr
        out = subprocess.run([os.path.join(NEW, 'steward-status'), 'upgrade', 'check',
                              '--config-file', sync_conf], capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        _invariants(cluster, 'every service upgraded, no caps', kept)

        with cluster.api_client() as api:
            flows.delete(cluster, api, instance)
        assert flows.transient(cluster) == ([], [])
    finally:
        cluster.stop()


@pytest.mark.parametrize('database', previous_release.DATABASES)
def test_a_contract_step_applied_early_fails_the_upgrade(previous_bin, database):
    """The same deployment of the previous release, with a migration that drops a
    column it reads (devices.last_error) applied after this tree's db sync: the
    step's checks fail, as they must for a migration that breaks the rule of
    doc/contributor/schema-changes.md."""
    import sqlalchemy as sa
    cluster = _previous_deployment(previous_bin, database, 1, 'w')
    try:
        rp = cluster.pci_rp(HOSTS[0])
        with cluster.api_client() as api:
            flows.ensure_profile(api)
            instance, arqs = flows.boot(cluster, api, HOSTS[0], rp)
        kept = (instance, arqs[0]['uuid'], rp)
        _invariants(cluster, 'the previous release', kept)
        sync_conf = cluster.write_conf('db-sync', cluster.common_conf('db-sync', 'mh-sync'))
        subprocess.run([os.path.join(NEW, 'steward-manage'), 'db', 'sync', '--config-file',
                        sync_conf], check=True, capture_output=True, timeout=300)
        engine = sa.create_engine(cluster.db_url)
        try:
            with engine.begin() as conn:
                conn.execute(sa.text('ALTER TABLE devices DROP COLUMN last_error'))
        finally:
            engine.dispose()
        with pytest.raises((AssertionError, KeyError)):
            _invariants(cluster, 'a contract step too early', kept)
        with cluster.api_client() as api:
            assert api.get('/v2/devices').status_code == 500
    finally:
        cluster.stop()
