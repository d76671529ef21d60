"""Policy defaults, the entry point, and overrides from a policy file."""
import importlib
import os
import re

import pytest
from oslo_policy import opts as policy_opts

from steward.api import policy as api_policy
from steward.common import policy as default_policy
from steward.conf import CONF
from tests.functional.api.conftest import MEMBER, READER, identity

MANAGER_ONLY = identity(['manager'])


def test_entry_point_target_lists_every_rule_used():
    module, _, attr = 'steward.common.policy:list_rules'.partition(':')
    rules = {r.name: r for r in getattr(importlib.import_module(module), attr)()}
    handlers_dir = os.path.join(os.path.dirname(api_policy.__file__), 'handlers')
    used = set()
    for name in os.listdir(handlers_dir):
        if name.endswith('.py'):
            with open(os.path.join(handlers_dir, name)) as f:
                used |= set(re.findall(r"'(cyborg:[a-z_]+:[a-z_]+)'", f.read()))
    assert used and used <= set(rules)
    for name in used:
        # The cloud's hardware is also readable with a system-scoped token.
        expected = (['system', 'project'] if rules[name].check_str == 'rule:cloud_reader'
                    else ['project'])
        assert rules[name].scope_types == expected


# A few of upstream's defaults by name; test_policy_upstream.py compares them all
# with openstack-cyborg 17.0.0's own.
@pytest.mark.parametrize('rule,expected', [
    ('cyborg:device:get_all', 'rule:project_manager_or_admin'),
    ('cyborg:deployable:get_one', 'rule:project_manager_or_admin'),
    ('cyborg:attribute:get_all', 'rule:project_manager_or_admin'),
    ('cyborg:device:disable', 'rule:admin_api'),
    ('cyborg:device_profile:create', 'rule:admin_api'),
    ('cyborg:device_profile:get_all', 'rule:project_reader_or_admin'),
    ('cyborg:arq:get_all', 'rule:project_reader_or_admin'),
    ('cyborg:arq:update', 'rule:project_member_or_service'),
    # Steward's own: the cloud operator's.
    ('cyborg:device:clean', 'rule:admin_api'),
    ('cyborg:device:erase_records', 'rule:cloud_reader'),
    ('cyborg:device:history', 'rule:cloud_reader'),
])
def test_defaults_match_upstream_srbac(rule, expected):
    rules = {r.name: r.check_str for r in default_policy.list_rules()}
    assert rules[rule] == expected
    # Upstream's legacy ``allow`` rule is listed, but no API rule opens to all.
    assert not [n for n, c in rules.items() if n.startswith('cyborg:') and
                c in ('@', '', 'rule:allow')]


def test_deprecated_rules_are_not_applied(parsed_conf):
    """Upstream forces enforce_new_defaults = False (each rule ORed with its
    deprecated one: ``admin_or_owner`` lets any project user through); Steward
    keeps oslo.policy's True. Read once the API's Enforcer is built, which
    registers [oslo_policy] (alone, before any other test built one, the group
    did not exist yet)."""
    api_policy.Enforcer()
    assert CONF.oslo_policy.enforce_new_defaults is True


@pytest.fixture
def policy_file(tmp_path):
    path = tmp_path / 'policy.yaml'
    path.write_text('"cyborg:device:get_all": "role:reader"\n')
    policy_opts.set_defaults(CONF, policy_file=str(path))
    yield path
    policy_opts.set_defaults(CONF, policy_file='policy.yaml')


def test_policy_file_overrides_and_reload(policy_file, client):
    assert client.get('/v2/devices', headers=READER).status_code == 200
    assert client.get('/v2/devices', headers=MANAGER_ONLY).status_code == 403
    # Untouched rules keep their defaults.
    assert client.get('/v2/deployables', headers=READER).status_code == 403
    policy_file.write_text('"cyborg:device:get_all": "role:manager"\n')
    os.utime(policy_file, (1, 1))
    # Frozen until reloaded: no per-request file checks.
    assert client.get('/v2/devices', headers=READER).status_code == 200
    client.app.policy.reload()
    assert client.get('/v2/devices', headers=READER).status_code == 403
    assert client.get('/v2/devices', headers=MANAGER_ONLY).status_code == 200


def test_forbidden_names_the_rule(client):
    r = client.get('/v2/devices', headers=MEMBER)
    assert r.status_code == 403
    assert r.json()['error_message'] == \
        'Access was denied to the following resource: cyborg:device:get_all'
    assert r.json()['error_code'] == 'cyb.auth.forbidden'
