"""Deployables as Placement sees them: the one rule that makes resource providers
of a host's deployables, for every path that writes them (a report's sync,
first registrations in a batch, the drift repair).

A deployable is its own provider (named after it, uuid3 of its name, as
upstream) unless its driver put it in a pool (issue 52): the ``pool`` attribute
(steward/drivers/objects.py POOL_KEY) names the pool, and the deployables of one
host that share it are ONE provider, named after the pool, uuid3 of that name,
whose total is the sum of their accelerators. Each keeps its own row, device,
state and handles; the bind gives each ARQ a free device of the pool
(steward/arqs/ops.py) and the pool's ``reserved`` counts its devices
out of service (steward/arqs/reservation.py).
"""
import dataclasses
import uuid as uuidlib

import os_traits

from steward.drivers.objects import POOL_KEY


def rp_uuid_for(name):
    """A device provider's uuid: uuid3 of its name (the deployable's, or its
    pool's), as upstream, so an existing cloud's providers are adopted rather
    than duplicated."""
    return str(uuidlib.uuid3(uuidlib.NAMESPACE_DNS, name))


def provider_name(name, pool):
    """The provider of a deployable named ``name`` in ``pool`` (None: none)."""
    return pool or name


def reported_rp_uuid(rep):
    """The provider a reported deployable (DriverDeployable) belongs to: its
    pool's or its own."""
    return rp_uuid_for(provider_name(rep.name, rep.pool))


@dataclasses.dataclass(frozen=True)
class Member:
    """One deployable with a provider, as that provider needs it."""
    deployable_id: int
    rp_uuid: str
    name: str               # the provider's: the pool's, else the deployable's
    resource_class: str
    traits: frozenset
    num_accelerators: int

    @classmethod
    def of(cls, deployable_id, rp_uuid, name, num_accelerators, pairs):
        """``pairs``: the deployable's attributes as (key, value); None when it
        has no provider or no resource class (nothing to offer)."""
        attrs = dict(pairs)
        rc = attrs.get('rc')
        if rc is None or not rp_uuid:
            return None
        traits = {v for k, v in attrs.items() if k.startswith('trait')}
        traits.add(os_traits.OWNER_CYBORG)
        pool = attrs.get(POOL_KEY)
        if pool and rp_uuid != rp_uuid_for(pool):
            # Not on its pool yet (in use while its entry was tagged: it moves
            # with its instance's allocation, report/reshape.py): still its own.
            pool = None
        return cls(deployable_id, rp_uuid, provider_name(name, pool), rc,
                   frozenset(traits), num_accelerators)

    @classmethod
    def of_row(cls, dep, attributes):
        """A deployable row with its Attribute rows (in id order: the last value
        of a key counts)."""
        return cls.of(dep.id, dep.rp_uuid, dep.name, dep.num_accelerators,
                      [(a.key, a.value) for a in attributes])


@dataclasses.dataclass(frozen=True)
class Provider:
    rp_uuid: str
    name: str
    resource_class: str
    traits: frozenset
    total: int
    deployable_ids: tuple

    def spec(self, root, reserved):
        """Its steward.placement.provider_sync.ProviderSpec under ``root``;
        ``reserved``: the value or a callable read when it is written."""
        from steward.placement.provider_sync import ProviderSpec
        return ProviderSpec(uuid=self.rp_uuid, name=self.name, parent_uuid=root,
                            resource_class=self.resource_class, total=self.total,
                            traits=self.traits, reserved=reserved)


def group(members):
    """Providers of ``members`` (Member or None), one per rp_uuid, in the order
    of their first member. A pool's members agree on class and traits by
    construction (they are its key); its total is their accelerators."""
    by_rp = {}
    for member in members:
        if member is not None:
            by_rp.setdefault(member.rp_uuid, []).append(member)
    out = []
    for rp_uuid, found in by_rp.items():
        first = found[0]
        out.append(Provider(rp_uuid, first.name, first.resource_class, first.traits,
                            sum(m.num_accelerators for m in found),
                            tuple(m.deployable_id for m in found)))
    return out
