"""Device profiles: queries on the ``device_profiles`` table.

Row shapes (``ROW``, ``READ_ROW``; every function's annotation names them):
``m.DeviceProfile`` ORM objects for one profile (the API deletes it, ARQs are
created from it); listings (Nova's ``?name=`` before every boot) read plain named
tuples of the same columns (perf.row_type). ``device_profile_groups`` reads a
profile's groups from either.
"""
import json

from oslo_db import exception as db_exc
from oslo_utils import uuidutils
import sqlalchemy as sa

from steward.common import exception
from steward.db import models as m
from steward.db import perf

ROW = m.DeviceProfile
"""One profile, to delete it or to create ARQs from it: ORM objects."""
READ_ROW = perf.row_type(m.DeviceProfile.__table__)
"""Listings (Nova's ``?name=``): plain named tuples."""


_PROFILE_BY = {key: sa.select(m.DeviceProfile).where(
    getattr(m.DeviceProfile, key) == sa.bindparam('value')) for key in ('uuid', 'name')}


def device_profile_get(session, uuid=None, name=None) -> ROW:
    key, value = ('uuid', uuid) if uuid is not None else ('name', name)
    row = session.execute(_PROFILE_BY[key], {'value': value}).scalar_one_or_none()
    if row is None:
        raise exception.DeviceProfileNotFound(resource='Device Profile', key=key,
                                              value=value)
    return row


_PROFILES = sa.select(*m.DeviceProfile.__table__.c).order_by(m.DeviceProfile.__table__.c.id)
_PROFILES_NAMED = perf.OneOrMany(m.DeviceProfile.__table__.c.name, 'names', _PROFILES.where)


def device_profile_list(session, names=None) -> list[READ_ROW]:
    """Profiles as read-only rows (READ_ROW: attribute access like the model), optionally
    only those of ``names``: Nova's ``?name=`` before every boot."""
    make = READ_ROW._make
    if names is None:
        return [make(r) for r in session.execute(_PROFILES)]
    return [make(r) for r in session.execute(*_PROFILES_NAMED(names))]


def device_profile_create(session, name, groups, description=None, uuid=None) -> ROW:
    uuid = uuid or uuidutils.generate_uuid()
    clash = session.execute(
        sa.select(m.DeviceProfile.name, m.DeviceProfile.uuid).where(
            sa.or_(m.DeviceProfile.name == name, m.DeviceProfile.uuid == uuid))).first()
    if clash is not None:
        if clash.name == name:
            raise exception.DuplicateDeviceProfileName(name=name)
        raise exception.DuplicateUUID(resource='device profile', uuid=uuid)
    dp = m.DeviceProfile(uuid=uuid, name=name, description=description,
                         profile_json=json.dumps({'groups': groups}))
    session.add(dp)
    try:
        session.flush()
    except db_exc.DBDuplicateEntry:
        # Lost a race with a concurrent create of the same name.
        raise exception.DuplicateDeviceProfileName(name=name)
    return dp


def device_profile_delete(session, dp) -> None:
    # The FK is RESTRICT but SQLite enforces it only with foreign_keys=ON and the
    # old code path deleted anyway, orphaning ARQs (upstream defect): check first.
    count = session.execute(
        sa.select(sa.func.count()).select_from(m.ExtARQ)
        .where(m.ExtARQ.device_profile_id == dp.id)).scalar()
    if count:
        raise exception.DeviceProfileInUse(name=dp.name, count=count)
    session.delete(dp)


def device_profile_groups(dp) -> list[dict]:
    return json.loads(dp.profile_json).get('groups', [])
