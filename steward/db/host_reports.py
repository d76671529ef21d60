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
    """{host: its stored digest} of the hosts of ``hosts`` that have one."""
    if not hosts:
        return {}
    return dict(session.execute(
        sa.select(_T.c.hostname, _T.c.digest)
        .where(_T.c.hostname.in_(list(hosts)), _T.c.digest.is_not(None))).all())


def all_digests(session) -> dict:
    """{host: its stored digest} of every host that has one."""
    return dict(session.execute(sa.select(_T.c.hostname, _T.c.digest)
                                .where(_T.c.digest.is_not(None))).all())


def store(session, digests_by_host) -> None:
    """Set each host's digest (None: the next report goes through the diff): an
    UPDATE of the rows there, one INSERT for the others. A row another writer
    inserted meanwhile makes the INSERT fail: the caller's transaction is retried
    (a report of the same host from two conductors at once) or the store is
    skipped (the next report writes it)."""
    if not digests_by_host:
        return
    now = timeutils.utcnow()
    hosts = list(digests_by_host)
    there = set(session.execute(sa.select(_T.c.hostname)
                                .where(_T.c.hostname.in_(hosts))).scalars())
    if there:
        session.execute(
            _T.update().where(_T.c.hostname == sa.bindparam('h'))
            .values(digest=sa.bindparam('d'), updated_at=now),
            [{'h': h, 'd': digests_by_host[h]} for h in hosts if h in there])
    new = [{'hostname': h, 'digest': digests_by_host[h], 'updated_at': now}
           for h in hosts if h not in there]
    if new:
        session.execute(_T.insert(), new)


def clear(session, host=None) -> None:
    """Forget the digest of ``host`` (of every host with None): its next report
    goes through the diff, whichever conductor takes it."""
    stmt = _T.update().values(digest=None, updated_at=timeutils.utcnow())
    if host is not None:
        stmt = stmt.where(_T.c.hostname == host)
    session.execute(stmt.where(_T.c.digest.is_not(None)))
