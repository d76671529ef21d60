"""The host / compute-node name rule (LP 2139369): an agent reports the name of the
compute-node resource provider it hangs its devices under; with
``[placement] create_compute_node = false`` (a deployment with Nova) a name Nova
never registered is refused with an error that names it and the option to set."""
import pytest

pytestmark = pytest.mark.slow

HOST = 'mh-d'
FQDN = 'mh-d.example.org'


def _conductor_logs(cluster, offsets):
    return ''.join(c.log_since(offsets.get(c.name, 0)) for c in cluster.conductors)


def test_agent_with_unknown_compute_node_name_is_refused_clearly(cluster):
    offsets = {c.name: c.log_size() for c in cluster.conductors}
    agent = cluster.add_agent(HOST, rp_name=FQDN, drivers='pci')
    try:
        cluster.wait_for(lambda: FQDN in _conductor_logs(cluster, offsets),
                         'the conductor refusing the name', timeout=60)
        line = next(line for line in _conductor_logs(cluster, offsets).splitlines()
                    if FQDN in line and 'ERROR' in line)
        assert 'No compute-node resource provider named mh-d.example.org' in line
        assert '[agent] resource_provider_name' in line
        assert 'Traceback' not in _conductor_logs(cluster, offsets)
        # Nothing registered in Placement for it, and nothing under another name.
        with cluster.placement_client() as p:
            for name in (FQDN, HOST, f'{HOST}_0000:81:00.0'):
                assert p.get('/resource_providers', params={'name': name}).json()[
                    'resource_providers'] == [], name
        assert agent.alive()

        # Nova registers the compute node under that name: the next report (the
        # refused one was not remembered) hangs the devices under it.
        cluster.compute_rps[FQDN] = cluster.create_compute_node(FQDN)
        with cluster.placement_client() as p:
            cluster.wait_for(lambda: len(p.get('/resource_providers', params={
                'in_tree': cluster.compute_rps[FQDN]}).json()['resource_providers']) == 3,
                'devices under the compute node')
    finally:
        agent.stop()
        del cluster.agents[HOST]
