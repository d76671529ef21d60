"""Scheduling and claiming on the real Placement, as nova-scheduler does it.

The single host has no nova-compute, so nobody reports the compute node's own
resources or tags it ``OWNER_NOVA``. ``prepare_compute_node`` does what
nova-compute would, idempotently: it adds ``OWNER_NOVA`` to the root provider's
traits when missing, and when the root has none of VCPU/MEMORY_MB/DISK_GB it adds
them from this machine (CPUs, MemTotal, the size of the file system holding
``state_path``) with Nova's initial allocation ratios. A root that already has any
of them is Nova's and its inventory is left alone.
"""
import dataclasses
import logging
import os
import shutil

from steward.common import exception
from steward.compute import request as req_mod

LOG = logging.getLogger(__name__)

CONSUMER_TYPE = 'INSTANCE'
# The single-host stack has no Keystone: every instance belongs to this project.
PROJECT_ID = USER_ID = 'steward-compute'
NOVA_RESOURCES = ('VCPU', 'MEMORY_MB', 'DISK_GB')
# Nova's initial_{cpu,ram,disk}_allocation_ratio.
_RATIOS = {'VCPU': 4.0, 'MEMORY_MB': 1.0, 'DISK_GB': 1.0}
_ATTEMPTS = 4


@dataclasses.dataclass
class Claim:
    """The chosen candidate, as claimed for ``instance_uuid``."""
    instance_uuid: str
    root_uuid: str
    allocations: dict                  # {rp_uuid: {RC: amount}}
    mappings: dict                     # {group suffix: [rp_uuid]}
    names: dict                        # {rp_uuid: provider name}

    def provider_for(self, suffix):
        rps = self.mappings.get(suffix) or []
        return rps[0] if rps else None

    def to_dict(self):
        return dataclasses.asdict(self)


def compute_node_name(conf):
    """The compute-node provider's name; the agent hangs devices under it."""
    return (conf.agent.resource_provider_name or conf.placement.compute_node_name
            or conf.host)


def host_inventory(state_path):
    """VCPU, MEMORY_MB and DISK_GB of this machine."""
    mem_kib = 0
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemTotal:'):
                    mem_kib = int(line.split()[1])
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        disk_gb = shutil.disk_usage(state_path).total // 1024 ** 3
    except OSError:
        disk_gb = 0
    totals = {'VCPU': os.cpu_count() or 1, 'MEMORY_MB': mem_kib // 1024,
              'DISK_GB': disk_gb}
    return {rc: {'total': total, 'reserved': 0, 'min_unit': 1, 'max_unit': total,
                 'step_size': 1, 'allocation_ratio': _RATIOS[rc]}
            for rc, total in totals.items() if total > 0}


def _with_generation(placement, what, attempt):
    for n in range(_ATTEMPTS):
        try:
            return attempt()
        except exception.ServiceCallFailed as err:
            if getattr(err, 'placement_code', None) != 'placement.concurrent_update' \
                    or n == _ATTEMPTS - 1:
                raise
            LOG.debug('Generation conflict on %s; re-reading', what)


def find_compute_node(placement, name):
    found = placement.get('/resource_providers', {'name': name})['resource_providers']
    if not found:
        raise exception.NoValidHost(
            reason=f'no compute-node resource provider named {name} in Placement '
                   f'(is `steward serve` running with the same configuration?)')
    return found[0]['uuid']


def prepare_compute_node(placement, root_uuid, state_path):
    """OWNER_NOVA and Nova's inventory on the root, when missing (module doc).
    Returns what it changed, e.g. ['trait OWNER_NOVA', 'inventory VCPU,...']."""
    path = f'/resource_providers/{root_uuid}'
    changed = []

    def add_trait():
        doc = placement.get(path + '/traits')
        if req_mod.OWNER_NOVA in doc['traits']:
            return
        placement.call('PUT', path + '/traits', {
            'resource_provider_generation': doc['resource_provider_generation'],
            'traits': sorted(set(doc['traits']) | {req_mod.OWNER_NOVA})})
        changed.append(f'trait {req_mod.OWNER_NOVA}')

    def add_inventory():
        doc = placement.get(path + '/inventories')
        if any(rc in doc['inventories'] for rc in NOVA_RESOURCES):
            return
        wanted = host_inventory(state_path)
        placement.call('PUT', path + '/inventories', {
            'resource_provider_generation': doc['resource_provider_generation'],
            'inventories': dict(doc['inventories'], **wanted)})
        changed.append('inventory ' + ','.join(
            f'{rc}={inv["total"]}' for rc, inv in sorted(wanted.items())))

    _with_generation(placement, f'traits of {root_uuid}', add_trait)
    _with_generation(placement, f'inventory of {root_uuid}', add_inventory)
    if changed:
        LOG.info('Compute node %s: added %s (no nova-compute reports it)', root_uuid,
                 ' and '.join(changed))
    return changed


def candidates(placement, request, in_tree=None):
    """Placement's allocation candidates for ``request`` (a ResourceRequest)."""
    doc = placement.get('/allocation_candidates', request.query(in_tree))
    return doc['allocation_requests'], doc['provider_summaries']


def _provider_names(placement, root_uuid):
    rps = placement.get('/resource_providers', {'in_tree': root_uuid})
    return {rp['uuid']: rp['name'] for rp in rps['resource_providers']}


def claim(placement, request, instance_uuid, root_uuid):
    """Pick a candidate on the tree of ``root_uuid`` and claim it for the instance
    (PUT /allocations at 1.39, consumer_type INSTANCE). Candidates are tried in
    Placement's order; one lost to a concurrent claim (409) makes way for the next."""
    allocation_requests, _ = candidates(placement, request, in_tree=root_uuid)
    if not allocation_requests:
        raise exception.NoValidHost(reason='Placement has no allocation candidate for '
                                           + _describe(request))
    last = None
    for candidate in allocation_requests:
        allocations = {rp: dict(a['resources'])
                       for rp, a in candidate['allocations'].items()}
        body = {'allocations': {rp: {'resources': res}
                                for rp, res in allocations.items()},
                'project_id': PROJECT_ID, 'user_id': USER_ID,
                'consumer_generation': None, 'consumer_type': CONSUMER_TYPE}
        try:
            placement.call('PUT', f'/allocations/{instance_uuid}', body, ok=(204,))
        except exception.ServiceCallFailed as err:
            if getattr(err, 'http_status', None) != 409:
                raise
            LOG.info('Candidate lost to a concurrent claim (%s); trying the next', err)
            last = err
            continue
        return Claim(instance_uuid=instance_uuid, root_uuid=root_uuid,
                     allocations=allocations, mappings=candidate.get('mappings', {}),
                     names=_provider_names(placement, root_uuid))
    raise exception.NoValidHost(reason=f'every candidate was claimed meanwhile ({last})')


def release(placement, instance_uuid):
    """Delete the instance's allocations; True if there were any."""
    resp = placement.call('DELETE', f'/allocations/{instance_uuid}', ok=(204, 404))
    return resp.status_code == 204


def _describe(request):
    return ' '.join(f'{k}={v}' for k, v in request.query())
