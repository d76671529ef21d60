"""oslo.policy's own tools find Steward through its ``oslo.policy.enforcer`` entry
point (steward.common.policy:get_enforcer): the real scripts of the venv."""
import json
import os
import subprocess
import sys

import pytest

BIN = os.path.dirname(sys.executable)


def tool(name, *args):
    return subprocess.run([os.path.join(BIN, name), *args], capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def policy_conf(tmp_path):
    """A policy file restating one default and overriding another."""
    policy = tmp_path / 'policy.yaml'
    policy.write_text('"cyborg:device:get_all": "rule:project_manager_or_admin"\n'
                      '"cyborg:device:clean": "role:admin or role:cleaner"\n')
    conf = tmp_path / 'steward.conf'
    conf.write_text(f'[oslo_policy]\npolicy_file = {policy}\n')
    return conf


def test_list_redundant_names_the_rules_equal_to_the_defaults(policy_conf):
    out = tool('oslopolicy-list-redundant', '--namespace', 'steward',
               '--config-file', str(policy_conf))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        '"cyborg:device:get_all": "rule:project_manager_or_admin"']


def test_effective_policy_then_checker(policy_conf, tmp_path):
    effective = tmp_path / 'effective.yaml'
    out = tool('oslopolicy-policy-generator', '--namespace', 'steward',
               '--config-file', str(policy_conf), '--output-file', str(effective))
    assert out.returncode == 0, out.stderr
    text = effective.read_text()
    # Steward's defaults with the file's override on top.
    assert '"cyborg:device:clean": "role:admin or role:cleaner"' in text
    assert '"cyborg:device:history": "rule:cloud_reader"' in text
    access = tmp_path / 'access.json'
    access.write_text(json.dumps({'token': {'roles': [{'name': 'cleaner'}],
                                            'user': {'id': 'u1'},
                                            'project': {'id': 'p1'}}}))
    for rule, verdict in (('cyborg:device:clean', 'passed'),
                          ('cyborg:device:history', 'failed')):
        out = tool('oslopolicy-checker', '--policy', str(effective), '--access',
                   str(access), '--rule', rule)
        assert out.stdout.strip() == f'{verdict}: {rule}', out.stderr


def test_validator_refuses_a_rule_naming_no_rule(policy_conf, tmp_path):
    out = tool('oslopolicy-validator', '--namespace', 'steward',
               '--config-file', str(policy_conf))
    assert out.returncode == 0, out.stdout + out.stderr
    bad = tmp_path / 'bad.yaml'
    bad.write_text('"cyborg:device:clean": "rule:no_such_rule"\n')
    conf = tmp_path / 'bad.conf'
    conf.write_text(f'[oslo_policy]\npolicy_file = {bad}\n')
    out = tool('oslopolicy-validator', '--namespace', 'steward', '--config-file', str(conf))
    assert out.returncode == 1
    assert 'Invalid rules found' in out.stdout
