"""Client side of the agent RPC API: what the conductor asks of one host's agent.

History:
    1.0 - ping
    1.1 - cleanup_device (cast): clean a released device with its driver's
          locked-in action (spec 1). ping answers the agent's RPC version.
    1.2 - report_again (cast): a conductor could not take the host's quiet
          report (conductor RPC 1.4 report_quiet, a cast) by its digest: send
          the whole report.

Rolling upgrades (spec 1, "N-1 agent compatibility"): conductors upgrade before
agents, so a 1.1 conductor must not send 1.1 calls to a 1.0 agent, nor device
fields a 1.0 agent does not know. What a host's agent speaks is learnt from the
agent itself (it says so when it starts, see AgentManager.init_host, and ``ping``
answers it); ``version_cap`` pins it for every host instead.
"""
import logging
import threading

import oslo_messaging as messaging

from steward.common import report_digest
from steward.conf import CONF

LOG = logging.getLogger(__name__)

RPC_API_VERSION = '1.2'
CLEANUP_VERSION = '1.1'
REPORT_AGAIN_VERSION = report_digest.AGENT_RPC_VERSION

# The device fields each RPC version carries (the payload of cleanup_device). 1.0
# agents know upstream's Device object 1.2; 1.1 adds what spec 1 introduced.
DEVICE_FIELDS = {
    '1.0': ('uuid', 'type', 'vendor', 'model', 'std_board_info', 'vendor_board_info',
            'hostname', 'status'),
}
DEVICE_FIELDS['1.1'] = DEVICE_FIELDS['1.0'] + ('device_state', 'driver_name')
DEVICE_FIELDS['1.2'] = DEVICE_FIELDS['1.1']


def device_payload(row, driver_name=None):
    """The device as RPC carries it (newest version); ``row`` is a Device row."""
    out = {k: getattr(row, k) for k in DEVICE_FIELDS['1.0']}
    out['device_state'] = row.device_state
    out['driver_name'] = driver_name
    return out


def make_compatible(device, version):
    """``device`` downleveled to what an agent speaking ``version`` knows: fields
    added after it are dropped (oslo.versionedobjects' obj_make_compatible)."""
    fields = DEVICE_FIELDS.get(version)
    if fields is None:
        raise ValueError(f'unknown agent RPC version {version}')
    return {k: v for k, v in device.items() if k in fields}


def _version_tuple(version):
    major, minor = str(version).split('.')
    return int(major), int(minor)


def version_at_least(have, want):
    have, want = _version_tuple(have), _version_tuple(want)
    return have[0] == want[0] and have[1] >= want[1]


class AgentAPI:
    PING_TIMEOUT = 5

    def __init__(self, transport, version_cap=None):
        # transport: the steward.common.rpc.Transport the agents are reached on.
        self.transport = transport
        self.version_cap = version_cap
        self._client = None
        self._lock = threading.Lock()
        self._host_versions = {}

    @property
    def client(self):
        # Built on first use: a conductor that never talks to an agent (API-only
        # tests, a conductor before any unbind) opens no connection.
        with self._lock:
            if self._client is None:
                self._client = self.transport.client(CONF.rpc_topic_agent, '1.0',
                                                     version_cap=self.version_cap)
            return self._client

    # -- what each host speaks -----------------------------------------------------
    def record_host_version(self, host, version):
        with self._lock:
            self._host_versions[host] = version

    def host_version(self, host):
        """The RPC version of ``host``'s agent: what it announced, else what its
        ping answers (a 1.0 agent answers 1.0 too), else None (unreachable)."""
        with self._lock:
            known = self._host_versions.get(host)
        if known:
            return known
        try:
            answer = self.ping(None, host, timeout=self.PING_TIMEOUT)
        except messaging.MessagingException as err:
            LOG.warning('Agent of host %s did not answer ping (%s); its RPC version is '
                        'unknown', host, err)
            return None
        version = (answer or {}).get('version') or '1.0'
        self.record_host_version(host, version)
        return version

    def can_send_version(self, version, host=None):
        if self.version_cap is not None or host is None:
            return self.client.can_send_version(version)
        have = self.host_version(host)
        # Unreachable: cast anyway. The message waits for the agent, and an agent
        # that restarts first moves the device to error itself (crash recovery).
        return True if have is None else version_at_least(have, version)

    # -- calls ---------------------------------------------------------------------
    def ping(self, ctx, host, timeout=10):
        from steward.common import context
        ctx = ctx or context.get_admin_context()
        # 1.0: every agent answers it, which is how an old one is recognised.
        return self.client.prepare(server=host, timeout=timeout, version='1.0').call(
            ctx, 'ping')

    def cleanup_device(self, ctx, host, device, trigger='unbind'):
        """Ask ``host``'s agent to clean ``device`` (a device_payload dict). A cast:
        returns at once, the agent reports progress and the end to the conductor."""
        cctxt = self.client.prepare(server=host, version=CLEANUP_VERSION)
        cctxt.cast(ctx, 'cleanup_device',
                   device=make_compatible(device, CLEANUP_VERSION), trigger=trigger)

    def report_again(self, ctx, host):
        """Ask ``host``'s agent for its whole report (1.2, a cast): its quiet one
        had a digest the conductors do not hold. Only sent in answer to a quiet
        cast, which only a 1.2 agent sends."""
        self.client.prepare(server=host, version=REPORT_AGAIN_VERSION).cast(
            ctx, 'report_again')
