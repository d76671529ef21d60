"""The policy matrix of spec 1, every row x every capability combination.

EXPECTED is the spec's table copied as data (the "else" chains read left to right);
the test derives nothing from the code under test.
"""
import itertools

import pytest

from steward.drivers import nvme_policy as p

CES, BES, WZ, SHRED = 'sanitize_crypto', 'sanitize_block', 'write_zeroes', 'shred'
EXPECTED = {
    # clear_action, clear_strategy: ladder from the spec's "selected cleanup operation"
    ('auto', 'auto'): [CES, BES, WZ, SHRED],      # CES, else BES, else write zeroes, else shred
    ('auto', 'crypto'): [CES],                    # CES sanitize only
    ('auto', 'block'): [BES, WZ, SHRED],          # BES, else write zeroes, else shred
    ('sanitize', 'auto'): [CES, BES],             # CES, else BES
    ('sanitize', 'crypto'): [CES],                # CES only
    ('sanitize', 'block'): [BES],                 # BES only
    ('zero', 'auto'): [WZ, SHRED],                # write zeroes, else shred
    ('zero', 'block'): [WZ, SHRED],
    ('zero', 'crypto'): None,                     # invalid configuration
}
NEEDS = {CES: 'ces', BES: 'bes', WZ: 'wzs', SHRED: None}
CAPS = [dict(zip(('ces', 'bes', 'wzs', 'ns_mgmt'), bits))
        for bits in itertools.product((False, True), repeat=4)]


def _expected(row, caps):
    ladder = EXPECTED[row]
    if ladder is None:
        return 'invalid'
    for action in ladder:
        if NEEDS[action] is None or caps[NEEDS[action]]:
            return action
    return 'excluded'


@pytest.mark.parametrize('row', sorted(EXPECTED))
@pytest.mark.parametrize('caps', CAPS,
                         ids=lambda c: '+'.join(k for k, v in c.items() if v) or 'none')
def test_every_row_and_capability_combination(row, caps):
    r = p.resolve(*row, caps)
    want = _expected(row, caps)
    if want == 'invalid':
        assert r.action is None and r.invalid and r.excluded
        assert 'invalid configuration' in r.reason
    elif want == 'excluded':
        assert r.action is None and r.excluded and not r.invalid
        assert 'excluded' in r.reason
    else:
        assert r.action == want and not r.excluded and not r.invalid
    assert f'clear_action={row[0]} clear_strategy={row[1]}' in r.reason


def test_the_table_is_covered_whole():
    assert set(p.LADDERS) | set(p.INVALID) == set(EXPECTED)


@pytest.mark.parametrize('caps,action', [
    ({'ces': True, 'bes': True, 'wzs': True}, CES),
    ({'ces': False, 'bes': True, 'wzs': True}, BES),
    ({'ces': False, 'bes': False, 'wzs': True}, WZ),
    ({'ces': False, 'bes': False, 'wzs': False}, SHRED),
])
def test_auto_auto_takes_the_strongest(caps, action):
    assert p.resolve('auto', 'auto', caps).action == action


def test_reason_says_what_was_skipped():
    r = p.resolve('auto', 'block', {'ces': True, 'bes': False, 'wzs': True})
    assert r.action == WZ
    assert 'not BES sanitize (no BES)' in r.reason


def test_unknown_capabilities_exclude_the_device():
    r = p.resolve('auto', 'auto', None)
    assert r.excluded and 'capabilities unknown' in r.reason


@pytest.mark.parametrize('action,strategy', [('wipe', 'auto'), ('auto', 'fast')])
def test_unknown_values(action, strategy):
    assert p.validate(action, strategy)
    assert p.resolve(action, strategy, {'ces': True}).invalid


def test_policy_defaults_to_auto():
    assert p.policy_of({}) == ('auto', 'auto')
    assert p.policy_of({'clear_action': 'ZERO'}) == ('zero', 'auto')


def test_every_action_has_steps_and_an_assurance_level():
    for action in p.ACTIONS:
        assert p.STEPS[action] and p.ASSURANCE[action]
