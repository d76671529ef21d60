"""Device profiles: queries on the ``device_profiles`` table.

Row shape (``ROW``; every function's annotation names it): ``m.DeviceProfile``
ORM objects, for one profile (the API deletes it, ARQs are created from it) and
for listings (Nova's ``?name=`` before every boot). ``device_profile_groups``
reads a profile's groups.
"""
import json

from oslo_db import exception as db_exc
from oslo_utils import uuidutils
import sqlalchemy as sa
from sqlalchemy import orm

from steward.common import exception
from steward.db import models as m
from steward.db import perf

ROW = m.DeviceProfile
"""Profiles, to list them, delete one or create ARQs from one: ORM objects."""


_PROFILE_BY = {key: sa.select(m.DeviceProfile).where(
    getattr(m.DeviceProfile, key) == sa.bindparam('value')) for key in ('uuid', 'name')}


def device_profile_get(session, uuid=None, name=None) -> ROW:
    key, value = ('uuid', uuid) if uuid is not None else ('name', name)
    row = session.execute(_PROFILE_BY[key], {'value': value}).scalar_one_or_none()
    if row is None:
        raise exception.DeviceProfileNotFound(resource='Device Profile', key=key,
                                              value=value)
    return row


_PROFILES = sa.select(m.DeviceProfile).order_by(m.DeviceProfile.id)
_PROFILES_NAMED = perf.OneOrMany(m.DeviceProfile.name, 'names', _PROFILES.where)


def device_profile_list(session, names=None) -> list[ROW]:
    """Profiles in id order, optionally only those of ``names``: Nova's ``?name=``
    before every boot. ``session``: a session, or Database.single_read()'s
    connection (no transaction of a session's own), which a session made here
    only to load the objects then reads through."""
    if isinstance(session, sa.Connection):
        with orm.Session(bind=session, expire_on_commit=False) as loading:
            return device_profile_list(loading, names)
    if names is None:
        return session.execute(_PROFILES).scalars().all()
    return session.execute(*_PROFILES_NAMED(names)).scalars().all()


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
