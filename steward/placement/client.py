"""The Placement client of a conductor: the reads it needs, the compute-node
provider, the sync of Steward's device providers, and the single writes
(``set_reserved``, ``add_traits``, ``delete_provider``), each writing only what
differs.

The jobs behind it, one module each:

* steward/placement/transport.py: the requests, and what Placement's answers mean
  as exceptions;
* steward/placement/provider_cache.py: what the client remembers of each provider
  (generation, name, parent, inventory, traits), so an unchanged one costs no
  request;
* steward/placement/provider_sync.py: one provider made to match its
  ``ProviderSpec`` (``sync_provider``), and the retry on a generation conflict
  that every read-modify-write of one provider goes through;
* steward/placement/tree_sync.py: all the providers of one host's tree at once
  (``sync_providers``), with fewer requests.

Thread-safe: one lock per provider uuid around each read-modify-write.
"""
import dataclasses
import logging
import urllib.parse
import uuid as uuidlib

from steward.common import exception
from steward.placement import provider_sync
from steward.placement import transport
from steward.placement import tree_sync
from steward.placement.provider_cache import ProviderCache, SeenProvider

LOG = logging.getLogger(__name__)


class PlacementClient:
    def __init__(self, adapter, host=None):
        self._http = transport.PlacementTransport(adapter)
        self._host = host
        self._cache = ProviderCache()
        self._provider_sync = provider_sync.ProviderSync(self._http, self._cache,
                                                         self.find_provider_by_name)
        self._tree_sync = tree_sync.TreeSync(self._http, self._cache,
                                             self._provider_sync, self.list_providers)

    @classmethod
    def from_conf(cls, conf=None, endpoint=None):
        """A client for ``endpoint`` (embedded Placement, noauth2) or from ``[placement]``."""
        if conf is None:
            from steward.conf import CONF as conf
        adapter = transport.build_adapter(conf, endpoint)
        return cls(adapter, host=getattr(conf, 'host', None))

    @property
    def stats(self):
        """Requests made: {'reads', 'writes', 'errors'} (transport.PlacementTransport)."""
        return self._http.stats

    # -- reads ----------------------------------------------------------------------
    def list_providers(self, in_tree=None, name=None, required=None):
        query = {k: v for k, v in (('in_tree', in_tree), ('name', name),
                                   ('required', required)) if v}
        path = '/resource_providers'
        if query:
            path += '?' + urllib.parse.urlencode(query)
        return self._http.call('GET', path).json()['resource_providers']

    def find_provider_by_name(self, name):
        found = self.list_providers(name=name)
        return found[0] if found else None

    def remembered_inventory(self, rp_uuid, generation):
        """The inventories this client last read or wrote for ``rp_uuid`` if
        Placement's ``generation`` is still the one they were seen at (Placement
        moves it on every change of the provider), else None."""
        return self._cache.inventory_at(rp_uuid, generation)

    def get_provider(self, rp_uuid):
        """The provider's document (uuid, name, generation, parent and root
        uuids); PlacementError with http_status 404 when it does not exist."""
        return self._http.call('GET', '/resource_providers/%s' % rp_uuid).json()

    def get_inventory(self, rp_uuid):
        body = self._http.call('GET', '/resource_providers/%s/inventories' % rp_uuid).json()
        self._cache.drop_if_moved(rp_uuid, body['resource_provider_generation'])
        return body['inventories']

    def read_inventory(self, rp_uuid):
        """The provider's inventories, read, and remembered at the generation read
        unless everything of it is remembered at that generation already: the
        drift repair's next run then compares from memory instead of reading
        again (steward/conductor/selfheal.py; at 10 000 providers, two conductors
        each re-read every provider the other one had registered, every run)."""
        body = self._http.call('GET', '/resource_providers/%s/inventories' % rp_uuid).json()
        generation = body['resource_provider_generation']
        with self._cache.lock_for(rp_uuid):
            seen = self._cache.get(rp_uuid)
            if seen is None or seen.generation != generation:
                # Only the inventory is known: a sync reads the rest first.
                self._cache.remember(rp_uuid, SeenProvider(generation, body['inventories']))
        return body['inventories']

    def get_traits(self, rp_uuid):
        body = self._http.call('GET', '/resource_providers/%s/traits' % rp_uuid).json()
        self._cache.drop_if_moved(rp_uuid, body['resource_provider_generation'])
        return set(body['traits'])

    def get_usages(self, rp_uuid):
        body = self._http.call('GET', '/resource_providers/%s/usages' % rp_uuid).json()
        self._cache.drop_if_moved(rp_uuid, body['resource_provider_generation'])
        return body['usages']

    def forget(self, rp_uuid=None):
        """Drop what is remembered of one provider (all with None).

        Changes made behind the client's back are only noticed when a write fails or
        a get_* sees a new generation; forgetting makes the next sync re-read.
        """
        self._cache.forget(rp_uuid)

    # -- compute node ---------------------------------------------------------------
    def ensure_compute_node(self, name, create=True):
        """UUID of the root RP called ``name``; created if missing and ``create``.
        See compute_node_created."""
        return self.compute_node_created(name, create)[0]

    def compute_node_created(self, name, create=True, absent=False):
        """(UUID of the root RP called ``name``, whether this call created it: then
        nothing is under it yet); created if missing and ``create``.

        A created root gets ``uuid5(NAMESPACE_DNS, name)``: deterministic, so two
        Steward processes racing to create it converge on one provider, and distinct
        from the ``uuid3`` names upstream Cyborg gives device RPs.

        ``absent``: the caller expects no such provider (a host Steward has no row
        of): it is created without being looked up first, and looked up only when
        Placement answers that the name or uuid is taken.
        """
        if not (absent and create):
            rp = self.find_provider_by_name(name)
            if rp is not None:
                return rp['uuid'], False
        if not create:
            raise exception.PlacementProviderNotFound(name=name, host=self._host or name)
        rp_uuid = str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, name))
        resp = self._http.call('POST', '/resource_providers', {'name': name, 'uuid': rp_uuid},
                          ok=(200, 409))
        if resp.status_code == 200:
            LOG.info('Created compute-node resource provider %s (%s)', name, rp_uuid)
            return rp_uuid, True
        # 409: somebody (Nova, another Steward thread) created it meanwhile.
        rp = self.find_provider_by_name(name)
        if rp is not None:
            return rp['uuid'], False
        raise exception.PlacementError(
            call='POST /resource_providers',
            reason='HTTP 409: %s' % transport.error_of(resp)[1])

    # -- device providers -----------------------------------------------------------
    def sync_provider(self, spec):
        """Make Placement match ``spec`` (a provider_sync.ProviderSpec); returns the
        number of write requests made (steward/placement/provider_sync.py)."""
        return self._provider_sync.sync(spec)

    def sync_providers(self, specs, tree=None, reserved_now=None):
        """Make Placement match every spec of one tree; returns (writes, {uuid:
        error}). A provider absent from ``tree`` (``list_providers(in_tree=root)``,
        read when None) is created without being read first; ``reserved_now(specs)``
        -> {uuid: reserved} evaluates the ``reserved`` of a chunk with one call,
        right before its write (steward/placement/tree_sync.py)."""
        return self._tree_sync.sync(specs, tree=tree, reserved_now=reserved_now)

    def set_reserved(self, rp_uuid, resource_class, reserved):
        """Set ``reserved`` (an int or 'total', or a callable returning one, evaluated
        after the generation is read on each attempt) on one RC, keeping its total.

        Correctness beats saving a request: when the remembered state says the value
        is already there, the client confirms with a GET (memory can be stale) and
        writes nothing if Placement agrees; otherwise it PUTs with the remembered
        generation, which Placement itself validates. Returns the reserved value set.
        """
        def wanted():
            value = reserved() if callable(reserved) else reserved
            if value != 'total' and (not isinstance(value, int) or value < 0):
                raise exception.Invalid(reason='reserved must be a non-negative int '
                                               "or 'total', not %r" % (value,))
            return value

        if not callable(reserved):
            wanted()
        path = '/resource_providers/%s/inventories' % rp_uuid
        with self._cache.lock_for(rp_uuid):
            state = {'fresh': False}

            def attempt():
                seen = self._cache.get(rp_uuid)
                if seen is None:
                    seen, state['fresh'] = self._reload_inventory(rp_uuid), True
                inv = seen.inventories.get(resource_class)
                if inv is None:
                    raise exception.PlacementError(
                        call='set_reserved %s' % rp_uuid,
                        reason='provider has no %s inventory' % resource_class)
                value = wanted()
                target = inv['total'] if value == 'total' else value
                if inv['reserved'] == target:
                    if state['fresh']:
                        return target
                    seen, state['fresh'] = self._reload_inventory(rp_uuid), True
                    return attempt()
                record = dict(inv, reserved=target,
                              resource_provider_generation=seen.generation)
                body = self._http.call('PUT', '%s/%s' % (path, resource_class), record).json()
                generation = body.pop('resource_provider_generation')
                LOG.info('Placement: provider %s %s reserved %s -> %s', rp_uuid,
                         resource_class, inv['reserved'], body['reserved'])
                self._cache.remember(rp_uuid, seen, generation=generation,
                                     inventories=dict(seen.inventories, **{resource_class: body}))
                return body['reserved']

            return provider_sync.retrying(self._cache, rp_uuid, 'set_reserved', attempt)

    def add_traits(self, rp_uuid, names):
        """Add ``names`` to a provider's traits, keeping every trait it has (another
        service's too) and nothing else of it; returns the names added, an empty set
        when it had them all (then no write). For a provider Steward does not sync
        yet (adopting one, steward db import-cyborg): sync_provider would also
        rewrite its name and inventory. A provider not in Placement raises
        PlacementError with http_status 404."""
        names = frozenset(names)
        path = '/resource_providers/%s/traits' % rp_uuid

        def attempt():
            body = self._http.call('GET', path).json()
            have = frozenset(body['traits'])
            if names <= have:
                return set()
            self._provider_sync.ensure_traits(names - have, None)
            self._http.call('PUT', path, {
                'resource_provider_generation': body['resource_provider_generation'],
                'traits': sorted(have | names)})
            # The generation moved: what was remembered of the provider is stale.
            self._cache.forget(rp_uuid)
            LOG.info('Placement: provider %s traits %s + %s', rp_uuid, sorted(have),
                     sorted(names - have))
            return set(names - have)

        with self._cache.lock_for(rp_uuid):
            return provider_sync.retrying(self._cache, rp_uuid, 'add_traits', attempt)

    def _reload_inventory(self, rp_uuid):
        body = self._http.call('GET', '/resource_providers/%s/inventories' % rp_uuid).json()
        generation = body['resource_provider_generation']
        seen = self._cache.get(rp_uuid)
        if seen is not None and seen.generation == generation:
            seen = dataclasses.replace(seen, inventories=body['inventories'])
        else:
            # Someone else wrote: what we knew of its traits may be wrong too.
            seen = SeenProvider(generation, body['inventories'])
        return self._cache.remember(rp_uuid, seen)

    # -- moving allocations (issue 52: devices moving onto pools) --------------------
    def provider_allocations(self, rp_uuid):
        """{consumer uuid: {resource class: amount}} on ``rp_uuid``."""
        body = self._http.call('GET', '/resource_providers/%s/allocations' % rp_uuid).json()
        self._cache.drop_if_moved(rp_uuid, body['resource_provider_generation'])
        return {c: a['resources'] for c, a in body['allocations'].items()}

    def consumer_allocations(self, consumer):
        """A consumer's whole allocation document (every provider, its project,
        user, type and generation), as ``POST /reshaper`` takes it back."""
        return self._http.call('GET', '/allocations/%s' % consumer).json()

    def provider_generation(self, rp_uuid):
        return self._http.call('GET', '/resource_providers/%s' % rp_uuid).json()['generation']

    def reshape(self, inventories, allocations, touched):
        """One ``POST /reshaper``: ``inventories`` {rp: {'resource_provider_generation',
        'inventories'}} and ``allocations`` {consumer: its whole document} in one
        Placement transaction, all or nothing (a concurrent change is a 409:
        PlacementGenerationConflict). ``touched``: the providers to forget after."""
        try:
            self._http.call('POST', '/reshaper', {'inventories': inventories,
                                                 'allocations': allocations}, ok=(204,))
        finally:
            for rp_uuid in touched:
                self._cache.forget(rp_uuid)

    def delete_provider(self, rp_uuid):
        """Delete ``rp_uuid`` and its descendants, deepest first; returns how many.

        A provider already gone is fine; one with allocations raises
        PlacementProviderInUse (earlier deletions of descendants stand).
        """
        tree = self.list_providers(in_tree=rp_uuid)   # the whole tree, from its root
        children = {}
        for rp in tree:
            children.setdefault(rp['parent_provider_uuid'], []).append(rp['uuid'])
        order = []

        def visit(node):
            for child in sorted(children.get(node, ())):
                visit(child)
            order.append(node)

        if any(rp['uuid'] == rp_uuid for rp in tree):
            visit(rp_uuid)
        deleted = 0
        for node in order:
            with self._cache.lock_for(node):
                try:
                    resp = self._http.call('DELETE', '/resource_providers/%s' % node,
                                      ok=(204, 404))
                except exception.PlacementError as exc:
                    if getattr(exc, 'placement_code', None) == \
                            'placement.resource_provider.inuse':
                        raise exception.PlacementProviderInUse(
                            uuid=node, call='DELETE /resource_providers/%s' % node,
                            reason=exc.msg) from exc
                    raise
                finally:
                    self._cache.forget(node)
            if resp.status_code == 204:
                deleted += 1
                LOG.info('Placement: deleted provider %s', node)
        return deleted

