"""Periodic repairs of what a failure elsewhere left behind (run with the
conductor's other periodic tasks, steward/conductor/periodic.py):

* stale Initial ARQs: an accelerator request still ``Initial`` with no instance
  ``[conductor] initial_arq_max_age`` seconds after it was created is deleted.
  A create whose answer was lost (the API or its worker died after the commit,
  the client gave up) leaves one that no client knows; Nova binds what it
  creates within seconds, so only a leak gets that old.
* Placement drift: each device provider's inventory, traits and ``reserved`` in
  Placement is compared with what Steward's rows ask for
  (steward/arqs/reservation.py) and put back in line. A write that failed
  while Placement was unreachable (the reservation lifted by a release, set by
  a disable) is thereby retried every run until it holds, and a change made
  behind Steward's back is undone.

Every repair is one log line and one count of ``steward_healed_total{what}``.
Both are compare-and-swap or read-again-when-written, so several conductors may
run them at once and a bind or release racing them wins.
"""
import dataclasses
import datetime
import functools
import logging

from oslo_db import exception as db_exc
import oslo_messaging as messaging
import os_traits
from oslo_utils import timeutils
import sqlalchemy as sa

from steward.arqs import device_ops
from steward.arqs import reservation
from steward.common import exception
from steward.common import states
from steward.conductor.report import providers
from steward.conf import CONF
from steward.db import arqs as arq_db
from steward.db import attributes as attribute_db
from steward.db import discoveries
from steward.db import models as m
from steward.db import retry
from steward.db import transitions

LOG = logging.getLogger(__name__)


def _contained(task):
    """An unforeseen error of ``task`` is logged with its traceback and the run
    goes on: raised into the periodic worker it would end the worker's thread,
    and every periodic task with it. Expected failures (an outage) go up to the
    worker, which logs them in one line."""
    @functools.wraps(task)
    def run(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        except (exception.StewardError, db_exc.DBError, sa.exc.DBAPIError,
                messaging.MessagingException):
            raise
        except Exception:  # noqa: BLE001 - a bug here must not stop the other tasks
            LOG.exception('Periodic task %s failed; the other tasks go on',
                          task.__name__)
            return []
    return run


# -- stale Initial ARQs -----------------------------------------------------------------
@_contained
def remove_stale_initial_arqs(deps, ctx, now=None):
    """Delete the ARQs Initial with no instance for longer than [conductor]
    initial_arq_max_age; returns their uuids."""
    max_age = CONF.conductor.initial_arq_max_age
    cutoff = (now or timeutils.utcnow()) - datetime.timedelta(seconds=max_age)
    with deps.database.reader() as s:
        stale = [a.uuid for a in arq_db.arq_list(s, states_in=[states.ARQ_INITIAL])
                 if a.instance_uuid is None and _last_change(a) <= cutoff]
    if not stale:
        return []
    removed = _remove_initial(deps, ctx, stale, cutoff)
    for uuid in removed:
        LOG.warning('ARQ %s: Initial with no instance for over %ss (its create was '
                    'never answered, or its client forgot it); deleted', uuid,
                    max_age)
    if removed:
        deps.metrics.healed('initial_arq_removed', len(removed))
    return removed


def _last_change(arq):
    return arq.updated_at or arq.created_at


@retry.on_deadlock
def _remove_initial(deps, ctx, uuids, cutoff):
    """Only rows still Initial, instance-less and old when locked: a bind that
    got there first keeps its ARQ. An Initial ARQ holds no handle: removing the
    row releases nothing."""
    removed = []
    with deps.database.writer() as s:
        for arq in arq_db.arq_list_by_uuids_in_state(s, uuids, states.ARQ_INITIAL):
            if arq.instance_uuid is not None or _last_change(arq) > cutoff:
                continue
            transitions.advance(s, m.ExtARQ, arq, states.ARQ_DELETING, event='delete',
                                reason='initial_arq_max_age', request_id=ctx.request_id)
            arq_db.arq_remove(s, arq.id)
            removed.append(arq.uuid)
    return removed


# -- Placement drift --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Provider:
    """One provider as Steward's rows want it (of one deployable, or of a pool:
    ``deployable_id`` is then its first, whose current_reserved is the pool's)."""
    deployable_id: int
    rp_uuid: str
    name: str
    host: str
    resource_class: str
    total: int
    traits: frozenset
    reserved: object        # int, or None: whatever Placement has


def _wanted_providers(deps):
    with deps.database.reader() as s:
        rows = discoveries.provider_deployables(s)
        # Every deployable counts (reservation.py's rule), with a provider or not.
        counts = discoveries.accelerators_by_device(s)
        in_use = discoveries.handles_in_use_by_device(s)
        attrs = attribute_db.attributes_by_deployable(s, [d.id for d, _ in rows])
        by_rp = {}
        for dep, device in rows:
            by_rp.setdefault(dep.rp_uuid, []).append((dep, device))
        out = []
        # One provider per deployable, or per pool of them (issue 52), as the
        # reports make them (steward/conductor/report/providers.py).
        for provider in providers.group(providers.Member.of_row(dep, attrs[dep.id])
                                        for dep, _ in rows):
            members = by_rp[provider.rp_uuid]
            reserved = reservation.provider_reserved([
                (dep, reservation.policy(s, device, accelerators=counts.get(device.id, 0)),
                 in_use.get(device.id, 0)) for dep, device in members])
            out.append(_Provider(provider.deployable_ids[0], provider.rp_uuid,
                                 provider.name, members[0][1].hostname,
                                 provider.resource_class, provider.total,
                                 provider.traits, reserved))
    return out


@_contained
def repair_placement_drift(deps, ctx, reporter=None, now=None):
    """Compare every device provider's inventory and reserved in Placement with
    Steward's rows and repair what differs. Returns [(rp_uuid, what)] repaired.
    ``reporter``: the conductor's Reporter, told to sync a host again when one of
    its providers is missing from Placement altogether."""
    client = deps.placement_client
    if client is None:
        return []
    repaired = []
    # One request for the generations of all of Steward's providers: a provider
    # whose generation has not moved since this client last saw it is compared
    # from memory, so a run in a quiet cloud costs Placement one read.
    generations = {rp['uuid']: rp['generation']
                   for rp in client.list_providers(required=os_traits.OWNER_CYBORG)}
    # Providers a first registration is writing right now (their rows committed,
    # their inventory not yet sent): not drift, and "repairing" them would race it.
    registering = reporter.registering() if reporter is not None else frozenset()
    for want in _wanted_providers(deps):
        if want.rp_uuid in registering:
            continue
        try:
            what = _repair_one(deps, client, want, reporter,
                               generations.get(want.rp_uuid))
        except exception.PlacementUnavailable:
            raise               # the whole run: the next one tries again
        except exception.StewardError as err:
            LOG.warning('Placement drift check of %s (%s) skipped: %s', want.name,
                        want.rp_uuid, err)
            continue
        if what:
            repaired.append((want.rp_uuid, what))
    return repaired


def _repair_one(deps, client, want, reporter, generation):
    inventories = None if generation is None else \
        client.remembered_inventory(want.rp_uuid, generation)
    moved = inventories is None     # changed since this client last saw it
    try:
        if moved:
            inventories = client.read_inventory(want.rp_uuid)
    except exception.PlacementError as err:
        if getattr(err, 'http_status', None) != 404:
            raise
        # Gone: what this client remembers of it (its generation, that it
        # exists) must not let the next report's sync skip creating it again.
        client.forget(want.rp_uuid)
        if reporter is not None:
            reporter.forget(want.host)
        LOG.warning('Placement drift: provider %s (%s) of host %s is missing from '
                    'Placement; it is created again at the next report of its agent',
                    want.name, want.rp_uuid, want.host)
        return None
    have = inventories.get(want.resource_class)
    if want.total <= 0:
        return None             # no inventory wanted: the report's sync's business
    if have is None or have.get('total') != want.total:
        _repair_inventory(deps, client, want, have)
        deps.metrics.healed('placement_inventory')
        return 'inventory'
    if moved:
        # Placement moves the generation on a change of traits too: only a
        # provider that moved can have lost one.
        lost = want.traits - client.get_traits(want.rp_uuid)
        if lost:
            client.add_traits(want.rp_uuid, lost)
            LOG.warning('Placement drift: provider %s (%s) had lost its trait(s) %s; '
                        'repaired', want.name, want.rp_uuid, ', '.join(sorted(lost)))
            deps.metrics.healed('placement_traits')
            return 'traits'
    if want.reserved is None:
        return None
    if have.get('reserved') == min(want.reserved, want.total):
        return None
    # A bind or release may have moved the device between the two reads: read
    # both again, and only a difference that is still there is drift.
    client.forget(want.rp_uuid)
    was = (client.get_inventory(want.rp_uuid).get(want.resource_class) or {}).get(
        'reserved')
    wanted = device_ops.current_reserved(deps, want.deployable_id)
    if wanted is None or was == min(wanted, want.total):
        return None
    # Evaluated again when written: the value written is what the device's state
    # asks for then.
    written = client.set_reserved(
        want.rp_uuid, want.resource_class,
        functools.partial(device_ops.current_reserved, deps,
                          want.deployable_id, was))
    if written == was:
        return None
    LOG.warning('Placement drift: provider %s (%s) %s reserved was %s, Steward\'s '
                'device asks for %s; repaired', want.name, want.rp_uuid,
                want.resource_class, was, written)
    deps.metrics.healed('placement_reserved')
    return 'reserved'


def _repair_inventory(deps, client, want, have):
    from steward.placement.provider_sync import ProviderSpec
    provider = client.get_provider(want.rp_uuid)
    client.forget(want.rp_uuid)
    # Under the parent it has: which compute node a device hangs under is the
    # report's business, not this repair's.
    client.sync_provider(ProviderSpec(
        uuid=want.rp_uuid, name=want.name,
        parent_uuid=provider['parent_provider_uuid'],
        resource_class=want.resource_class, total=want.total, traits=want.traits,
        reserved=functools.partial(device_ops.current_reserved, deps,
                                   want.deployable_id)))
    LOG.warning('Placement drift: provider %s (%s) %s inventory was %s, Steward has '
                '%d accelerator(s); repaired', want.name, want.rp_uuid,
                want.resource_class, have, want.total)
