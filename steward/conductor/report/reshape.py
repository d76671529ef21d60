"""Devices in use moved onto their pool's provider while their instances run
(issue 52, item 5): one ``POST /reshaper`` per host.

When an entry of a running host is tagged ``pool`` (steward/drivers/pci/driver.py),
its free functions move to the pool's provider at the next report (the diff
changes their deployable's provider; the sync deletes the old providers). A
function bound to an instance cannot move that way: Nova's allocation for the
instance sits on its own provider, which Placement will not delete. The diff
leaves such deployables where they are and lists them (``ReportDiff.reshapes``);
this module then moves, in one Placement transaction, every listed device's
unit from its old provider to the pool's, together with the allocations of the
instances using them (each consumer's whole allocation document rewritten, its
compute-node resources included), and empties the old providers. Once
Placement has committed, the deployables (and their bound ARQs'
``device_rp_uuid``) are moved in the database and the old providers deleted.

Nothing else moves: the bound ARQs keep their devices, handles and states. If
Placement refuses (an instance changed meanwhile: a 409 on its consumer
generation; a policy without the reshaper), nothing changed and the next report
tries again. Killed between Placement's commit and the database's, the next
report finds the old providers empty and finishes the move.
"""
import logging

from steward.arqs import reservation
from steward.common import exception
from steward.conductor.report import providers
from steward.db import attributes as attribute_db
from steward.db import deployables as deployable_db
from steward.db import discoveries
from steward.db import retry

LOG = logging.getLogger(__name__)


def move_in_use(deps, client, root, moves):
    """Move ``moves`` [(deployable id, from rp, to rp)] of one host onto their
    pools; True when done (or nothing to do), False when Placement refused and
    the next report must try again."""
    if not moves:
        return True
    ids = [dep_id for dep_id, _, _ in moves]
    with deps.database.reader() as s:
        moving = {dep.id: (dep, device) for dep, device in
                  discoveries.deployables_with_devices(s, ids)}
        attrs = attribute_db.attributes_by_deployable(s, ids)
        targets = sorted({to for _, _, to in moves})
        members = discoveries.provider_members(s, targets)
        rules = {dep_id: reservation.policy(s, device)
                 for dep_id, (dep, device) in moving.items()}
        current = {to: [(dep, reservation.policy(s, device, accelerators=n), used)
                        for dep, device, n, used in members.get(to, [])]
                   for to in targets}
    moves = [(d, frm, to) for d, frm, to in moves if d in moving]
    specs = {}
    for to in targets:
        joining = [moving[d][0] for d, _, t in moves if t == to]
        if not joining:
            continue
        # As it will be: on its pool's provider, named after the pool.
        member = providers.Member.of(joining[0].id, to, joining[0].name,
                                     joining[0].num_accelerators,
                                     [(a.key, a.value) for a in attrs.get(joining[0].id, [])])
        if member is None:
            continue
        # In use, each of them (that is why they move this way).
        everyone = current[to] + [(dep, rules[dep.id], 1) for dep in joining]
        specs[to] = (member, sum(dep.num_accelerators for dep, _, _ in everyone),
                     reservation.provider_reserved(everyone),
                     sum(dep.num_accelerators for dep, _, _ in current[to]))
    moves = [m for m in moves if m[2] in specs]
    if not moves:
        return True
    try:
        _reshape(client, root, moves, specs)
    except exception.StewardError as err:
        LOG.warning('Moving %d device(s) in use onto their pool was not applied (%s); '
                    'the next report of the host tries again', len(moves), err)
        return False
    _move_rows(deps, moves)
    for frm in sorted({frm for _, frm, _ in moves}):
        try:
            client.delete_provider(frm)
        except exception.StewardError as err:
            # Empty now: the next report's sync deletes it.
            LOG.warning('Removing resource provider %s after the move failed: %s', frm, err)
    LOG.info('moved %d device(s) in use onto their pool(s) %s with their instances\' '
             'allocations', len(moves), ', '.join(m.name for m, _, _, _ in specs.values()))
    return True


def _reshape(client, root, moves, specs):
    from steward.placement.provider_sync import ProviderSpec
    wanted = {}
    for to, (member, total, reserved, now) in specs.items():
        # Created (with its traits) when none of its devices was free to move
        # first; its inventory as the sync left it otherwise.
        client.sync_provider(ProviderSpec(
            uuid=to, name=member.name, parent_uuid=root,
            resource_class=member.resource_class, total=now, traits=member.traits,
            reserved=None))
        wanted[to] = ProviderSpec(uuid=to, name=member.name, parent_uuid=root,
                                  resource_class=member.resource_class, total=total,
                                  traits=member.traits, reserved=reserved)
    target = {frm: to for _, frm, to in moves}
    inventories = {}
    for rp in sorted(set(target) | set(wanted)):
        inventories[rp] = {'resource_provider_generation': client.provider_generation(rp),
                           'inventories': wanted[rp].inventories({}) if rp in wanted else {}}
    allocations = {}
    for frm in sorted(target):
        for consumer in client.provider_allocations(frm):
            if consumer not in allocations:
                allocations[consumer] = _moved(client.consumer_allocations(consumer),
                                               target)
    client.reshape(inventories, allocations, touched=list(inventories))


def _moved(doc, target):
    """A consumer's allocation document with what it holds on a provider of
    ``target`` {from: to} moved onto the ``to`` one (summed per class)."""
    out = {}
    for rp, alloc in doc['allocations'].items():
        dest = target.get(rp, rp)
        resources = out.setdefault(dest, {'resources': {}})['resources']
        for rc, amount in alloc['resources'].items():
            resources[rc] = resources.get(rc, 0) + amount
    moved = {'allocations': out, 'project_id': doc['project_id'],
             'user_id': doc['user_id'], 'consumer_generation': doc['consumer_generation']}
    if 'consumer_type' in doc:
        moved['consumer_type'] = doc['consumer_type']
    return moved


@retry.on_deadlock
def _move_rows(deps, moves):
    with deps.database.writer() as s:
        for to in sorted({to for _, _, to in moves}):
            deployable_db.deployables_move(s, [d for d, _, t in moves if t == to], to)
