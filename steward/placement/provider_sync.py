"""One device's resource provider made to match what Steward wants of it.

Every device becomes one child resource provider (RP) under the compute-node RP,
with one resource class, its traits and ``OWNER_CYBORG``: a ``ProviderSpec``.
``ProviderSync.sync`` makes Placement match one spec, using what the client
remembers of the RP (its ``ProviderCache``, steward/placement/provider_cache.py):

* a spec equal to that memory costs no request at all;
* with no memory (a restart) it reads the RP, its inventory and its traits (three
  GETs) and writes only what differs, so a quiet cycle after a restart is reads only;
* the memory can go stale (Nova's allocations bump the generation); every write
  carries the remembered generation, so staleness shows up as a 409
  ``placement.concurrent_update``, after which it re-reads and retries
  (``retrying``, which the client's single writes use too).

Thread-safe: one lock per RP uuid around each read-modify-write, so syncs of
different devices run in parallel. The client (steward/placement/client.py)
holds one ``ProviderSync``; its ``sync_provider`` is this module's ``sync``, and
the sync of many providers at once (steward/placement/tree_sync.py) sends here
whatever it cannot do in bulk.
"""
import dataclasses
import logging
import random
import time

from steward.common import exception
from steward.placement.provider_cache import SeenProvider

LOG = logging.getLogger(__name__)

OWNER_TRAIT = 'OWNER_CYBORG'
# One try plus three retries after a generation conflict.
_ATTEMPTS = 4
# The first conflict is mostly a stale memory (Nova's allocations bump the
# generation): re-read at once. Writers that conflict again are racing each
# other and would collide in step; a random wait, longer after each conflict
# (Nova's report client does the same), spreads them apart. Seconds per retry.
_BACKOFF = 0.1


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


def retrying(cache, rp_uuid, what, attempt_fn):
    """Run ``attempt_fn`` until it stops hitting generation conflicts, forgetting
    what ``cache`` (the client's ProviderCache) remembers of ``rp_uuid`` after
    each conflict or failure: every read-modify-write of one provider goes
    through it (a sync here, ``set_reserved`` and ``add_traits`` of the client)."""
    for attempt in range(_ATTEMPTS):
        try:
            return attempt_fn()
        except exception.PlacementGenerationConflict:
            cache.forget(rp_uuid)
            if attempt == _ATTEMPTS - 1:
                raise
            LOG.debug('Generation conflict on %s of %s; re-reading (attempt %d)',
                      what, rp_uuid, attempt + 1)
            time.sleep(random.uniform(0, _BACKOFF * attempt))
        except exception.PlacementError:
            # A timeout may have applied the write: trust Placement next time.
            cache.forget(rp_uuid)
            raise


class ProviderSync:
    """Syncs of single providers through ``http`` (a
    transport.PlacementTransport) with ``cache`` (the client's ProviderCache);
    ``find_by_name(name)``: the provider called ``name``, or None (the client's
    ``find_provider_by_name``)."""

    def __init__(self, http, cache, find_by_name):
        self._http = http
        self._cache = cache
        self._find_by_name = find_by_name

    def sync(self, spec):
        """Make Placement match ``spec``; returns the number of write requests made."""
        tally = [0]
        with self._cache.lock_for(spec.uuid):
            retrying(self._cache, spec.uuid, 'sync', lambda: self.sync_once(spec, tally))
        return tally[0]

    def sync_once(self, spec, tally, inventory=True):
        """One attempt of ``sync`` (the caller holds the provider's lock and retries
        on a conflict), ``inventory=False``: name, parent and traits only; the
        write requests made are added to ``tally[0]``."""
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
            self.ensure_traits(spec.traits - seen.traits, tally)
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
                self.ensure_resource_class(spec.resource_class, tally)
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
            other = self._find_by_name(spec.name)
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

    def ensure_traits(self, names, tally):
        """PUT the custom traits of ``names`` not known to exist in Placement."""
        # Standard traits come from os-traits and Placement syncs them at start.
        for name in sorted(names):
            if name.startswith('CUSTOM_') and name not in self._cache.known_traits:
                self._http.call('PUT', '/traits/%s' % name, ok=(201, 204), tally=tally)
                self._cache.known_traits.add(name)

    def ensure_resource_class(self, rc, tally):
        """PUT ``rc`` when custom and not known to exist in Placement."""
        if rc.startswith('CUSTOM_') and rc not in self._cache.known_rcs:
            self._http.call('PUT', '/resource_classes/%s' % rc, ok=(201, 204), tally=tally)
            self._cache.known_rcs.add(rc)
