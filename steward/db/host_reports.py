"""The digest of each host's last report whose rows and providers are in place
(``host_reports``, migration 0010; steward/common/report_digest.py): what lets any
conductor take a host's quiet report without the diff.

Row shape (``ROW``): ``m.HostReport``; the functions here answer with records
(dicts) or nothing."""
import sqlalchemy as sa
from oslo_utils import timeutils

from steward.db import models as m

ROW = m.HostReport
"""One host's last applied report digest (the functions answer in dicts)."""

_T = m.HostReport.__table__


def digests(session, hosts) -> dict:
    """{host: (its stored digest, the newest health reading time its devices
    hold)} of the hosts of ``hosts`` that have a digest."""
    if not hosts:
        return {}
    return {h: (d, r) for h, d, r in session.execute(
        sa.select(_T.c.hostname, _T.c.digest, _T.c.health_read_at)
        .where(_T.c.hostname.in_(list(hosts)), _T.c.digest.is_not(None))).all()}


def all_digests(session) -> dict:
    """{host: (digest, health reading time)} of every host that has a digest."""
    return {h: (d, r) for h, d, r in session.execute(
        sa.select(_T.c.hostname, _T.c.digest, _T.c.health_read_at)
        .where(_T.c.digest.is_not(None))).all()}


def store(session, entries) -> None:
    """``entries``: {host: (digest, health reading time)}; a digest None: the
    host's next report goes through the diff. An UPDATE of the rows there, one
    INSERT for the others. A row another writer inserted meanwhile makes the
    INSERT fail (the caller leaves it to the next report)."""
    if not entries:
        return
    now = timeutils.utcnow()
    hosts = list(entries)
    there = set(session.execute(sa.select(_T.c.hostname)
                                .where(_T.c.hostname.in_(hosts))).scalars())
    if there:
        session.execute(
            _T.update().where(_T.c.hostname == sa.bindparam('h'))
            .values(digest=sa.bindparam('d'), health_read_at=sa.bindparam('r'),
                    updated_at=now),
            [{'h': h, 'd': entries[h][0], 'r': entries[h][1]}
             for h in hosts if h in there])
    new = [{'hostname': h, 'digest': entries[h][0], 'health_read_at': entries[h][1],
            'updated_at': now} for h in hosts if h not in there]
    if new:
        session.execute(_T.insert(), new)


def health_read(session, host, read_at) -> None:
    """The host's devices' readings were refreshed to ``read_at``."""
    session.execute(_T.update().where(_T.c.hostname == host)
                    .values(health_read_at=read_at, updated_at=timeutils.utcnow()))


def clear(session, host=None) -> None:
    """Forget the digest of ``host`` (of every host with None): its next report
    goes through the diff, whichever conductor takes it."""
    stmt = _T.update().values(digest=None, updated_at=timeutils.utcnow())
    if host is not None:
        stmt = stmt.where(_T.c.hostname == host)
    session.execute(stmt.where(_T.c.digest.is_not(None)))
