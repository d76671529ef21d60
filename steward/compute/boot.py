"""A whole instance boot and delete on this host, the way nova-conductor and
nova-compute drive it against Cyborg and Placement (spec 3):

boot: device profile -> request groups -> allocation candidates -> claim ->
ARQs -> match -> bind -> wait for events -> resolved ARQs -> spec-5 device check ->
mdevs -> domain XML. Anything failing after the record exists is undone in reverse
(mdevs, ARQs, allocation): nothing leaks. When an undo step fails, the record stays
(state ``error``) and ``delete`` retries every step; each is idempotent.

delete: remove the mdevs created for the instance, ``DELETE ?instance=`` (and any
never-bound ARQ of the record), delete the allocation, forget the record.
"""
import logging
import os
import time
import uuid as uuidlib

from steward.common import exception
from steward.compute import arq_flow
from steward.compute import domain_xml
from steward.compute import events
from steward.compute import handles
from steward.compute import mdev as mdev_mod
from steward.compute import nova_devices
from steward.compute import request as req_mod
from steward.compute import scheduler
from steward.compute import state
from steward.drivers.pci import device_spec

LOG = logging.getLogger(__name__)


def _pid_alive(pid):
    if not pid or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Compute:
    """``api``: clients.StewardApi; ``placement``: clients.PlacementApi."""

    def __init__(self, conf, api, placement, store=None):
        self.conf = conf
        self.api = api
        self.placement = placement
        self.store = store or state.Store(conf.state_path)

    # -- boot --------------------------------------------------------------------------
    def boot(self, flavor, name):
        """Boot ``name`` with ``flavor`` (request.Flavor); returns the stored record
        (status active, with the claim, the bound ARQs and the domain XML)."""
        conf = self.conf
        # Everything that can be refused without side effects, first.
        state.check_name(name)
        device_spec.parse_all(conf.compute.nova_pci_device_spec, nova_devices.OPTION)
        profile = self.api.device_profile(flavor.device_profile) \
            if flavor.device_profile else None
        request = req_mod.build(flavor, profile, conf.compute.owner_nova_prefilter)
        listener = events.EventListener(conf.compute.events_listen) if profile else None
        host = scheduler.compute_node_name(conf)
        root = scheduler.find_compute_node(self.placement, host)
        record = self.store.create({
            'name': name, 'uuid': str(uuidlib.uuid4()), 'status': state.BUILDING,
            'pid': os.getpid(), 'host': host, 'compute_node': root,
            'flavor': flavor.to_dict(), 'device_profile': request.device_profile,
            'placement_query': request.query(in_tree=root), 'allocations': None,
            'mappings': None, 'providers': {}, 'arqs': [], 'bound_arqs': [], 'mdevs': [],
            'nova_device_conflicts': [], 'domain_xml': None, 'error': None,
            'created_at': state.now()})
        try:
            if listener is not None:
                listener.start()
            self._boot(record, request, listener)
        except BaseException as err:
            LOG.error('Boot of %s (%s) failed: %s', name, record['uuid'], err)
            self._abort(record, err)
            raise
        finally:
            if listener is not None:
                listener.stop()
        return record

    def _boot(self, record, request, listener):
        conf, inst = self.conf, record['uuid']
        scheduler.prepare_compute_node(self.placement, record['compute_node'],
                                       conf.state_path)
        claim = scheduler.claim(self.placement, request, inst, record['compute_node'])
        record.update(allocations=claim.allocations, mappings=claim.mappings,
                      providers={rp: claim.names.get(rp) for rp in claim.allocations})
        self.store.save(record)
        arqs = []
        if request.device_profile:
            arqs = self.api.create_arqs(request.device_profile)
            record['arqs'] = [a['uuid'] for a in arqs]
            self.store.save(record)
            matches = arq_flow.match(arqs, request, claim)
            timeout = conf.compute.arq_binding_timeout
            deadline = time.monotonic() + timeout
            listener.expect(inst, record['arqs'])
            arq_flow.bind(self.api, arqs, matches, record['host'], inst)
            arq_flow.wait_bound(self.api, listener, inst, record['arqs'], timeout)
            arqs = arq_flow.resolved(self.api, inst, record['arqs'], deadline)
        record['bound_arqs'] = arqs
        # The document first: it refuses unusable attach handles before any mdev
        # exists. The domain itself is defined from it after the mdevs (spec 5).
        flavor = record['flavor']
        xml = domain_xml.to_string(domain_xml.domain(
            record['name'], inst, flavor['vcpus'], flavor['ram'], arqs,
            domain_type=conf.compute.domain_type))
        record['nova_device_conflicts'] = nova_devices.check(
            arqs, conf.compute.nova_pci_device_spec, conf.sysfs_root, inst)
        by_type, _ = handles.split_by_type(arqs)
        if by_type[handles.MDEV]:
            backend = mdev_mod.backend(conf)
            for arq in by_type[handles.MDEV]:
                planned = backend.plan(handles.mdev(arq))
                record['mdevs'].append(planned)
                self.store.save(record)
                backend.create(planned)
        record.update(domain_xml=xml, status=state.ACTIVE, pid=None)
        self.store.save(record)

    def _abort(self, record, cause):
        failures = self._undo(record)
        if not failures:
            self.store.delete(record['name'])
            return
        record.update(status=state.ERROR, pid=None,
                      error=f'boot failed ({cause}); undo incomplete: '
                            + '; '.join(failures))
        self.store.save(record)
        raise exception.CleanupIncomplete(what='The failed boot', name=record['name'],
                                          failures='; '.join(failures)) from cause

    # -- delete ------------------------------------------------------------------------
    def delete(self, name):
        record = self.store.get(name)
        if record['status'] == state.BUILDING and _pid_alive(record.get('pid')):
            raise exception.InstanceBusy(name=record['name'], pid=record['pid'])
        failures = self._undo(record)
        if failures:
            record.update(status=state.ERROR, error='delete incomplete: '
                                                    + '; '.join(failures))
            self.store.save(record)
            raise exception.CleanupIncomplete(what='Deleting', name=record['name'],
                                              failures='; '.join(failures))
        self.store.delete(record['name'])
        LOG.info('Deleted instance %s (%s)', record['name'], record['uuid'])
        return record

    def _undo(self, record):
        """Undo what ``record`` holds, in reverse order of the boot; each step that
        succeeds is struck from the record. Returns the failures."""
        failures = []
        for planned in list(reversed(record['mdevs'])):
            try:
                if not planned.get('pre_existing'):
                    mdev_mod.for_record(self.conf, planned).remove(planned)
                record['mdevs'].remove(planned)
            except exception.ComputeError as err:
                failures.append(f'mdev {planned["uuid"]}: {err}')
        steps = [('allocation', lambda: scheduler.release(self.placement, record['uuid']),
                  {'allocations': None})]
        if record.get('device_profile'):
            steps.insert(0, ('ARQs', lambda: arq_flow.undo(self.api, record['uuid'],
                                                           record['arqs']),
                             {'arqs': [], 'bound_arqs': []}))
        for what, step, cleared in steps:
            try:
                step()
                record.update(cleared)
            except exception.ComputeError as err:
                failures.append(f'{what}: {err}')
        return failures
