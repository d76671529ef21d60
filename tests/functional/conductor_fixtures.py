"""Helpers to stand up a conductor + fake agent on the test database."""
from steward import metrics as steward_metrics
from steward.agent import rpcapi as agent_rpcapi
from steward.agent.manager import AgentManager
from steward.common import context
from steward.conductor import deps as conductor_deps
from steward.conductor import nova_servers
from steward.conductor.manager import ConductorManager
from steward.conductor.local_api import LocalConductorAPI
from steward.db import deployables as deployable_db
from steward.db import device_profiles as profile_db
from steward.drivers.fake import FakeDriver


class RecordingNotifier:
    """Collects the events the conductor would send to Nova (the Nova client
    itself is exercised against a real HTTP listener elsewhere)."""

    def __init__(self):
        self.events = []

    def notify(self, events):
        self.events.extend(events)

    def stop(self):
        pass


def deps(database, transport, placement=None, metrics=None, agent_api=None):
    """A conductor's Deps as the composition root (steward/cmd/root.py) builds
    them, with a RecordingNotifier for Nova's events; ``metrics`` None: a Metrics
    of this conductor's own; ``agent_api`` None: an AgentAPI on ``transport``."""
    return conductor_deps.Deps(
        database=database,
        metrics=metrics if metrics is not None else steward_metrics.Metrics(database),
        placement_client=placement, nova=nova_servers.ServerLookup(), notifier=RecordingNotifier(),
        agent_api=agent_api if agent_api is not None else agent_rpcapi.AgentAPI(transport))


def conductor_on(database, transport, placement=None):
    """A conductor on ``database`` and ``placement`` (a Placement client), its
    start-up work done."""
    conductor = ConductorManager(deps(database, transport, placement))
    conductor.init_host()
    return conductor


def stack(database, transport, conf, placement=None, host='host-a', drivers=None):
    conductor = conductor_on(database, transport, placement)
    agent = AgentManager(conf, LocalConductorAPI(conductor), host=host,
                         drivers=drivers if drivers is not None
                         else [FakeDriver(conf, host)])
    agent.init_host()
    agent.run_cycle()
    return conductor, agent


def make_profile(database, name='dp1', groups=None):
    with database.writer() as s:
        profile_db.device_profile_create(s, name, groups or [{'resources:FPGA': '1'}])


def deployable(database, name_like=None):
    with database.reader() as s:
        deps = deployable_db.deployable_list(s)
    return next(d for d in deps if name_like is None or name_like in d.name)


def admin():
    return context.get_admin_context()


def lock_waits(database):
    """How many transactions wait for a row lock now (PostgreSQL: of this
    database; MariaDB: of the server). On MariaDB from InnoDB's status: a
    transaction that has written nothing yet (a bind's first locking read at
    READ COMMITTED) has no id, and information_schema.INNODB_TRX leaves it out."""
    with database.single_read() as conn:
        if conn.dialect.name == 'postgresql':
            return conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'").scalar()
        status = innodb_status(conn)
        transactions = status[status.find('\nTRANSACTIONS\n'):]
        return transactions.count('\nLOCK WAIT ')


def innodb_status(conn):
    """MariaDB's ``SHOW ENGINE INNODB STATUS`` text."""
    return conn.exec_driver_sql('SHOW ENGINE INNODB STATUS').fetchall()[0][2]


def summary(result):
    """A report's answer without the digest that acknowledges it and the word
    on how the next quiet one may go."""
    return {k: v for k, v in result.items() if k not in ('digest', 'quiet_cast')}
