"""Placement client that writes only what differs: the sync of Steward's device
providers, and the reads and single writes the conductor needs.

Every device becomes one child resource provider (RP) under the compute-node RP,
with one resource class, its traits and ``OWNER_CYBORG``. ``sync_provider`` makes
Placement match a ``ProviderSpec``. The client remembers, per RP, the generation,
name, parent, inventory and traits it last read or wrote (its ``ProviderCache``,
steward/placement/provider_cache.py):

* a spec equal to that memory costs no request at all;
* with no memory (a restart) it reads the RP, its inventory and its traits (three
  GETs) and writes only what differs, so a quiet cycle after a restart is reads only;
* the memory can go stale (Nova's allocations bump the generation); every write
  carries the remembered generation, so staleness shows up as a 409
  ``placement.concurrent_update``, after which the client re-reads and retries.

Thread-safe: one lock per RP uuid around each read-modify-write, so syncs of
different devices run in parallel.

``sync_providers`` does the same for all the providers of one host with fewer
requests (a first registration of 4 096 mdev types): providers missing from one
tree listing are created without being read, traits are written from a few
threads, inventories go in ``POST /reshaper`` chunks; whatever Placement refuses
goes through ``sync_provider``. ``set_reserved`` and ``add_traits`` change one
thing of one provider.

The requests themselves, and what Placement's answers mean as exceptions, are
steward/placement/transport.py's.
"""
from concurrent import futures
import dataclasses
import logging
import urllib.parse
import uuid as uuidlib

from steward.common import exception
from steward.placement import transport
from steward.placement.provider_cache import ProviderCache, SeenProvider

LOG = logging.getLogger(__name__)

OWNER_TRAIT = 'OWNER_CYBORG'
# One try plus three retries after a generation conflict.
_ATTEMPTS = 4
# Requests in flight at once in sync_providers: Placement serves them from threads;
# a few keep both it and this process busy without queueing on its database.
_WORKERS = 8
# Inventories per POST /reshaper (one Placement transaction, each provider locked
# here meanwhile), and the fewest changes worth one instead of a PUT each.
_RESHAPE_CHUNK = 1024
_RESHAPE_MIN = 4


@dataclasses.dataclass(frozen=True)
class ProviderSpec:
    """What one device's RP should look like in Placement.

    ``reserved=None`` keeps the reserved value Placement has (clamped to ``total``);
    ``'total'`` reserves the whole device; a value above ``total`` is clamped so a
    reservation survives a shrinking total. ``total <= 0`` means no inventory.
    ``reserved`` may also be a callable returning one of those: it is evaluated
    after Placement's generation was read, on every attempt, so when two conductors
    race the last writer writes the newest device state, not the one it saw first.
    """
    uuid: str
    name: str
    parent_uuid: str | None
    resource_class: str
    total: int
    traits: frozenset
    reserved: int | str | None = None
    max_unit: int | None = None

    def inventories(self, current):
        """The inventory document this spec wants, given Placement's ``current``."""
        if self.total <= 0:
            return {}
        wanted = self.reserved() if callable(self.reserved) else self.reserved
        if wanted == 'total':
            reserved = self.total
        elif wanted is not None:
            reserved = wanted
        else:
            reserved = current.get(self.resource_class, {}).get('reserved', 0)
        return {self.resource_class: {
            'total': self.total,
            'reserved': max(0, min(reserved, self.total)),
            'min_unit': 1,
            'max_unit': self.max_unit or self.total,
            'step_size': 1,
            'allocation_ratio': 1.0,
        }}


class PlacementClient:
    def __init__(self, adapter, host=None):
        self._http = transport.PlacementTransport(adapter)
        self._host = host
        self._cache = ProviderCache()
        self._reshape = True      # POST /reshaper allowed (until a 403 says not)

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

    def _retrying(self, rp_uuid, what, attempt_fn):
        """Run ``attempt_fn`` until it stops hitting generation conflicts."""
        for attempt in range(_ATTEMPTS):
            try:
                return attempt_fn()
            except exception.PlacementGenerationConflict:
                self._cache.forget(rp_uuid)
                if attempt == _ATTEMPTS - 1:
                    raise
                LOG.debug('Generation conflict on %s of %s; re-reading (attempt %d)',
                          what, rp_uuid, attempt + 1)
            except exception.PlacementError:
                # A timeout may have applied the write: trust Placement next time.
                self._cache.forget(rp_uuid)
                raise

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

    def compute_node_created(self, name, create=True):
        """(UUID of the root RP called ``name``, whether this call created it: then
        nothing is under it yet); created if missing and ``create``.

        A created root gets ``uuid5(NAMESPACE_DNS, name)``: deterministic, so two
        Steward processes racing to create it converge on one provider, and distinct
        from the ``uuid3`` names upstream Cyborg gives device RPs.
        """
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
        """Make Placement match ``spec``; returns the number of write requests made."""
        tally = [0]
        with self._cache.lock_for(spec.uuid):
            self._retrying(spec.uuid, 'sync', lambda: self._sync_once(spec, tally))
        return tally[0]

    def _sync_once(self, spec, tally, inventory=True):
        seen = self._cache.get(spec.uuid)
        if seen is None or not seen.complete:
            seen = self._load_for_sync(spec, tally)
        path = '/resource_providers/%s' % spec.uuid

        if seen.name != spec.name or seen.parent != spec.parent_uuid:
            # Re-parenting is allowed since 1.37; the generation is not checked here.
            rp = self._http.call('PUT', path, {'name': spec.name,
                                          'parent_provider_uuid': spec.parent_uuid},
                            tally=tally).json()
            LOG.info('Placement: provider %s renamed/re-parented to %s under %s',
                     spec.uuid, spec.name, spec.parent_uuid)
            seen = self._cache.remember(spec.uuid, seen, generation=rp['generation'],
                                        name=spec.name, parent=spec.parent_uuid)

        # Traits before inventory: a new RP must never be a candidate without its
        # traits, and OWNER_CYBORG marks it ours as early as possible.
        if seen.traits != spec.traits:
            self._ensure_traits(spec.traits - seen.traits, tally)
            body = self._http.call('PUT', path + '/traits',
                              {'resource_provider_generation': seen.generation,
                               'traits': sorted(spec.traits)}, tally=tally).json()
            LOG.info('Placement: provider %s traits %s -> %s', spec.name,
                     sorted(seen.traits), sorted(spec.traits))
            seen = self._cache.remember(spec.uuid, seen,
                                        generation=body['resource_provider_generation'],
                                        traits=frozenset(body['traits']))

        if not inventory:
            return
        wanted = spec.inventories(seen.inventories)
        if wanted != seen.inventories:
            if spec.resource_class in wanted and spec.resource_class not in seen.inventories:
                self._ensure_resource_class(spec.resource_class, tally)
            body = self._http.call('PUT', path + '/inventories',
                              {'resource_provider_generation': seen.generation,
                               'inventories': wanted}, tally=tally).json()
            LOG.info('Placement: provider %s inventory %s -> %s', spec.name,
                     seen.inventories, body['inventories'])
            self._cache.remember(spec.uuid, seen,
                                 generation=body['resource_provider_generation'],
                                 inventories=body['inventories'])

    def _load_for_sync(self, spec, tally):
        path = '/resource_providers/%s' % spec.uuid
        resp = self._http.call('GET', path, ok=(200, 404))
        if resp.status_code == 404:
            other = self.find_provider_by_name(spec.name)
            if other is not None:
                self._refuse_foreign(spec, other)
            try:
                rp = self._http.call('POST', '/resource_providers',
                                {'uuid': spec.uuid, 'name': spec.name,
                                 'parent_provider_uuid': spec.parent_uuid},
                                tally=tally).json()
            except exception.PlacementError as exc:
                if getattr(exc, 'http_status', None) != 409:
                    raise
                # Created meanwhile (another process syncing the same device, or a
                # foreign provider taking the name): re-read and judge again.
                raise exception.PlacementGenerationConflict(
                    call=exc.kwargs['call'], reason=exc.kwargs['reason']) from exc
            LOG.info('Placement: created provider %s (%s) under %s', spec.name,
                     spec.uuid, spec.parent_uuid)
            return self._cache.remember(spec.uuid, SeenProvider(rp['generation'], {}),
                                        name=spec.name, parent=spec.parent_uuid,
                                        traits=frozenset())
        rp = resp.json()
        inv = self._http.call('GET', path + '/inventories').json()
        traits = self._http.call('GET', path + '/traits').json()
        if inv['resource_provider_generation'] != traits['resource_provider_generation']:
            # Changed between the two reads: the pair is not one consistent state.
            raise exception.PlacementGenerationConflict(
                call='GET %s' % path, reason='provider changed while being read')
        seen = SeenProvider(inv['resource_provider_generation'], inv['inventories'],
                            name=rp['name'], parent=rp['parent_provider_uuid'],
                            traits=frozenset(traits['traits']))
        # Our uuid, but no OWNER_CYBORG: ours only if empty (a creation interrupted
        # before its traits were set); anything else belongs to another service.
        if OWNER_TRAIT not in seen.traits and (seen.traits or seen.inventories):
            raise exception.PlacementOwnershipConflict(
                name=rp['name'], call='sync %s' % spec.uuid, reason='not owned')
        self._cache.known_traits.update(seen.traits)
        self._cache.known_rcs.update(seen.inventories)
        return self._cache.remember(spec.uuid, seen)

    def _refuse_foreign(self, spec, other):
        """The name is taken by another uuid: never adopt or overwrite it."""
        traits = self._http.call('GET', '/resource_providers/%s/traits' % other['uuid']).json()
        if OWNER_TRAIT not in traits['traits']:
            raise exception.PlacementOwnershipConflict(
                name=spec.name, call='sync %s' % spec.uuid, reason='not owned')
        raise exception.PlacementProviderUuidConflict(
            name=spec.name, existing=other['uuid'], uuid=spec.uuid,
            call='sync %s' % spec.uuid, reason='uuid mismatch')

    def _ensure_traits(self, names, tally):
        # Standard traits come from os-traits and Placement syncs them at start.
        for name in sorted(names):
            if name.startswith('CUSTOM_') and name not in self._cache.known_traits:
                self._http.call('PUT', '/traits/%s' % name, ok=(201, 204), tally=tally)
                self._cache.known_traits.add(name)

    def _ensure_resource_class(self, rc, tally):
        if rc.startswith('CUSTOM_') and rc not in self._cache.known_rcs:
            self._http.call('PUT', '/resource_classes/%s' % rc, ok=(201, 204), tally=tally)
            self._cache.known_rcs.add(rc)

    # -- many device providers at once ------------------------------------------------
    def sync_providers(self, specs, tree=None, reserved_now=None):
        """Make Placement match every spec of one tree; returns (writes, {uuid: error}).

        What ``sync_provider`` does one provider at a time, with fewer requests: a
        provider absent from ``tree`` (``list_providers(in_tree=root)``, read here
        when None) is created without being read first (a new provider has
        generation 0, no traits, no inventory); traits go out in parallel; the
        inventories of many providers go in one ``POST /reshaper`` per chunk.
        ``reserved_now(specs)`` -> {uuid: reserved} evaluates the ``reserved`` of a
        chunk with one call, right before its write (as a spec's own callable
        would be). Anything unexpected (a 409, a name taken) sends that provider
        through ``sync_provider``, which re-reads and judges.
        """
        specs = list({s.uuid: s for s in specs}.values())
        errors, writes = {}, 0
        slow, known = [], []
        unknown = [s for s in specs
                   if not self._cache.complete(s.uuid)]
        if unknown:
            roots = {s.parent_uuid for s in unknown}
            if tree is None and len(roots) == 1 and None not in roots:
                try:
                    tree = self.list_providers(in_tree=roots.pop())
                except exception.PlacementError:
                    tree = None
            listed = {rp['uuid'] for rp in tree} if tree is not None else None
            to_create = [s for s in unknown if listed is not None and s.uuid not in listed]
            slow += [s for s in unknown if listed is None or s.uuid in listed]
            created = self._parallel(self._create_new, to_create)
            for spec, (ok, n) in zip(to_create, created):
                writes += n
                (known if ok else slow).append(spec)
        unknown = {s.uuid for s in unknown}
        known += [s for s in specs if s.uuid not in unknown]

        # Names shared by many providers: put once, before the parallel writes.
        tally = [0]
        try:
            self._ensure_traits(set().union(*(s.traits for s in known)), tally)
            for rc in sorted({s.resource_class for s in known if s.total > 0}):
                self._ensure_resource_class(rc, tally)
        except exception.PlacementError:
            slow += known
            known = []
        writes += tally[0]

        results = self._parallel(self._sync_names_traits, known)
        ready = []
        for spec, (ok, n) in zip(known, results):
            writes += n
            (ready if ok else slow).append(spec)
        if len(ready) < _RESHAPE_MIN:
            # Too few for a reshape: sync_provider writes what differs (it reads
            # nothing for a provider it knows) without a reserved_now for them.
            slow += ready
            ready = []
        for start in range(0, len(ready), _RESHAPE_CHUNK):
            n, failed = self._reshape_inventories(ready[start:start + _RESHAPE_CHUNK],
                                                  reserved_now)
            writes += n
            slow += failed

        for spec, (n, err) in zip(slow, self._parallel(self._sync_one, slow)):
            writes += n
            if err is not None:
                errors[spec.uuid] = err
        return writes, errors

    def _parallel(self, fn, specs):
        """[fn(spec) for spec in specs], at most _WORKERS requests in flight (the
        keystoneauth session and its connection pool are thread-safe)."""
        if len(specs) < 2:
            return [fn(s) for s in specs]
        with futures.ThreadPoolExecutor(min(_WORKERS, len(specs))) as pool:
            return list(pool.map(fn, specs))

    def _sync_one(self, spec):
        try:
            return self.sync_provider(spec), None
        except exception.StewardError as err:
            return 0, err

    def _create_new(self, spec):
        """(created?, writes): POST a provider the tree listing did not hold."""
        tally = [0]
        with self._cache.lock_for(spec.uuid):
            try:
                rp = self._http.call('POST', '/resource_providers',
                                {'uuid': spec.uuid, 'name': spec.name,
                                 'parent_provider_uuid': spec.parent_uuid},
                                tally=tally).json()
            except exception.PlacementError:
                # Created meanwhile, elsewhere in Placement, or its name is taken:
                # sync_provider finds out which.
                self._cache.forget(spec.uuid)
                return False, tally[0]
            LOG.info('Placement: created provider %s (%s) under %s', spec.name,
                     spec.uuid, spec.parent_uuid)
            self._cache.remember(spec.uuid, SeenProvider(rp['generation'], {}),
                                 name=spec.name, parent=spec.parent_uuid, traits=frozenset())
        return True, tally[0]

    def _sync_names_traits(self, spec):
        """(done?, writes): name, parent and traits of a provider known to the client."""
        tally = [0]
        try:
            with self._cache.lock_for(spec.uuid):
                self._retrying(spec.uuid, 'sync',
                               lambda: self._sync_once(spec, tally, inventory=False))
        except exception.StewardError:
            return False, tally[0]
        return True, tally[0]

    def _reshape_inventories(self, specs, reserved_now):
        """Write the inventories of ``specs`` that differ in one POST /reshaper;
        returns (writes, specs to hand to sync_provider)."""
        locks = [self._cache.lock_for(u) for u in sorted(s.uuid for s in specs)]
        for lock in locks:
            lock.acquire()
        # sync_provider gets the specs as given: their own reserved callable is read
        # again on each of its attempts, not the value read for this reshape.
        given = {s.uuid: s for s in specs}
        try:
            if reserved_now is not None:
                values = reserved_now(specs)
                specs = [dataclasses.replace(s, reserved=values[s.uuid])
                         if s.uuid in values else s for s in specs]
            changes = {}
            for spec in specs:
                seen = self._cache.get(spec.uuid)
                if seen is None or not seen.complete:
                    return 0, list(given.values())   # forgotten meanwhile
                wanted = spec.inventories(seen.inventories)
                if wanted != seen.inventories:
                    changes[spec.uuid] = (spec, seen, wanted)
            if len(changes) < _RESHAPE_MIN or not self._reshape:
                # A PUT per provider answers with the new generation; cheaper than
                # a reshape for a few.
                return 0, [given[uuid] for uuid in changes]
            body = {'inventories': {
                uuid: {'resource_provider_generation': seen.generation,
                       'inventories': wanted}
                for uuid, (_, seen, wanted) in changes.items()}, 'allocations': {}}
            try:
                self._http.call('POST', '/reshaper', body, ok=(204,))
            except exception.PlacementError as err:
                if getattr(err, 'http_status', None) == 403:
                    # Policy keeps the reshaper to the service role: not this
                    # client's, so one PUT per provider from now on.
                    self._reshape = False
                LOG.info('Placement: reshape of %d inventories not applied (%s); '
                         'writing them one by one', len(changes), err)
                for uuid in changes:
                    self._cache.forget(uuid)
                return 1, [given[uuid] for uuid in changes]
            LOG.info('Placement: inventories of %d providers written in one reshape',
                     len(changes))
            self._learn_generations(changes)
        finally:
            for lock in locks:
                lock.release()
        return 1, []

    def _learn_generations(self, changes):
        """A reshape answers 204 without generations: read them from one tree
        listing. Placement 16 bumps a provider twice per non-empty reshaped
        inventory (interim and final) and once for an empty one; a provider at any
        other generation was written by someone else too, and is forgotten (the
        next sync re-reads it) rather than remembered with a guess."""
        roots = {spec.parent_uuid for spec, _, _ in changes.values()}
        try:
            listed = {rp['uuid']: rp['generation'] for root in roots if root
                      for rp in self.list_providers(in_tree=root)}
        except exception.PlacementError:
            listed = {}
        for uuid, (_spec, seen, wanted) in changes.items():
            if listed.get(uuid) == seen.generation + (2 if wanted else 1):
                self._cache.remember(uuid, seen, generation=listed[uuid], inventories=wanted)
            else:
                self._cache.forget(uuid)

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

            return self._retrying(rp_uuid, 'set_reserved', attempt)

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
            self._ensure_traits(names - have, None)
            self._http.call('PUT', path, {
                'resource_provider_generation': body['resource_provider_generation'],
                'traits': sorted(have | names)})
            # The generation moved: what was remembered of the provider is stale.
            self._cache.forget(rp_uuid)
            LOG.info('Placement: provider %s traits %s + %s', rp_uuid, sorted(have),
                     sorted(names - have))
            return set(names - have)

        with self._cache.lock_for(rp_uuid):
            return self._retrying(rp_uuid, 'add_traits', attempt)

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

