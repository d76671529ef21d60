"""What an agent sends the conductors each discovery cycle (Nova's resource
tracker, likewise, decides on the compute host whether anything changed).

The whole report (``report_data``) goes when it differs from the last one a
conductor acknowledged (its answer carried the report's digest,
steward/common/report_digest.py); otherwise only the digest goes
(``report_unchanged``, conductor RPC 1.3), unless ``[upgrade_levels] conductor``
caps the conductors below 1.3. The conductor judges the digest by the database,
whichever conductor it is, and answers ``resend`` when it cannot take it (the
database holds another digest or none: a restore, a host's state forgotten for a
repair): the whole report follows at once.

Once a conductor's answer says it can reach this agent (``quiet_cast``), the
digest goes as a cast (``report_quiet``, conductor RPC 1.4): answering a call
cost a conductor about as much as the report itself (a reply published and
confirmed by the broker). A conductor that cannot take a cast digest asks the
agent for the whole report (agent RPC 1.2 ``report_again``: ``resend_next``
here), which goes at once.
"""
import logging

import oslo_messaging as messaging

from steward.common import report_digest

LOG = logging.getLogger(__name__)


class ReportSender:
    """One host's reports: ``conductor_api`` a rpcapi.ConductorAPI."""

    def __init__(self, conductor_api, host, rp_name):
        self.conductor = conductor_api
        self.host = host
        self.rp_name = rp_name
        # The digest of the last report a conductor acknowledged, and whether
        # that conductor said it can ask this agent for a whole report.
        self.acknowledged = None
        self.quiet_cast = False
        # What was sent: digests alone, whole reports (tests, bench/fleet.py).
        self.digests_sent = self.reports_sent = 0

    def send(self, ctx, devices):
        """``devices``: the cycle's DriverDevice dicts. Returns the conductor's
        answer to the report (a summary dict)."""
        digest = report_digest.digest(self.rp_name, devices)
        if digest == self.acknowledged and self.quiet_cast and \
                self.conductor.can_cast_quiet():
            self.digests_sent += 1
            self.conductor.report_quiet(ctx, self.host, self.rp_name, digest,
                                        read_at=report_digest.newest_read_at(devices))
            return {'changed': False, 'placement_writes': 0, 'digest': digest}
        if digest == self.acknowledged and \
                self.conductor.can_send_version(report_digest.CONDUCTOR_RPC_VERSION):
            self.digests_sent += 1
            try:
                result = self.conductor.report_unchanged(
                    ctx, self.host, self.rp_name, digest,
                    read_at=report_digest.newest_read_at(devices))
            except messaging.RemoteError as err:
                if err.exc_type not in ('UnsupportedVersion', 'NoSuchMethod'):
                    raise
                # A conductor of an earlier release, not capped for: the whole
                # report, as to it.
                LOG.warning('A conductor does not take report_unchanged (%s); set '
                            '[upgrade_levels] conductor while conductors of the '
                            'previous release run', err.exc_type)
                result = {'resend': True}
            if not result.get('resend'):
                self.quiet_cast = bool(result.get('quiet_cast'))
                return result
        self.reports_sent += 1
        result = self.conductor.report_data(ctx, self.host, self.rp_name, devices)
        self.acknowledged = digest if result.get('digest') == digest else None
        self.quiet_cast = bool(result.get('quiet_cast'))
        return result

    def resend_next(self):
        """A conductor could not take the last digest (agent RPC report_again):
        the next report goes whole."""
        self.acknowledged = None
