"""Steward's policy defaults against upstream Cyborg 17.0.0's, rule for rule.

Upstream's rules come from openstack-cyborg 17.0.0 itself, installed in its own
venv (tests/fixtures/side_venv.py, ``.venv-cyborg``, the one bench/upstream_cyborg.py runs),
read through the ``oslo.policy.policies`` namespace ``cyborg.api`` exactly as
``oslopolicy-sample-generator --namespace cyborg.api`` reads it. Steward's come
through its own namespace ``steward`` the same way. For every upstream rule name
Steward must have the same check string, scope types and deprecated rule (name
and check string); a difference fails unless it is listed in ``DIFFERENCES``
with its reason.
"""
import json
import subprocess
import sys

import pytest

from steward.common import policy as defaults
from tests.fixtures import requirements
from tests.fixtures import side_venv

# The rules as the sample generator sees them: {name: fields}.
_DUMP = r'''
import json, sys
from oslo_policy import generator
rules = generator.get_policies_dict([sys.argv[1]])[sys.argv[1]]
out = {}
for r in rules:
    dep = r.deprecated_rule
    out[r.name] = {
        'check_str': r.check_str,
        'scope_types': sorted(r.scope_types) if r.scope_types else None,
        'deprecated_rule': None if dep is None else
            {'name': dep.name, 'check_str': dep.check_str},
        'deprecated_for_removal': bool(r.deprecated_for_removal),
    }
print(json.dumps(out))
'''

# (rule name, field) -> why Steward differs. Empty: Steward's defaults are
# upstream's for every upstream rule.
DIFFERENCES = {}


def _rules(python, namespace):
    out = subprocess.run([python, '-c', _DUMP, namespace], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.fixture(scope='module')
def upstream():
    try:
        side_venv.ensure('cyborg')
    except side_venv.BuildError as exc:
        requirements.need('pypi', f'openstack-cyborg 17.0.0 venv: {exc}')
    return _rules(side_venv.bin_path('cyborg', 'python'), 'cyborg.api')


@pytest.fixture(scope='module')
def steward():
    return _rules(sys.executable, 'steward')


def test_upstream_is_cyborg_17(upstream):
    out = subprocess.run([side_venv.bin_path('cyborg', 'python'), '-c',
                          'import importlib.metadata as m; '
                          'print(m.version("openstack-cyborg"))'],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == '17.0.0'
    # The rules the issue names, so an empty dump cannot pass.
    assert upstream['cyborg:device:get_all']['check_str'] == \
        'rule:project_manager_or_admin'
    assert len(upstream) >= 30


def test_every_upstream_rule_rule_for_rule(upstream, steward):
    differences = {}
    for name, theirs in sorted(upstream.items()):
        ours = steward.get(name)
        if ours is None:
            differences[(name, 'missing')] = None
            continue
        for field in ('check_str', 'scope_types', 'deprecated_rule',
                      'deprecated_for_removal'):
            if ours[field] != theirs[field]:
                differences[(name, field)] = (ours[field], theirs[field])
    unexplained = {k: v for k, v in differences.items() if k not in DIFFERENCES}
    assert not unexplained, unexplained
    stale = set(DIFFERENCES) - set(differences)
    assert not stale, f'listed differences that are gone: {stale}'


def test_steward_extras_are_named_and_for_the_operator(upstream, steward):
    extra = set(steward) - set(upstream)
    assert extra == defaults.STEWARD_ONLY
    for name in extra:
        if name.startswith('cyborg:'):
            # Never a project persona: the admin role or a system reader.
            assert steward[name]['check_str'] in ('rule:admin_api',
                                                  'rule:cloud_reader'), name
