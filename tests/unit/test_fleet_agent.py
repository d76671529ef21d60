"""bench/fleet.py's simulated host sends the conductor what a real agent sends.

Both go through a real ConductorAPI over oslo.messaging (the in-process kombu
transport Steward's single host uses) to an RPC server whose endpoint records
what arrives: the method, its arguments and the context, as the conductor's
dispatcher hands them over."""
import threading
import uuid

import oslo_messaging as messaging

from bench import fleet_agent
from steward.agent import manager as agent_manager
from steward.common import report_digest
from steward.common import rpc
from steward.conductor import rpcapi
from steward.conf import CONF
from steward.drivers import fake
from tests.fixtures.stack import wait_for

ANSWER = {'changed': False, 'placement_writes': 0}


class Recorder:
    """The conductor's report endpoints, keeping what they were sent: a report
    is acknowledged with its digest, as a conductor does once it is applied,
    saying that quiet reports may be casts."""
    target = messaging.Target(version=rpcapi.RPC_API_VERSION)

    def __init__(self):
        self.received = []
        self.arrived = threading.Event()

    def report_data(self, ctx, host, rp_name, devices):
        self.received.append((ctx.to_dict(), {'method': 'report_data', 'host': host,
                                              'rp_name': rp_name, 'devices': devices}))
        self.arrived.set()
        return dict(ANSWER, digest=report_digest.digest(rp_name, devices),
                    quiet_cast=True)

    def report_quiet(self, ctx, host, rp_name, digest, read_at=None):
        self.received.append((ctx.to_dict(), {'method': 'report_quiet',
                                              'host': host, 'rp_name': rp_name,
                                              'digest': digest, 'read_at': read_at}))


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
        assert cf_summary(real.run_cycle()) == cf_summary(real.run_cycle()) == ANSWER
        assert cf_summary(sim.run_cycle()) == cf_summary(sim.run_cycle()) == ANSWER
        assert real.rp_name == sim.rp_name
        # The quiet reports are casts: wait for them to arrive.
        wait_for(lambda: len(recorder.received) == 4, 'the two quiet reports')
    finally:
        rpc.stop_server(server)
        transport.cleanup()
        CONF.clear_override('transport_url')
        CONF.clear_override('rpc_topic_conductor')

    # Each sends its whole report first, then (acknowledged) only its digest, cast.
    (real_ctx, real_args), (real_ctx2, real_args2), (sim_ctx, sim_args), \
        (again_ctx, again_args) = recorder.received
    # The health readings' times are the moment each discovery ran.
    for args in (real_args, sim_args):
        args['devices'] = report_digest.without_read_at(args['devices'])
    for args in (real_args2, again_args):
        assert args.pop('read_at')
    assert sim_args == real_args
    assert real_args['method'] == 'report_data'
    assert again_args == real_args2
    assert real_args2 == {'method': 'report_quiet', 'host': host,
                          'rp_name': host,
                          'digest': report_digest.digest(host, real_args['devices'])}
    assert real_args['devices'], 'the fake driver reports one device'
    # Each report has its own request id, as each cycle of a real agent does;
    # every other field of the context is the same.
    contexts = (real_ctx, real_ctx2, sim_ctx, again_ctx)
    ids = {c.pop('request_id') for c in contexts}
    assert len(ids) == 4
    for c in contexts:
        c.pop('global_request_id', None)
    assert sim_ctx == real_ctx == again_ctx == real_ctx2


def cf_summary(result):
    return {k: v for k, v in result.items() if k not in ('digest', 'quiet_cast')}
