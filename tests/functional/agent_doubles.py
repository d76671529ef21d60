"""Agents that misbehave the way real ones do, served over the real transport, for
tests of what the conductor does about it (the agent itself is not under test)."""
import threading

import oslo_messaging as messaging

from steward.common import rpc as steward_rpc
from steward.agent import rpcapi as agent_rpcapi
from steward.conf import CONF


class DeafAgent:
    """Answers ping as a current agent, and loses every cleanup request it gets (a
    cast lost on the way: the agent restarted as it arrived, a broker failover)."""
    target = messaging.Target(version=agent_rpcapi.RPC_API_VERSION)

    def __init__(self, host):
        self.host = host
        self.lost = []
        self.asked = threading.Event()

    def ping(self, ctx):
        return {'host': self.host, 'version': agent_rpcapi.RPC_API_VERSION}

    def cleanup_device(self, ctx, device, trigger='unbind'):
        self.lost.append((device['uuid'], trigger))
        self.asked.set()


class Served:
    """``with Served(DeafAgent(host)) as agent:`` - an RPC server on the agent topic
    for ``agent.host`` while the block runs."""

    def __init__(self, agent, transport):
        self.agent, self.transport = agent, transport
        self._server = None

    def __enter__(self):
        self._server = self.transport.start_server(CONF.rpc_topic_agent, self.agent.host,
                                                [self.agent])
        return self.agent

    def __exit__(self, *exc):
        steward_rpc.stop_server(self._server)
