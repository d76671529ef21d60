"""Online data migrations: run by ``steward db online-data-migrations`` and at
conductor start. Each takes a session and a batch size and returns
(rows found, rows migrated)."""
import logging

import sqlalchemy as sa

from steward.common import context
from steward.common import states
from steward.db import devices as device_db
from steward.db import models as m
from steward.db import transitions

LOG = logging.getLogger(__name__)


def backfill_device_state(session, limit):
    """NULL device_state -> allocated when an ARQ holds one of its handles, else
    available (spec 1: the column could not default, a bound device would have been
    marked available)."""
    rows = session.execute(sa.select(m.Device).where(m.Device.device_state.is_(None))
                           .order_by(m.Device.id).limit(limit)).scalars().all()
    ctx = context.get_admin_context()
    for device in rows:
        if device_db.device_has_active_arq(session, device.id):
            transitions.advance(session, m.Device, device, states.DEV_ALLOCATED,
                                event='backfill', reason='online data migration',
                                request_id=ctx.request_id)
        else:
            transitions.advance(session, m.Device, device, states.DEV_AVAILABLE,
                                event='backfill', reason='online data migration',
                                request_id=ctx.request_id)
    return len(rows), len(rows)


MIGRATIONS = (backfill_device_state,)


def run_all(database, batch=50):
    """Run every migration to completion; returns {name: migrated}."""
    totals = {}
    for migration in MIGRATIONS:
        done = 0
        while True:
            with database.writer() as s:
                found, migrated = migration(s, batch)
            done += migrated
            if found < batch or not migrated:
                break
        totals[migration.__name__] = done
        if done:
            LOG.info('%s migrated %d row(s)', migration.__name__, done)
    return totals


def pending(database):
    with database.reader() as s:
        return {'backfill_device_state': s.execute(
            sa.select(sa.func.count()).select_from(m.Device)
            .where(m.Device.device_state.is_(None))).scalar()}
