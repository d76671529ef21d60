"""What the Placement client remembers of Placement, so an unchanged provider costs
no request.

Modelled on Nova's ``ProviderTree`` (nova/compute/provider_tree.py), which the
scheduler report client keeps for the same purpose: per resource provider (RP),
the generation, name, parent, inventory and traits last read from or written to
Placement (a ``SeenProvider``), found by uuid. Unlike Nova's, it does not hold the
tree's shape (the client lists a tree when it needs one) and it locks per provider,
not once for the whole tree, so syncs of different devices run in parallel.

Memory can go stale: Nova's allocations, an operator or another conductor move a
provider's generation. The client carries the remembered generation in every
write, so staleness shows as a 409, and it ``forget``s a provider whenever a write
fails or a read shows it moved (``drop_if_moved``); the next sync reads it again.
A sync that finds nothing to write sends nothing, so it never learns that a
provider was deleted meanwhile: the report forgets the providers of the
deployables it inserts, the moment another conductor's deletion is likely
(steward/conductor/report/placement_sync.py), and the drift repair those it
finds missing (steward/conductor/selfheal.py).

Also remembered: the custom resource classes and traits known to exist in
Placement, which saves a PUT of each per sync.
"""
import dataclasses
import threading


@dataclasses.dataclass(frozen=True)
class SeenProvider:
    """An RP as last read from or written to Placement.

    ``name``/``parent``/``traits`` are None when only the inventory is known (after a
    ``set_reserved`` on a provider this client had not synced); ``sync_provider``
    then reloads everything.
    """
    generation: int
    inventories: dict
    name: str | None = None
    parent: str | None = None
    traits: frozenset | None = None

    @property
    def complete(self):
        return self.traits is not None


class ProviderCache:
    """The ``SeenProvider`` of each RP the client knows, and one lock per RP uuid
    that its callers hold around each read-modify-write of that RP."""

    def __init__(self):
        self._seen = {}
        self._locks = {}
        self._locks_guard = threading.Lock()
        # Names known to exist in Placement.
        self.known_rcs = set()
        self.known_traits = set()

    def lock_for(self, rp_uuid):
        with self._locks_guard:
            return self._locks.setdefault(rp_uuid, threading.Lock())

    def get(self, rp_uuid):
        """The provider as last seen, or None."""
        return self._seen.get(rp_uuid)

    def complete(self, rp_uuid):
        """Whether everything a sync compares is remembered of ``rp_uuid``."""
        seen = self._seen.get(rp_uuid)
        return seen is not None and seen.complete

    def remember(self, rp_uuid, seen, **changes):
        """Remember ``seen`` with ``changes`` (SeenProvider fields) as the provider's
        state now; returns it."""
        seen = dataclasses.replace(seen, **changes)
        self._seen[rp_uuid] = seen
        return seen

    def forget(self, rp_uuid=None):
        """Drop what is remembered of one provider (all with None)."""
        if rp_uuid is None:
            self._seen.clear()
        else:
            self._seen.pop(rp_uuid, None)

    def drop_if_moved(self, rp_uuid, generation):
        """Forget a provider whose generation moved under us (someone else wrote)."""
        with self.lock_for(rp_uuid):
            seen = self._seen.get(rp_uuid)
            if seen is not None and seen.generation != generation:
                del self._seen[rp_uuid]

    def inventory_at(self, rp_uuid, generation):
        """The inventories last seen of ``rp_uuid`` if Placement's ``generation`` is
        still the one they were seen at (Placement moves it on every change of the
        provider), else None."""
        seen = self._seen.get(rp_uuid)
        if seen is None or seen.generation != generation:
            return None
        return seen.inventories
