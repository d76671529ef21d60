"""A discovery report and a bind racing on one device, on PostgreSQL (READ
COMMITTED) and MariaDB (REPEATABLE READ), where they really run in parallel: the
cleanup action locked in when the device was bound survives the report, whichever
commits first."""
import json
import threading
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm

from steward.db import devices as device_db
from steward.drivers import base
from steward.placement import client as placement_client
from tests.fixtures import placement_fixture
from tests.functional import conductor_fixtures as cf
from tests.functional.lifecycle_stack import RC, nvme_device, wait_for

ADDRESS = '0000:0a:00.0'


class ActionDriver(base.Driver):
    """One NVMe controller whose driver locks in ``self.action`` at discovery."""
    name = 'cleanable'

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.action = 'test_erase'

    def discover(self):
        dev = nvme_device(self.host, ADDRESS)
        board = json.loads(dev.std_board_info)
        board['cleanup_action'] = self.action
        dev.std_board_info = json.dumps(board, sort_keys=True)
        return [dev]


class HeldCommit:
    """Holds the first commit made in ``thread`` until ``go`` is set: the bind's
    write transaction, with its device row locked, stays open meanwhile."""

    def __init__(self):
        self.thread = None
        self.reached, self.go = threading.Event(), threading.Event()
        self._done = False

    def __call__(self, _session):
        if threading.current_thread() is self.thread and not self._done:
            self._done = True
            self.reached.set()
            self.go.wait(60)


_LOCK_WAITS = {
    'postgresql': "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                  "current_database() AND wait_event_type = 'Lock'",
    # Not innodb_trx's LOCK WAIT: MariaDB 10.11 left the waiting report out of
    # it (seen under load). The report's locking read still running on the
    # server is the wait: the bind holds the rows until the test lets it commit.
    'mysql': "SELECT count(*) FROM information_schema.processlist "
             "WHERE info LIKE '%FROM devices%FOR UPDATE%' "
             "AND info NOT LIKE '%information_schema%'",
}


def _waiting_on_a_lock(database):
    with database.engine.connect() as conn:
        return conn.execute(sa.text(_LOCK_WAITS[conn.dialect.name])).scalar()


@pytest.mark.parametrize('db', ['postgresql', 'mysql'], indirect=True)
def test_a_report_during_a_bind_keeps_the_locked_cleanup_action(transport, database, db, conf):
    server = placement_fixture.get_placement()
    client = placement_client.PlacementClient.from_conf(endpoint=server.url)
    host = placement_fixture.unique_name('race')
    driver = ActionDriver(conf, host)
    conductor, agent = cf.stack(database, transport, conf, client, host=host, drivers=[driver])
    cf.make_profile(database, 'race', [{f'resources:{RC}': '1'}])
    arq = conductor.arq_create(cf.admin(), 'race', 'p')[0]['uuid']
    dep = cf.deployable(database, ADDRESS)

    held = HeldCommit()
    results = {}
    event.listen(orm.Session, 'before_commit', held)
    try:
        def bind():
            results['bind'] = conductor.arq_bind(cf.admin(), [{
                'uuid': arq, 'hostname': host, 'device_rp_uuid': dep.rp_uuid,
                'instance_uuid': str(uuid.uuid4())}])
        held.thread = threading.Thread(target=bind)
        held.thread.start()
        assert held.reached.wait(60), 'the bind never reached its commit'

        # The drive's policy changes while the bind is committing.
        driver.action = 'other_erase'
        conductor.reporter.forget(host)
        report = threading.Thread(target=lambda: results.update(report=agent.run_cycle()))
        report.start()
        wait_for(lambda: _waiting_on_a_lock(database), 'the report to wait for the bind\'s row lock')
        held.go.set()
        held.thread.join(60)
        report.join(60)
    finally:
        held.go.set()
        event.remove(orm.Session, 'before_commit', held)

    assert results['bind'][0]['state'] == 'Bound'
    assert 'report' in results
    with database.reader() as s:
        device = device_db.device_get(s, device_db.device_list(s, {'hostname': host})[0].uuid)
        assert device.device_state == 'allocated'
        # Released now, it would be cleaned with the action it was bound with.
        assert json.loads(device.std_board_info)['cleanup_action'] == 'test_erase'
