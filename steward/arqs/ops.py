"""Accelerator request lifecycle: create, bind, unbind, delete.

Run wherever the ARQ operations run (steward/arqs/service.py): in each ``steward
api`` process, and in a conductor for the callers that send it the operations
over RPC; a conductor's periodic tasks also finish the deletes a crash
interrupted and delete the ARQs Nova no longer needs (steward/conductor/periodic.py).

Every ARQ state change goes through ``transitions.advance``. A bind validates all of its
input before touching anything, and runs in one write transaction: if any ARQ of a
multi-ARQ bind cannot get a handle, the whole transaction rolls back and every ARQ
is exactly where it was (never left in BindStarted). Work outside the database
(Placement reservation) comes after the commit and is undone on failure, leaving
the ARQs in BindFailed with their handles freed.

Each write transaction is run again from its start when the database refuses it
as a deadlock (on Galera: a certification failure), ``retry.on_deadlock``: the
transaction reads everything it decides on afresh, and the work outside the
database comes after its commit.

A released device that must be cleaned is handed to ``dispatch(ctx,
device_uuid)``, which every operation that releases is given: only a conductor
talks to agents (steward/conductor/cleanup_ops.py ``dispatch_cleanup``), and an
API process casts the device to one (ConductorAPI.device_release_for_cleaning).
"""
import functools
import logging

from oslo_utils import uuidutils

from steward.arqs import device_ops
from steward.arqs import reservation
from steward.common import exception
from steward.common import states
from steward.db import arqs as arq_db
from steward.db import attach_handles as handle_db
from steward.db import deployables as deployable_db
from steward.db import device_profiles as profile_db
from steward.db import models as m
from steward.db import retry
from steward.db import transitions

LOG = logging.getLogger(__name__)


def accelerator_count(group):
    """ARQs one device-profile group asks for: the sum of its resources:* amounts."""
    return sum(int(v) for k, v in group.items() if k.startswith('resources:'))


def _group_ids(dp):
    groups = profile_db.device_profile_groups(dp)
    counts = [accelerator_count(group) for group in groups]
    total = sum(counts)
    # A profile stored before the API bounded its amounts (or taken over from
    # Cyborg, which does not): refused before a list of its size is built.
    if total > profile_db.MAX_ACCELERATORS:
        raise exception.DeviceProfileInvalid(
            reason=f'profile {dp["name"]} asks for {total} accelerators, more '
                   f'than {profile_db.MAX_ACCELERATORS}: create it again with fewer')
    return [group_id for group_id, count in enumerate(counts) for _ in range(count)]


@retry.on_deadlock
def create(deps, ctx, device_profile_name, project_id, known):
    """New ARQs of the profile named ``device_profile_name``: their records.
    ``known``: the KnownProfiles of this process; a profile found there is not
    read again (one statement instead of two: see arq_db.arqs_create_from)."""
    dp = known.get(device_profile_name)
    if dp is not None:
        with deps.database.single_write() as conn:
            records = arq_db.arqs_create_from(conn, dp, _group_ids(dp), project_id)
        if records is not None:
            return records
        known.forget(device_profile_name)
    # Two statements, each its own transaction (one round trip each on
    # PostgreSQL and MariaDB, four in one transaction): the profile, then the
    # new rows. A profile deleted in between fails the INSERT's foreign key, as
    # it did inside one transaction at READ COMMITTED.
    with deps.database.single_read() as conn:
        dp = profile_db.device_profile_named(conn, device_profile_name)
    with deps.database.single_write() as conn:
        records = arq_db.arqs_create(conn, dp, _group_ids(dp), project_id)
    known.remember(dp)
    return records


class KnownProfiles:
    """Profile records by name, as read by a create, for the next creates of this
    process (Nova creates every boot's ARQs from one of a few profiles). A
    profile cannot be changed, only deleted and created again, which the
    create's statement sees (arq_db.arqs_create_from). Bounded: emptied when
    full. Dict operations only, safe across the API's handler threads."""

    SIZE = 256

    def __init__(self):
        self._by_name = {}

    def get(self, name):
        return self._by_name.get(name)

    def remember(self, record):
        if len(self._by_name) >= self.SIZE:
            self._by_name.clear()
        self._by_name[record['name']] = record

    def forget(self, name):
        self._by_name.pop(name, None)


def _check_uuid(name, value):
    if not uuidutils.is_uuid_like(value):
        raise exception.InvalidUUID(name=name, value=value)


def validate_binding(b):
    for key in ('uuid', 'instance_uuid', 'device_rp_uuid'):
        _check_uuid(key, b.get(key))
    hostname = b.get('hostname')
    if not isinstance(hostname, str) or not hostname.strip() or len(hostname) > 255:
        raise exception.InvalidParameter(name='hostname', value=hostname,
                                         reason='a non-empty host name is required')


def bind(deps, ctx, bindings, dispatch):
    """Bind ARQs: ``bindings`` is a list of dicts with uuid, hostname,
    device_rp_uuid, instance_uuid and optionally project_id. Returns the bound
    records. All or nothing. ``dispatch``: see after_release."""
    for b in bindings:
        validate_binding(b)
    uuids = [b['uuid'] for b in bindings]
    if len(set(uuids)) != len(uuids):
        raise exception.PatchInvalid(reason='an ARQ appears twice')
    project_scope = None if ctx.is_admin or ctx.is_service else ctx.project_id
    bound = _bind_in_db(deps, ctx, bindings, uuids, project_scope)
    if bound is None:
        bound = _bind_in_db(deps, ctx, bindings, uuids, project_scope, exclusive=True)
    records, reserve = bound
    try:
        for dep in reserve:
            device_ops.reserve(deps, dep, reserve=True)
    except exception.StewardError as err:
        LOG.error('Bind of %s failed after commit (%s); rolling back', uuids, err)
        _fail_bound(deps, ctx, uuids, reason=str(err), dispatch=dispatch)
        err.failed_arqs = [(r['uuid'], r['instance_uuid']) for r in records]
        raise
    return records


@retry.on_deadlock
def _bind_in_db(deps, ctx, bindings, uuids, project_scope, exclusive=False):
    """The bind's transaction: (records, deployables whose device must be
    reserved in Placement once it is committed), or None when a share lock came
    too late (device_ops.lock_for_bind) and the bind must run again with
    ``exclusive`` locks.

    That transaction has written nothing and ends with a COMMIT, not a rollback:
    on PostgreSQL psycopg forgets every statement it prepared on the connection
    at any ROLLBACK (and deallocates them), so each later statement was parsed and
    planned again, ten times each before it was prepared anew. Four clients on
    one shared device missed the share lock in one bind of twelve, and
    PostgreSQL spent a quarter of its time planning."""
    reserve, handles = [], {}
    with deps.database.writer() as s:
        arqs, held = arq_db.arqs_for_bind(
            s, uuids, dict.fromkeys(b['instance_uuid'] for b in bindings), project_scope)
        for arq in arqs:
            if arq.state not in states.ARQ_BINDABLE:
                raise exception.ARQBadState(uuid=arq.uuid, state=arq.state,
                                            action='bind',
                                            expected=list(states.ARQ_BINDABLE))
        deployables, device_states = deployable_db.deployables_by_rp_uuids(
            s, list(dict.fromkeys(b['device_rp_uuid'] for b in bindings)))
        # Every device of the bind locked up front, in id order (see lock_devices),
        # with its accelerator count; the lock holds until the commit.
        found = device_ops.lock_for_bind(s, device_states, exclusive)
        if found is None:
            return None
        locked = {device.id: (device, count) for device, count in found}
        chosen = _choose_deployables(bindings, deployables, locked)
        _check_second_set(held, bindings, chosen, locked)
        for arq, b, dep in zip(arqs, bindings, chosen):
            values = {'hostname': b['hostname'], 'device_rp_uuid': b['device_rp_uuid'],
                      'instance_uuid': b['instance_uuid'], 'deployable_id': dep.id}
            if b.get('project_id'):
                values['project_id'] = b['project_id']
            device = device_ops.check_bindable(s, dep, locked[dep.device_id])
            handle = handle_db.attach_handle_allocate(s, dep)
            # BindStarted, then Bound: one UPDATE, since no other transaction can
            # see the ARQ between them (a failure rolls both back).
            values['attach_handle_id'] = handle.id
            transitions.advance(s, m.ExtARQ, arq, states.ARQ_BOUND, event='bind_done',
                                via=(states.ARQ_BIND_STARTED, 'bind'), values=values,
                                request_id=ctx.request_id)
            handles[arq.id] = (handle, device.type)
            if device_ops.mark_allocated(s, device, ctx) and reservation.policy(
                    s, device, accelerators=locked[dep.device_id][1]).single:
                reserve.append(dep)
        return [arq_db.arq_record(a, *handles[a.id]) for a in arqs], reserve


def _choose_deployables(bindings, deployables, locked):
    """The deployable each binding takes, in the bindings' order. A provider of
    one deployable is that one (the bind guard, device_ops.check_bindable, then
    says whether its device may take it). A pool (issue 52: several, one per
    device) gives each binding its own device that may be bound now (the same
    guard, under the same row locks: every device of the pool is locked, so
    concurrent binds into one pool take turns and never hand a device twice),
    in device id order; PoolExhausted when fewer are free than asked: Placement
    counted a unit that no device has (a lost allocation, a reservation not yet
    written), and Nova tries another host."""
    chosen, pools = [], {}
    for b in bindings:
        rp = b['device_rp_uuid']
        members = deployables[rp]
        if len(members) == 1:
            chosen.append(members[0])
            continue
        if rp not in pools:
            # The pool's devices that may be bound, as locked: each binding of it
            # takes the next.
            bindable = [d for d in members if reservation.policy(
                None, locked[d.device_id][0], accelerators=locked[d.device_id][1]).bindable]
            pools[rp] = (len(bindable), iter(bindable))
        free, left = pools[rp]
        dep = next(left, None)
        if dep is None:
            raise exception.PoolExhausted(
                rp_uuid=rp, devices=len(members), free=free,
                asked=sum(1 for x in bindings if x['device_rp_uuid'] == rp))
        chosen.append(dep)
    return chosen


def _check_second_set(held, bindings, chosen, locked):
    """Accelerators cannot be added to an instance on its host; but while it
    moves (resize, cold or live migration) it holds a second set of ARQs on the
    destination: a bind on another host than every other ARQ of the instance
    (``held``: {instance: {its device hosts}}) is that set, and is allowed.
    ``chosen``: the deployable of each binding (_choose_deployables)."""
    for b, dep in zip(bindings, chosen):
        hosts = held.get(b['instance_uuid'])
        if not hosts:
            continue
        host = locked[dep.device_id][0].hostname
        if host in hosts or None in hosts:
            raise exception.ARQAlreadyBoundToInstance(instance_uuid=b['instance_uuid'],
                                                      host=host)


def _fail_bound(deps, ctx, uuids, reason, dispatch):
    """Undo a committed bind: free handles, devices back, ARQs to BindFailed."""
    released = _fail_bound_in_db(deps, ctx, uuids, reason)
    # A device that needs cleaning went to pending_cleaning: dispatch its cleanup.
    after_release(deps,
                  [r for r in released if isinstance(r, device_ops.CleanupRequest)], ctx,
                  dispatch=dispatch)


@retry.on_deadlock
def _fail_bound_in_db(deps, ctx, uuids, reason):
    released = []
    with deps.database.writer() as s:
        for arq in arq_db.arq_get_many(s, uuids):
            handle_id = arq.attach_handle_id
            if arq.state in (states.ARQ_BOUND, states.ARQ_BIND_STARTED):
                transitions.advance(s, m.ExtARQ, arq, states.ARQ_BIND_FAILED,
                                    event='bind_fail', reason=reason,
                                    values={'attach_handle_id': None},
                                    request_id=ctx.request_id)
            if handle_id is not None:
                handle_db.attach_handle_release(s, handle_id)
                released += device_ops.release_after_unbind(s, arq.deployable_id, ctx)
    return released


def _unbind_one(s, ctx, arq):
    """Move ``arq`` to Unbound freeing what it holds; returns what after_release
    must do once committed."""
    handle_id, deployable_id = arq.attach_handle_id, arq.deployable_id
    transitions.advance(s, m.ExtARQ, arq, states.ARQ_UNBOUND, event='unbind', values={
        'attach_handle_id': None, 'hostname': None, 'device_rp_uuid': None,
        'instance_uuid': None, 'deployable_id': None}, request_id=ctx.request_id)
    if handle_id is None:
        return []
    handle_db.attach_handle_release(s, handle_id)
    return device_ops.release_after_unbind(s, deployable_id, ctx)


def unbind(deps, ctx, arq_uuids, dispatch):
    after_release(deps, _unbind_in_db(deps, ctx, arq_uuids), ctx, dispatch=dispatch)


@retry.on_deadlock
def _unbind_in_db(deps, ctx, arq_uuids):
    project_scope = None if ctx.is_admin or ctx.is_service else ctx.project_id
    released = []
    with deps.database.writer() as s:
        for arq in arq_db.arq_get_many(s, arq_uuids, project_scope):
            if arq.state == states.ARQ_UNBOUND:
                continue
            released += _unbind_one(s, ctx, arq)
    return released


def delete(deps, ctx, arq_uuids=None, instance_uuid=None, project_id=None, *,
           dispatch):
    """Delete ARQs by uuid list (all must exist: 404 otherwise, nothing deleted) or
    by instance (idempotent). Each goes through Deleting (the state machine's way
    out) and is removed in the same transaction, with its handle freed; a row
    found in Deleting already (a crash of an older release between its two
    transactions, or reconciliation) is finished here too. ``dispatch``: see
    after_release."""
    count, released = _delete_in_db(deps, ctx, arq_uuids, instance_uuid, project_id)
    after_release(deps, released, ctx, dispatch=dispatch)
    return count


def _refuse_bound_without_service(ctx, arqs):
    if any(a.state == states.ARQ_BOUND for a in arqs) and not ctx.is_service \
            and not ctx.is_admin:
        raise exception.ServiceTokenRequired()


@retry.on_deadlock
def _delete_in_db(deps, ctx, arq_uuids, instance_uuid, project_id):
    released = []
    with deps.database.writer() as s:
        if arq_uuids is None:
            # Nova's delete of an instance's ARQs: one DELETE reads and removes
            # them, in whatever state they are once it holds their locks (a bind
            # committed under it included); a refusal rolls it back.
            arqs = transitions.remove_all(
                s, m.ExtARQ, *arq_db.arqs_removal_of_instance(instance_uuid, project_id),
                states.ARQ_DELETING, event='delete', make_row=arq_db.ArqRow,
                vet=functools.partial(_refuse_bound_without_service, ctx),
                request_id=ctx.request_id)
            for arq in arqs:
                released += _release_held(s, ctx, arq)
            return len(arqs), released
        arqs = arq_db.arq_get_many(s, arq_uuids, project_id)
        _refuse_bound_without_service(ctx, arqs)
        leftovers = []
        for arq in arqs:
            arq, removed = _start_deleting(s, ctx, arq)
            if removed:
                released += _release_held(s, ctx, arq)
            elif arq is not None:
                leftovers.append(arq.uuid)
        released += _finish_in(s, ctx, leftovers)
    return len(arqs), released


#: How often a delete follows an ARQ that other requests keep changing before it
#: answers 409: each change is a step of the state machine, so a few suffice.
_DELETE_FOLLOWS = 5


def _start_deleting(s, ctx, arq):
    """Move ``arq`` to Deleting and remove its row, one statement
    (transitions.remove): (arq, True); (arq, False) when it was found in Deleting
    already; (None, False) when another request deleted it first.

    A delete whose answer was lost is sent again while the first may still be
    running (or a bind completes under it): the loser of advance()'s
    compare-and-swap reads the row again and follows it instead of answering 409,
    so that a delete stays idempotent."""
    for _ in range(_DELETE_FOLLOWS):
        if arq.state == states.ARQ_DELETING:
            return arq, False
        try:
            # The conditional DELETE holds the row (PostgreSQL, MariaDB) until the
            # commit: nobody else finishes it under us.
            transitions.remove(s, m.ExtARQ, arq, states.ARQ_DELETING, event='delete',
                               request_id=ctx.request_id)
            return arq, True
        except exception.ConcurrentUpdate:
            arq = arq_db.arq_reread(s, arq.id)
            if arq is None:
                return None, False
    raise exception.ConcurrentUpdate(kind=m.ExtARQ.__state_kind__, uuid=arq.uuid)


def _remove(s, ctx, arq):
    """Remove a Deleting ARQ and free its handle; returns what after_release must
    do once committed."""
    arq_db.arq_remove(s, arq.id)
    return _release_held(s, ctx, arq)


def _release_held(s, ctx, arq):
    """Free the handle of a removed ARQ; returns what after_release must do once
    committed."""
    handle_id, deployable_id = arq.attach_handle_id, arq.deployable_id
    if handle_id is None:
        return []
    handle_db.attach_handle_release(s, handle_id)
    return device_ops.release_after_unbind(s, deployable_id, ctx)


@retry.on_deadlock
def _finish_deleting_in_db(deps, ctx, uuids):
    with deps.database.writer() as s:
        return _finish_in(s, ctx, uuids)


def _finish_in(s, ctx, uuids):
    released = []
    for arq in arq_db.arq_list_by_uuids_in_state(s, uuids, states.ARQ_DELETING):
        released += _remove(s, ctx, arq)
    return released


def finish_deleting(deps, ctx, uuids, dispatch):
    """Remove ARQs left in Deleting (reconciliation); returns how many were asked.
    ``dispatch``: see after_release."""
    after_release(deps, _finish_deleting_in_db(deps, ctx, uuids), ctx, dispatch=dispatch)
    return len(uuids)


def after_release(deps, released, ctx, dispatch):
    """After a release is committed: lift the reservations of the deployables in
    ``released`` and hand each device to clean (its CleanupRequests) to
    ``dispatch(ctx, device_uuid)``: a conductor asks the device's agent
    (cleanup_ops.dispatch_cleanup); an API process hands it to a conductor
    (ConductorAPI.device_release_for_cleaning), since only conductors talk to
    agents."""
    for dep in released:
        if isinstance(dep, device_ops.CleanupRequest):
            dispatch(ctx, dep.device_uuid)
            continue
        try:
            device_ops.reserve(deps, dep, reserve=False)
        except exception.StewardError as err:
            # Safe direction: the device stays unschedulable until the next sync
            # puts reserved back in line with device_state.
            LOG.error('Could not lift the Placement reservation of %s: %s',
                      dep.rp_uuid, err)
