"""Quiet reports judged by the digest stored in the database (issue 36): an agent
whose report is the one a conductor acknowledged sends only the digest (conductor
RPC 1.3 ``report_unchanged``); any conductor takes it without a statement
written or a Placement request, a changed report is still applied in full, a
conductor that never saw the host judges it by the database, and an agent of
the previous release (or one capped by ``[upgrade_levels] conductor``) is served
with whole reports."""
import contextlib
import uuid

import pytest
import sqlalchemy as sa

from steward.agent import rpcapi as agent_rpcapi
from steward.agent.manager import AgentManager
from steward.agent.rpcapi import AgentAPI
from steward.conductor.manager import ConductorManager
from steward.common import report_digest
from steward.common import rpc
from steward.conductor import rpcapi
from steward.conductor.local_api import LocalConductorAPI
from steward.conductor.rpcapi import ConductorAPI
from steward.conf import CONF
from steward.db import attributes as attribute_db
from steward.drivers import fake
from steward.drivers import objects
from tests.fixtures import placement_fixture
from tests.fixtures.stack import wait_for
from tests.functional import conductor_fixtures as cf

QUIET = {'changed': False, 'placement_writes': 0}


class TraitDriver(fake.FakeDriver):
    """The fake driver, with a trait the test changes between cycles."""
    trait = 'CUSTOM_FAKE_DEVICE'

    def discover(self):
        devices = super().discover()
        for dev in devices:
            for dep in dev.deployable_list:
                dep.attribute_list = [a if a.key != 'trait0' else
                                      objects.DriverAttribute('trait0', self.trait)
                                      for a in dep.attribute_list]
        return devices


@pytest.fixture
def placement():
    return placement_fixture.client_and_server()


@contextlib.contextmanager
def statements(database):
    """The SQL statements run on ``database`` meanwhile (a list, filled in)."""
    seen = []

    def record(conn, cursor, statement, *args):
        seen.append(statement.split(None, 1)[0].upper())

    sa.event.listen(database.engine, 'before_cursor_execute', record)
    try:
        yield seen
    finally:
        sa.event.remove(database.engine, 'before_cursor_execute', record)


def writes(seen):
    return [s for s in seen if s in ('INSERT', 'UPDATE', 'DELETE')]


def traits_of(database, host):
    with database.reader() as s:
        dep = cf.deployable(database, host)
        return {a.value for a in attribute_db.attributes_by_deployable(s, [dep.id])[dep.id]
                if a.key.startswith('trait')}


def test_a_quiet_report_is_its_digest_alone_and_writes_nothing(
        transport, database, db, conf, placement):
    client, _server = placement
    conductor = cf.conductor_on(database, transport, client)
    host = placement_fixture.unique_name('digest')
    agent = AgentManager(conf, LocalConductorAPI(conductor), host=host,
                         drivers=[fake.FakeDriver(conf, host)])
    first = agent.run_cycle()
    assert first['changed'] and 'error' not in first
    assert agent.reports.acknowledged == first['digest']

    before = dict(client.stats)
    with statements(database) as seen:
        for _ in range(3):
            assert cf.summary(agent.run_cycle()) == QUIET
    assert agent.reports.digests_sent == 3 and agent.reports.reports_sent == 1
    # No statement written (the readings' times were written with the rows),
    # no Placement request at all.
    assert writes(seen) == []
    assert client.stats == before


def test_a_changed_report_after_quiet_ones_is_applied(
        transport, database, db, conf, placement):
    client, server = placement
    conductor = cf.conductor_on(database, transport, client)
    host = placement_fixture.unique_name('digest')
    driver = TraitDriver(conf, host)
    agent = AgentManager(conf, LocalConductorAPI(conductor), host=host, drivers=[driver])
    agent.run_cycle()
    assert cf.summary(agent.run_cycle()) == QUIET
    assert agent.reports.digests_sent == 1

    driver.trait = 'CUSTOM_FAKE_CHANGED'
    result = agent.run_cycle()
    assert result['changed'] and result['placement_writes'] >= 1
    assert agent.reports.reports_sent == 2
    assert traits_of(database, host) == {'CUSTOM_FAKE_CHANGED'}
    dep = cf.deployable(database, host)
    assert 'CUSTOM_FAKE_CHANGED' in client.get_traits(dep.rp_uuid)
    # The new report is the one acknowledged now: quiet again, by digest.
    assert cf.summary(agent.run_cycle()) == QUIET
    assert agent.reports.digests_sent == 2

    # A repair that forgets the host (the drift repair, a cleanup's Placement
    # failure): the digest alone is refused and the whole report follows.
    conductor.reporter.forget(host)
    before = agent.reports.reports_sent
    assert cf.summary(agent.run_cycle())['changed']
    assert agent.reports.reports_sent == before + 1


@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_a_conductor_that_never_saw_the_host_judges_it_by_the_database(
        transport, database, db, conf, placement):
    client, server = placement
    first = cf.conductor_on(database, transport, client)
    # Another conductor (its own Placement client, so that its requests are its
    # own), whose memory of the digests table was read before the host
    # registered: it learns the host's digest from the database when asked.
    other_client = placement_fixture.client_and_server()[0]
    other = cf.conductor_on(database, transport, other_client)
    assert other.reporter.stored.cached('no-such-host') is None
    # A third one whose memory stays the one read now, however slow the machine.
    third_client = placement_fixture.client_and_server()[0]
    third = cf.conductor_on(database, transport, third_client)
    third.reporter.stored.refresh = float('inf')
    assert third.reporter.stored.cached('no-such-host') is None
    host = placement_fixture.unique_name('digest')
    driver = TraitDriver(conf, host)
    agent = AgentManager(conf, LocalConductorAPI(first), host=host, drivers=[driver])
    agent.run_cycle()
    assert other.reporter.stored.cached(host) is None

    agent.conductor = LocalConductorAPI(other)
    before = dict(other_client.stats)
    whole = agent.reports.reports_sent
    with statements(database) as seen:
        assert cf.summary(agent.run_cycle()) == QUIET
    assert writes(seen) == []
    assert other_client.stats == before
    # Taken as the digest alone: no resend asked.
    assert agent.reports.reports_sent == whole
    assert other.reporter.stored.cached(host) is not None
    # A whole report of the same devices (an agent of the previous release) too.
    devices = [d.to_dict() for d in driver.discover()]
    with statements(database) as seen:
        assert cf.summary(LocalConductorAPI(other).report_data(
            cf.admin(), host, host, devices)) == QUIET
    assert writes(seen) == []
    assert other_client.stats == before
    # A conductor whose memory has no digest of the host does not look one up for
    # a whole report (a fleet's first reports would each cost a lookup): the
    # report goes through the diff, which finds the rows as they are and writes
    # only the digest; Placement is read, not written.
    third_before = dict(third_client.stats)
    dep_before = cf.deployable(database, host)
    with statements(database) as seen:
        result = LocalConductorAPI(third).report_data(cf.admin(), host, host, devices)
    # Not taken as quiet (that needed the lookup): judged by the diff.
    assert result['changed'] and 'error' not in result
    assert result['placement_writes'] == 0
    assert third_client.stats['writes'] == third_before['writes']
    # Nothing removed or re-created: the same rows (the digest, and on a slow
    # machine the health reading's time, are what it updates).
    assert 'DELETE' not in writes(seen)
    dep_after = cf.deployable(database, host)
    assert (dep_after.id, dep_after.uuid, dep_after.rp_uuid) == \
        (dep_before.id, dep_before.uuid, dep_before.rp_uuid)
    assert traits_of(database, host) == {'CUSTOM_FAKE_DEVICE'}

    # The host changes through this conductor, then changes back through the
    # first one, which had acknowledged the old report itself: judged by the
    # database, not by its memory, the change back is applied.
    driver.trait = 'CUSTOM_FAKE_CHANGED'
    assert agent.run_cycle()['changed']
    assert traits_of(database, host) == {'CUSTOM_FAKE_CHANGED'}
    driver.trait = 'CUSTOM_FAKE_DEVICE'
    agent.conductor = LocalConductorAPI(first)
    assert agent.run_cycle()['changed']
    assert traits_of(database, host) == {'CUSTOM_FAKE_DEVICE'}
    # (Placement's side here is the first conductor's Placement client's: it
    # remembers the traits it wrote itself and writes only what differs from
    # that, so the provider another conductor changed meanwhile is brought back
    # by the drift repair, steward/conductor/selfheal.py, not by this report.)


class PreviousConductor:
    """A conductor of an earlier release on the RPC server (RPC 1.2: no
    report_unchanged; nor, before 1.4, a word on casting quiet reports), over
    this release's manager."""

    def __init__(self, manager):
        import oslo_messaging as messaging
        self.target = messaging.Target(version='1.2')
        self.manager = manager

    def report_data(self, ctx, host, rp_name, devices):
        result = self.manager.report_data(ctx, host, rp_name, devices)
        result.pop('quiet_cast', None)
        return result


@pytest.mark.parametrize('case', ['agent capped at 1.2', 'conductor of 1.2'])
def test_agents_and_conductors_of_the_previous_release(
        case, transport, database, db, conf, placement):
    """An agent capped by [upgrade_levels] conductor = 1.2 never sends a digest
    alone; an uncapped agent whose conductor is of the previous release (no
    report_unchanged) falls back to whole reports; both are served, quiet."""
    client, _server = placement
    manager = cf.conductor_on(database, transport, client)
    topic = f'digest-{uuid.uuid4().hex}'
    conf.set_override('rpc_topic_conductor', topic)
    endpoint = manager if case == 'agent capped at 1.2' else PreviousConductor(manager)
    server = transport.start_server(topic, 'conductor', [endpoint])
    try:
        api = ConductorAPI(transport=transport,
                           version_cap='1.2' if case == 'agent capped at 1.2' else None)
        host = placement_fixture.unique_name('previous')
        agent = AgentManager(conf, api, host=host, drivers=[fake.FakeDriver(conf, host)])
        assert agent.run_cycle()['changed']
        before = dict(client.stats)
        with statements(database) as seen:
            assert [cf.summary(agent.run_cycle()) for _ in range(2)] == [QUIET] * 2
        assert writes(seen) == []
        assert client.stats == before
        if case == 'agent capped at 1.2':
            assert agent.reports.digests_sent == 0
            assert agent.reports.reports_sent == 3
        else:
            # Each cycle tries the digest, is refused by the old conductor and
            # sends the whole report.
            assert agent.reports.reports_sent == 3
    finally:
        rpc.stop_server(server)
        conf.clear_override('rpc_topic_conductor')


def test_the_digest_is_the_agents_and_the_conductors_alike():
    devices = [{'a': 1, 'health': {'state': 'ok', 'read_at': '2026-11-28T10:00:00'}}]
    later = [{'a': 1, 'health': {'state': 'ok', 'read_at': '2026-11-28T10:01:00'}}]
    assert report_digest.digest('h', devices) == report_digest.digest('h', later)
    assert rpcapi.REPORT_DIGEST_VERSION == '1.3'
    assert rpcapi.QUIET_CAST_VERSION == '1.4' == rpcapi.RPC_API_VERSION
    assert agent_rpcapi.REPORT_AGAIN_VERSION == '1.2' == agent_rpcapi.RPC_API_VERSION
    assert CONF is not None


class Counting:
    """The conductor's endpoints over RPC, counting the quiet reports that arrive
    (a cast's answer reaches nobody)."""

    def __init__(self, manager):
        self.manager = manager
        self.target = manager.target
        self.quiet = 0

    def __getattr__(self, name):
        return getattr(self.manager, name)

    def report_quiet(self, ctx, **kw):
        self.manager.report_quiet(ctx, **kw)
        self.quiet += 1


@contextlib.contextmanager
def over_rpc(transport, conf, manager, version_cap=None):
    """(ConductorAPI over ``transport``, Counting) with ``manager`` serving a
    topic of its own."""
    topic = f'digest-{uuid.uuid4().hex}'
    conf.set_override('rpc_topic_conductor', topic)
    endpoint = Counting(manager)
    server = transport.start_server(topic, 'conductor', [endpoint])
    try:
        yield ConductorAPI(transport=transport, version_cap=version_cap), endpoint
    finally:
        rpc.stop_server(server)
        conf.clear_override('rpc_topic_conductor')


def test_quiet_reports_over_rpc_are_casts_and_a_refused_one_brings_the_whole_report(
        transport, database, db, conf, placement):
    """Once a conductor said it can reach the agent, the digest goes as a cast
    (conductor RPC 1.4); a conductor that cannot take it (the host forgotten for
    a repair) asks the agent (agent RPC 1.2 report_again), whose discovery sends
    the whole report at once."""
    client, _server = placement
    manager = cf.conductor_on(database, transport, client)
    conf.set_override('discovery_interval', 3600, group='agent')
    with over_rpc(transport, conf, manager) as (api, endpoint):
        host = placement_fixture.unique_name('cast')
        agent = AgentManager(conf, api, host=host, drivers=[fake.FakeDriver(conf, host)])
        agent_server = transport.start_server(conf.rpc_topic_agent, host, [agent])
        try:
            first = agent.run_cycle()
            assert first['changed'] and first['quiet_cast'] is True
            before = dict(client.stats)
            with statements(database) as seen:
                for n in range(1, 4):
                    assert cf.summary(agent.run_cycle()) == QUIET
                    wait_for(lambda n=n: endpoint.quiet == n, f'quiet report {n}')
            assert writes(seen) == [] and client.stats == before
            assert (agent.reports.digests_sent, agent.reports.reports_sent) == (3, 1)

            # The discovery thread, waiting out its hour, is what report_again wakes.
            agent.start()
            wait_for(lambda: agent.cycles == 5, 'the discovery thread\'s first cycle')
            # Its digest, cast, taken before the host is forgotten: taken after, it
            # would ask for a second whole report (and a cycle more).
            wait_for(lambda: endpoint.quiet == 4, 'the first cycle\'s quiet report')
            manager.reporter.forget(host)
            assert cf.summary(agent.run_cycle()) == QUIET     # the cast: no answer
            wait_for(lambda: agent.reports.reports_sent == 2,
                     'the whole report asked for by the conductor')
            wait_for(lambda: agent.cycles == 7, 'the cycle that sent it to end')
            assert agent.reports.acknowledged == first['digest']
            assert manager.reporter.stored.get(host)[0] == first['digest']
        finally:
            agent.stop()
            rpc.stop_server(agent_server)


@pytest.mark.parametrize('case', ['agent capped at 1.3', 'conductor capped below agent 1.2'])
def test_quiet_reports_are_calls_when_a_cast_could_not_be_answered(
        case, transport, database, db, conf, placement):
    """An agent capped by [upgrade_levels] conductor = 1.3, or one whose
    conductor cannot send agent 1.2 ([upgrade_levels] agent = 1.1: agents of
    the previous release), sends its digest as a call, answered."""
    client, _server = placement
    manager = ConductorManager(cf.deps(database, transport, client, agent_api=AgentAPI(
        transport, version_cap='1.1' if case.startswith('conductor') else None)))
    manager.init_host()
    with over_rpc(transport, conf, manager,
                  version_cap='1.3' if case == 'agent capped at 1.3' else None) as (
            api, endpoint):
        host = placement_fixture.unique_name('called')
        agent = AgentManager(conf, api, host=host, drivers=[fake.FakeDriver(conf, host)])
        first = agent.run_cycle()
        assert first.get('quiet_cast', False) is (case == 'agent capped at 1.3')
        assert [cf.summary(agent.run_cycle()) for _ in range(2)] == [QUIET] * 2
        assert agent.reports.digests_sent == 2 and endpoint.quiet == 0
