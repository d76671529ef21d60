"""The administrative commands as an operator runs them: real subprocesses."""
import os
import sqlite3
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEWARD = os.path.join(os.path.dirname(sys.executable), 'steward')


def run(*args, conf):
    return subprocess.run([STEWARD, *args, '--config-file', conf], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def conf_file(tmp_path):
    path = tmp_path / 'steward.conf'
    path.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\n')
    return str(path), tmp_path / 'steward.sqlite'


def test_db_sync_then_upgrade_check_passes(conf_file):
    conf, dbfile = conf_file
    assert run('status', 'upgrade', 'check', conf=conf).returncode != 0  # no schema yet
    out = run('db', 'sync', conf=conf)
    assert out.returncode == 0, out.stderr
    from steward.db import migration
    assert f'revision {migration.head_revision()}' in out.stdout
    check = run('status', 'upgrade', 'check', conf=conf)
    assert check.returncode == 0, check.stdout + check.stderr


def test_device_state_backfill_from_a_pre_device_state_schema(conf_file):
    """An upgrade: schema at 0001 (no device_state) with a bound device and a free
    one; after db sync both are NULL and the check fails; the online migration sets
    allocated and available."""
    conf, dbfile = conf_file
    subprocess.run([sys.executable, '-c', f'''
import warnings; warnings.filterwarnings("ignore")
from steward.conf import CONF
CONF(["--config-file", {conf!r}], project="steward")
from steward.db import migration
from steward.db import session
migration.upgrade(session.Database(), "0001")
'''], check=True, capture_output=True)
    con = sqlite3.connect(dbfile)
    con.executescript('''
        INSERT INTO devices (id, uuid, type, vendor, model, hostname, status, created_at)
          VALUES (1, "d-bound", "FPGA", "v", "m", "h", "enabled", "2026-01-01"),
                 (2, "d-free",  "FPGA", "v", "m", "h", "enabled", "2026-01-01");
        INSERT INTO controlpath_ids (id, uuid, device_id, cpid_type, cpid_info, created_at)
          VALUES (1, "c1", 1, "PCI", "{}", "2026-01-01"), (2, "c2", 2, "PCI", "{}", "2026-01-01");
        INSERT INTO deployables (id, uuid, name, num_accelerators, device_id, created_at)
          VALUES (1, "dep1", "h_1", 1, 1, "2026-01-01"), (2, "dep2", "h_2", 1, 2, "2026-01-01");
        INSERT INTO attach_handles (id, uuid, deployable_id, cpid_id, in_use, attach_type,
                                    attach_info, created_at)
          VALUES (1, "ah1", 1, 1, 1, "PCI", "{}", "2026-01-01");
        INSERT INTO device_profiles (id, uuid, name, profile_json, created_at)
          VALUES (1, "dp", "dp", '{"groups": []}', "2026-01-01");
        INSERT INTO extended_accelerator_requests (id, uuid, state, device_profile_id,
            device_profile_group_id, attach_handle_id, deployable_id, created_at)
          VALUES (1, "arq1", "Bound", 1, 0, 1, 1, "2026-01-01");
    ''')
    con.commit()
    assert run('db', 'sync', conf=conf).returncode == 0
    check = run('status', 'upgrade', 'check', conf=conf)
    assert check.returncode != 0 and 'no device_state' in check.stdout
    out = run('db', 'online-data-migrations', conf=conf)
    assert out.returncode == 0, out.stderr
    assert 'backfill_device_state: 2 row(s) migrated' in out.stdout
    assert dict(con.execute('SELECT uuid, device_state FROM devices')) == {
        'd-bound': 'allocated', 'd-free': 'available'}
    assert run('status', 'upgrade', 'check', conf=conf).returncode == 0


def test_config_sample_is_current(tmp_path):
    out = tmp_path / 'sample.conf'
    subprocess.run([os.path.join(os.path.dirname(sys.executable), 'oslo-config-generator'),
                    '--config-file', os.path.join(ROOT, 'etc/steward-config-generator.conf'),
                    '--output-file', str(out)], check=True, capture_output=True, cwd=ROOT)
    with open(os.path.join(ROOT, 'etc/steward.conf.sample')) as f:
        assert out.read_text() == f.read(), \
            'regenerate: oslo-config-generator --config-file etc/steward-config-generator.conf'


def test_help_and_unknown_command():
    assert subprocess.run([STEWARD, '--help'], capture_output=True).returncode == 0
    assert subprocess.run([STEWARD, 'nope'], capture_output=True).returncode == 2


def test_policy_sample_is_current(tmp_path):
    out = tmp_path / 'policy.yaml'
    subprocess.run([os.path.join(os.path.dirname(sys.executable), 'oslopolicy-sample-generator'),
                    '--config-file', os.path.join(ROOT, 'etc/steward-policy-generator.conf'),
                    '--output-file', str(out)], check=True, capture_output=True, cwd=ROOT)
    with open(os.path.join(ROOT, 'etc/policy.yaml.sample')) as f:
        assert out.read_text() == f.read(), \
            'regenerate: oslopolicy-sample-generator --config-file etc/steward-policy-generator.conf'
