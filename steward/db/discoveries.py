"""A host's discovered devices: the rows an agent's report reads and writes
together (devices, their control-path ids, deployables, attributes, attach
handles), for the conductor's report diff and its Placement sync
(steward/conductor/report/).

Row shape (``ROW``): ``m.Device`` ORM objects, the host's devices the diff
changes in place. The other functions return records (dicts) or plain values.
"""
import sqlalchemy as sa

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
