"""bench/fleet.py's simulated host sends the conductor what a real agent sends.

Both go through a real ConductorAPI over oslo.messaging (the in-process kombu
transport Steward's single host uses) to an RPC server whose endpoint records
what arrives: the method, its arguments and the context, as the conductor's
dispatcher hands them over."""
import threading
import uuid

from bench import fleet_agent
from steward.agent import manager as agent_manager
from steward.common import rpc
from steward.conductor import rpcapi
from steward.conf import CONF
from steward.drivers import fake

ANSWER = {'changed': False, 'placement_writes': 0}


class Recorder:
    """The conductor's report_data endpoint, keeping what it was sent."""

    def __init__(self):
        self.received = []
        self.arrived = threading.Event()

    def report_data(self, ctx, host, rp_name, devices):
        self.received.append((ctx.to_dict(), {'host': host, 'rp_name': rp_name,
                                              'devices': devices}))
        self.arrived.set()
        return dict(ANSWER)


def test_a_simulated_host_sends_what_a_real_agent_sends():
    CONF([], project='steward', default_config_files=[])
    topic = f'fleet-agent-{uuid.uuid4().hex}'
    CONF.set_override('transport_url', 'kombu+stewardmem:////')
    CONF.set_override('rpc_topic_conductor', topic)
    transport = rpc.Transport()
    recorder = Recorder()
    server = transport.start_server(topic, 'conductor', [recorder])
    try:
        api = rpcapi.ConductorAPI(transport=transport)
        host = 'fleet-0042'
        real = agent_manager.AgentManager(CONF, api, host=host,
                                          drivers=[fake.FakeDriver(CONF, host)])
        sim = fleet_agent.SimAgent(api, host, [fake.FakeDriver(CONF, host)])
        assert real.run_cycle() == ANSWER
        assert sim.run_cycle() == sim.run_cycle() == ANSWER
        assert real.rp_name == sim.rp_name
    finally:
        rpc.stop_server(server)
        transport.cleanup()
        CONF.clear_override('transport_url')
        CONF.clear_override('rpc_topic_conductor')

    (real_ctx, real_args), (sim_ctx, sim_args), (again_ctx, again_args) = \
        recorder.received
    assert sim_args == real_args == again_args
    assert real_args['devices'], 'the fake driver reports one device'
    # Each report has its own request id, as each cycle of a real agent does;
    # every other field of the context is the same.
    ids = {c.pop('request_id') for c in (real_ctx, sim_ctx, again_ctx)}
    assert len(ids) == 3
    for c in (real_ctx, sim_ctx, again_ctx):
        c.pop('global_request_id', None)
    assert sim_ctx == real_ctx == again_ctx
