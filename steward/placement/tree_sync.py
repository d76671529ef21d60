"""The sync of all the device providers of one host's tree at once, with fewer
requests than one ``sync_provider`` each (a first registration of 4 096 mdev
types): providers missing from one tree listing are created without being read,
names and traits are written from a few threads, inventories go in
``POST /reshaper`` chunks; whatever Placement refuses goes through the single
provider's sync (steward/placement/provider_sync.py), which re-reads and judges.

The client (steward/placement/client.py) holds one ``TreeSync``; its
``sync_providers`` is this module's ``sync``.
"""
from concurrent import futures
import dataclasses
import logging

from steward.common import exception
from steward.placement import provider_sync
from steward.placement.provider_cache import SeenProvider

LOG = logging.getLogger(__name__)

# Requests in flight at once in sync_providers: Placement serves them from threads;
# a few keep both it and this process busy without queueing on its database.
_WORKERS = 8
# Inventories per POST /reshaper (one Placement transaction, each provider locked
# here meanwhile), and the fewest changes worth one instead of a PUT each.
_RESHAPE_CHUNK = 1024
_RESHAPE_MIN = 4


class TreeSync:
    """Syncs of many providers through ``http`` (a transport.PlacementTransport)
    with ``cache`` (the client's ProviderCache), handing what it cannot do in bulk
    to ``single`` (the client's provider_sync.ProviderSync); ``list_providers``:
    the client's (``list_providers(in_tree=root)``: the providers of a tree)."""

    def __init__(self, http, cache, single, list_providers):
        self._http = http
        self._cache = cache
        self._single = single
        self._list_providers = list_providers
        self._reshape = True      # POST /reshaper allowed (until a 403 says not)

    def sync(self, specs, tree=None, reserved_now=None):
        """Make Placement match every spec of one tree; returns (writes, {uuid: error}).

        What the single provider's sync does one provider at a time, with fewer
        requests: a provider absent from ``tree`` (``list_providers(in_tree=root)``,
        read here when None) is created without being read first (a new provider
        has generation 0, no traits, no inventory); traits go out in parallel; the
        inventories of many providers go in one ``POST /reshaper`` per chunk.
        ``reserved_now(specs)`` -> {uuid: reserved} evaluates the ``reserved`` of a
        chunk with one call, right before its write (as a spec's own callable
        would be). Anything unexpected (a 409, a name taken) sends that provider
        through the single provider's sync, which re-reads and judges.
        """
        specs = list({s.uuid: s for s in specs}.values())
        errors, writes = {}, 0
        slow, known = [], []
        # Created by this call: nobody else has written them (module doc of
        # _learn_generations).
        fresh = set()
        unknown = [s for s in specs
                   if not self._cache.complete(s.uuid)]
        if unknown:
            roots = {s.parent_uuid for s in unknown}
            if tree is None and len(roots) == 1 and None not in roots:
                try:
                    tree = self._list_providers(in_tree=roots.pop())
                except exception.PlacementError:
                    tree = None
            listed = {rp['uuid'] for rp in tree} if tree is not None else None
            to_create = [s for s in unknown if listed is not None and s.uuid not in listed]
            slow += [s for s in unknown if listed is None or s.uuid in listed]
            created = self._parallel(self._create_new, to_create)
            for spec, (ok, n) in zip(to_create, created):
                writes += n
                (known if ok else slow).append(spec)
                if ok:
                    fresh.add(spec.uuid)
        unknown = {s.uuid for s in unknown}
        known += [s for s in specs if s.uuid not in unknown]

        # Names shared by many providers: put once, before the parallel writes.
        tally = [0]
        try:
            self._single.ensure_traits(set().union(*(s.traits for s in known)), tally)
            for rc in sorted({s.resource_class for s in known if s.total > 0}):
                self._single.ensure_resource_class(rc, tally)
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
                                                  reserved_now, fresh)
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
            return self._single.sync(spec), None
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
                provider_sync.retrying(
                    self._cache, spec.uuid, 'sync',
                    lambda: self._single.sync_once(spec, tally, inventory=False))
        except exception.StewardError:
            return False, tally[0]
        return True, tally[0]

    def _reshape_inventories(self, specs, reserved_now, fresh=frozenset()):
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
            self._learn_generations(changes, fresh)
        finally:
            for lock in locks:
                lock.release()
        return 1, []

    def _learn_generations(self, changes, fresh=frozenset()):
        """A reshape answers 204 without generations: read them from one tree
        listing. Placement 16 bumps a provider twice per non-empty reshaped
        inventory (interim and final) and once for an empty one; a provider at any
        other generation was written by someone else too, and is forgotten (the
        next sync re-reads it) rather than remembered with a guess.

        ``fresh``: providers this sync created a moment ago, under its lock, with no
        inventory, so with no allocation and nothing for Nova to write: their
        generation is the one counted, without a listing per tree (a first
        registration of many hosts would list every host's tree). A count gone
        wrong costs one 409 and a re-read at the next write."""
        for uuid in [u for u in changes if u in fresh]:
            _spec, seen, wanted = changes.pop(uuid)
            self._cache.remember(uuid, seen, generation=seen.generation +
                                 (2 if wanted else 1), inventories=wanted)
        if not changes:
            return
        roots = {spec.parent_uuid for spec, _, _ in changes.values()}
        try:
            listed = {rp['uuid']: rp['generation'] for root in roots if root
                      for rp in self._list_providers(in_tree=root)}
        except exception.PlacementError:
            listed = {}
        for uuid, (_spec, seen, wanted) in changes.items():
            if listed.get(uuid) == seen.generation + (2 if wanted else 1):
                self._cache.remember(uuid, seen, generation=listed[uuid], inventories=wanted)
            else:
                self._cache.forget(uuid)
