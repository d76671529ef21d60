"""What the separate services check at start ([DEFAULT] transport_url,
[upgrade_levels]) and the conductor's periodic finishing of interrupted deletes."""
import datetime
import functools
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from steward.arqs import ops as arq_ops
from steward.cmd import checks
from steward.common import context
from steward.common import exception
from steward.common import states
from steward.conductor import cleanup_ops
from steward.conductor import periodic
from steward.conf import CONF
from steward.db import arqs as arq_db
from steward.db import device_profiles as profile_db
from steward.db import models as m

BIN = os.path.dirname(sys.executable)


@pytest.mark.parametrize('service_name', ['conductor', 'agent'])
def test_version_cap_unset_is_newest(conf, service_name):
    assert checks.rpc_version_cap(service_name) is None


@pytest.mark.parametrize('value,expected', [('1.0', '1.0'), (' 1.1 ', '1.1'),
                                            ('01.0', '1.0')])
def test_version_cap_accepts_versions_this_release_speaks(conf, value, expected):
    conf.set_override('conductor', value, group='upgrade_levels')
    assert checks.rpc_version_cap('conductor') == expected


@pytest.mark.parametrize('value', ['2.0', '1.99', '0.9', 'ocata', '1', '1.0.1', '-1.0'])
def test_version_cap_refuses_what_this_release_cannot_send(conf, value):
    conf.set_override('agent', value, group='upgrade_levels')
    with pytest.raises(exception.InvalidConfiguration) as err:
        checks.rpc_version_cap('agent')
    assert f"[upgrade_levels] agent = {value!r}" in str(err.value)
    assert 'MAJOR.MINOR' in str(err.value)


@pytest.mark.parametrize('role', ['api', 'conductor', 'agent'])
def test_in_process_transport_is_refused_for_separate_services(conf, role):
    with pytest.raises(exception.InvalidConfiguration) as err:
        checks.check_service_config(role)
    assert f'steward {role} runs as a separate service' in str(err.value)
    assert 'rabbit://' in str(err.value)


def test_broker_password_is_not_echoed(conf):
    conf.set_override('transport_url', 'kombu+memory://user:s3cret@host:1/')
    with pytest.raises(exception.InvalidConfiguration) as err:
        checks.check_service_config('agent')
    assert 's3cret' not in str(err.value) and 'user:***@host' in str(err.value)


def test_shared_broker_is_accepted(conf):
    conf.set_override('transport_url', 'rabbit://steward:pw@ctl:5672/')
    checks.check_service_config('agent')


def _run(tmp_path, role, text):
    path = tmp_path / f'{role}.conf'
    path.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\n{text}')
    return subprocess.run([os.path.join(BIN, 'steward'), role, '--config-file',
                           str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_conductor_with_default_transport_exits_with_the_option_to_set(tmp_path):
    out = _run(tmp_path, 'conductor', '')
    assert out.returncode == 1
    assert 'transport_url' in out.stderr and 'rabbit://' in out.stderr
    assert 'Traceback' not in out.stderr + out.stdout


@pytest.mark.slow
def test_agent_with_impossible_version_cap_exits_clearly(tmp_path):
    out = _run(tmp_path, 'agent', 'transport_url = rabbit://u:p@127.0.0.1:1/\n'
                                  '[upgrade_levels]\nconductor = 2.0\n')
    assert out.returncode == 1
    assert "[upgrade_levels] conductor = '2.0'" in out.stderr
    assert 'Traceback' not in out.stderr + out.stdout


def _arq_in_deleting(database, age_seconds):
    with database.writer() as s:
        try:
            dp = profile_db.device_profile_get(s, name='reconcile-dp')
        except exception.StewardError:
            dp = profile_db.device_profile_create(s, 'reconcile-dp', [{'resources:FPGA': '1'}])
            s.flush()
        arq, = arq_db.arqs_create(s, dp, [0], 'p')
        s.execute(sa.update(m.ExtARQ).where(m.ExtARQ.uuid == arq['uuid']).values(
            state=states.ARQ_DELETING,
            updated_at=timeutils.utcnow() - datetime.timedelta(seconds=age_seconds)))
        return arq['uuid']


def test_periodic_reconcile_finishes_only_deletes_older_than_the_grace(transport, database, db):
    from tests.functional import conductor_fixtures as cf
    deps = cf.deps(database, transport)
    old = _arq_in_deleting(database, age_seconds=CONF.conductor.stale_delete_grace + 5)
    recent = _arq_in_deleting(database, age_seconds=1)
    assert periodic.finish_stale_deletes(deps, context.get_admin_context()) == 1
    with database.reader() as s:
        left = [a.uuid for a in arq_db.arq_list(s)]
    assert left == [recent] and old not in left
    # What the grace protects: the delete in progress finishes it itself.
    arq_ops.finish_deleting(deps, context.get_admin_context(), [recent],
                            dispatch=functools.partial(cleanup_ops.dispatch_cleanup, deps))
    with database.reader() as s:
        assert arq_db.arq_list(s) == []
