"""A host's discovered devices: the rows an agent's report reads and writes
together (devices, their control-path ids, deployables, attributes, attach
handles), for the conductor's report diff and its Placement sync
(steward/conductor/report/).

Row shape (``ROW``): ``m.Device`` ORM objects, the host's devices the diff
changes in place. The other functions return records (dicts) or plain values.
"""
import sqlalchemy as sa
from sqlalchemy import orm

from steward.db import models as m

ROW = m.Device
"""The host's devices, as the report diff changes them: ORM objects."""

_DEVICES = m.Device.__table__
_CPIDS = m.ControlpathID.__table__
_DEPLOYABLES = m.Deployable.__table__
_ATTRIBUTES = m.Attribute.__table__
_HANDLES = m.AttachHandle.__table__


def hosts_with_devices(session, hosts) -> set:
    """The hosts of ``hosts`` that have at least one device row."""
    if not hosts:
        return set()
    return set(session.execute(sa.select(_DEVICES.c.hostname).distinct()
                               .where(_DEVICES.c.hostname.in_(list(hosts)))).scalars())


def first_registration_insert(session, devices) -> dict[str, int]:
    """Insert every row of devices seen for the first time, one statement per table
    for all of them whatever their hosts (an executemany), and return {deployable
    uuid: id}.

    ``devices``: records of the ``devices`` columns, each with three more keys:
    ``cpid`` (the ``controlpath_ids`` columns but the ids), ``deployables`` (the
    ``deployables`` columns but ``device_id``, each with ``attributes``, a list of
    (key, value, uuid), and ``handles``, records of the ``attach_handles`` columns
    but the ids). Ids are read back by uuid: portable where INSERT ... RETURNING of
    many rows is not (MariaDB)."""
    if not devices:
        return {}
    own = {'cpid', 'deployables'}
    session.execute(sa.insert(_DEVICES), [{k: v for k, v in d.items() if k not in own}
                                          for d in devices])
    device_ids = _ids_by_uuid(session, _DEVICES, [d['uuid'] for d in devices])
    session.execute(sa.insert(_CPIDS), [
        dict(d['cpid'], device_id=device_ids[d['uuid']], hostname=d['hostname'])
        for d in devices])
    cpid_ids = _ids_by_uuid(session, _CPIDS, [d['cpid']['uuid'] for d in devices])
    deployables = [(d, dep) for d in devices for dep in d['deployables']]
    if not deployables:
        return {}
    session.execute(sa.insert(_DEPLOYABLES), [
        dict({k: v for k, v in dep.items() if k not in ('attributes', 'handles')},
             device_id=device_ids[d['uuid']]) for d, dep in deployables])
    dep_ids = _ids_by_uuid(session, _DEPLOYABLES, [dep['uuid'] for _, dep in deployables])
    attributes = [{'uuid': uuid, 'deployable_id': dep_ids[dep['uuid']], 'key': key,
                   'value': value}
                  for _, dep in deployables for key, value, uuid in dep['attributes']]
    if attributes:
        session.execute(sa.insert(_ATTRIBUTES), attributes)
    handles = [dict(h, deployable_id=dep_ids[dep['uuid']],
                    cpid_id=cpid_ids[d['cpid']['uuid']], in_use=False)
               for d, dep in deployables for h in dep['handles']]
    if handles:
        session.execute(sa.insert(_HANDLES), handles)
    return dep_ids


def _ids_by_uuid(session, table, uuids):
    ids = {}
    # Chunks keep the IN list within every database's limits.
    for start in range(0, len(uuids), 500):
        chunk = uuids[start:start + 500]
        ids.update(session.execute(sa.select(table.c.uuid, table.c.id)
                                   .where(table.c.uuid.in_(chunk))).all())
    return ids


# -- the usual diff of one host's report (steward/conductor/report/diff.py) -----------
def host_devices_locked(session, host) -> list[ROW]:
    """The host's devices, locked until the transaction ends (in id order, as binds
    lock them), re-read rather than taken from the session's identity map."""
    return session.execute(
        sa.select(m.Device).where(m.Device.hostname == host).order_by(m.Device.id)
        .with_for_update().execution_options(populate_existing=True)).scalars().all()


def controlpath_ids_by_device(session, device_ids) -> dict:
    """{device id: its m.ControlpathID}."""
    if not device_ids:
        return {}
    return {c.device_id: c for c in session.execute(sa.select(m.ControlpathID).where(
        m.ControlpathID.device_id.in_(device_ids))).scalars()}


def deployables_of_devices(session, device_ids) -> list:
    """The m.Deployable rows of the devices ``device_ids``."""
    if not device_ids:
        return []
    return session.execute(sa.select(m.Deployable).where(
        m.Deployable.device_id.in_(device_ids))).scalars().all()


def handles_by_deployable(session, deployable_ids) -> dict:
    """{deployable id: [its m.AttachHandle rows]} (ORM objects: the diff changes them)."""
    handles = {}
    if deployable_ids:
        for h in session.execute(sa.select(m.AttachHandle).where(
                m.AttachHandle.deployable_id.in_(deployable_ids))).scalars():
            handles.setdefault(h.deployable_id, []).append(h)
    return handles


def host_provider_uuids(session, host) -> set:
    """The providers of the host's deployables."""
    return set(session.execute(
        sa.select(m.Deployable.rp_uuid)
        .join(m.Device, m.Deployable.device_id == m.Device.id)
        .where(m.Device.hostname == host)).scalars())


def deployable_detach_arqs(session, deployable_id) -> None:
    """ARQs naming a deployable about to be removed name none."""
    session.execute(sa.update(m.ExtARQ).where(m.ExtARQ.deployable_id == deployable_id)
                    .values(deployable_id=None))


def device_deployable_count(session, device_id) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(m.Deployable)
                           .where(m.Deployable.device_id == device_id)).scalar()


# -- Placement's side (steward/conductor/report/placement_sync.py, selfheal.py) -------
def host_deployables(session, host) -> list[tuple]:
    """[(m.Deployable, its m.Device)] of the host."""
    return session.execute(
        sa.select(m.Deployable, m.Device)
        .join(m.Device, m.Deployable.device_id == m.Device.id)
        .where(m.Device.hostname == host)).all()


def deployables_with_devices(session, deployable_ids) -> list[tuple]:
    """[(m.Deployable, its m.Device)] of ``deployable_ids``."""
    if not deployable_ids:
        return []
    return session.execute(
        sa.select(m.Deployable, m.Device)
        .join(m.Device, m.Deployable.device_id == m.Device.id)
        .where(m.Deployable.id.in_(deployable_ids))).all()


_DEVICE_ACCELERATORS = orm.aliased(m.Deployable)
_DEVICE_HANDLES = orm.aliased(m.Deployable)


def provider_members(session, rp_uuids) -> dict[str, list[tuple]]:
    """{rp_uuid: [(m.Deployable, its m.Device, the device's accelerators: the sum
    over all its deployables, the device's attach handles in use)]} of every
    deployable of the providers ``rp_uuids``, in device id order: one row for a
    provider of one deployable, one per device for a pool (issue 52). One query."""
    if not rp_uuids:
        return {}
    other = _DEVICE_ACCELERATORS
    accelerators = (sa.select(sa.func.coalesce(sa.func.sum(other.num_accelerators), 0))
                    .where(other.device_id == m.Device.id).scalar_subquery())
    in_use = (sa.select(sa.func.count()).select_from(m.AttachHandle)
              .join(_DEVICE_HANDLES, _DEVICE_HANDLES.id == m.AttachHandle.deployable_id)
              .where(_DEVICE_HANDLES.device_id == m.Device.id, m.AttachHandle.in_use)
              .scalar_subquery())
    out = {}
    for dep, device, count, used in session.execute(
            sa.select(m.Deployable, m.Device, accelerators, in_use)
            .join(m.Device, m.Deployable.device_id == m.Device.id)
            .where(m.Deployable.rp_uuid.in_(list(rp_uuids)))
            .order_by(m.Device.id, m.Deployable.id)):
        out.setdefault(dep.rp_uuid, []).append((dep, device, count, used))
    return out


def handles_in_use_by_device(session) -> dict[int, int]:
    """{device id: its attach handles in use}, of the devices with any."""
    return dict(session.execute(
        sa.select(m.Deployable.device_id, sa.func.count())
        .join(m.AttachHandle, m.AttachHandle.deployable_id == m.Deployable.id)
        .where(m.AttachHandle.in_use).group_by(m.Deployable.device_id)).all())


def provider_deployables(session) -> list[tuple]:
    """[(m.Deployable, its m.Device)] of every deployable with a provider."""
    return session.execute(
        sa.select(m.Deployable, m.Device)
        .join(m.Device, m.Deployable.device_id == m.Device.id)
        .where(m.Deployable.rp_uuid.is_not(None))).all()


def accelerators_by_device(session) -> dict[int, int]:
    """{device id: the accelerators of all its deployables}, providers or not."""
    return dict(session.execute(
        sa.select(m.Deployable.device_id,
                  sa.func.coalesce(sa.func.sum(m.Deployable.num_accelerators), 0))
        .group_by(m.Deployable.device_id)).all())
