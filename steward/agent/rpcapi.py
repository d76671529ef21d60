"""Client side of the agent RPC API: what the conductor asks of one host's agent.

History:
    1.0 - ping
"""
from steward.common import rpc
from steward.conf import CONF

RPC_API_VERSION = '1.0'


class AgentAPI:
    def __init__(self, version_cap=None):
        self._client = rpc.get_client(CONF.rpc_topic_agent, RPC_API_VERSION,
                                      version_cap=version_cap)

    def can_send_version(self, version):
        return self._client.can_send_version(version)

    def ping(self, ctx, host, timeout=10):
        return self._client.prepare(server=host, timeout=timeout).call(ctx, 'ping')
