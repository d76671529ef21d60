"""Device profiles: queries on the ``device_profiles`` table.

Row shape (``ROW``; every function's annotation names it): ``m.DeviceProfile``
ORM objects, for one profile (the API deletes it, ARQs are created from it). The
API formats records (``device_profile_record``, ``device_profile_records``: plain
dicts of the same columns), its listings (Nova's ``?name=`` before every boot)
read without the ORM. ``device_profile_groups`` reads a profile's groups from
either.
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

MAX_ACCELERATORS = 256
"""Accelerators one profile may ask for, its groups' ``resources:`` amounts
together: each is an ARQ, created with the others in one request at every boot.
Far more than one instance attaches; a typo of an amount (a million) would
otherwise make each boot build and insert that many rows."""


_PROFILE_BY = {key: sa.select(m.DeviceProfile).where(
    getattr(m.DeviceProfile, key) == sa.bindparam('value')) for key in ('uuid', 'name')}


def device_profile_get(session, uuid=None, name=None) -> ROW:
    key, value = ('uuid', uuid) if uuid is not None else ('name', name)
    row = session.execute(_PROFILE_BY[key], {'value': value}).scalar_one_or_none()
    if row is None:
        raise exception.DeviceProfileNotFound(resource='Device Profile', key=key,
                                              value=value)
    return row


_PROFILES_T = m.DeviceProfile.__table__
_PROFILES = sa.select(*_PROFILES_T.c).order_by(_PROFILES_T.c.id)
_PROFILES_NAMED = perf.OneOrMany(_PROFILES_T.c.name, 'names', _PROFILES.where)


def device_profile_records(session, names=None) -> list[dict]:
    """Profiles as records (see perf.records), optionally only those of ``names``:
    Nova's ``?name=`` before every boot, on a session or on
    Database.single_read()'s connection."""
    if names is None:
        return perf.records(session, _PROFILES_T, _PROFILES)
    return perf.records(session, _PROFILES_T, *_PROFILES_NAMED(names))


def device_profile_named(conn, name) -> dict:
    """The record of the profile called ``name`` (ARQs are created from it), on a
    session or Database.single_read()'s connection."""
    found = device_profile_records(conn, [name])
    if not found:
        raise exception.DeviceProfileNotFound(resource='Device Profile', key='name',
                                              value=name)
    return found[0]


def device_profile_record(dp) -> dict:
    """A profile (ROW) as the record device_profile_records makes: the API's
    answer for one."""
    return perf.record(dp)


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
    """``dp``: a profile (ROW) or its record."""
    text = dp['profile_json'] if isinstance(dp, dict) else dp.profile_json
    return json.loads(text).get('groups', [])
