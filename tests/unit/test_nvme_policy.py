"""The policy matrix of spec 1, every row x every capability combination.

EXPECTED is the spec's table copied as data (the "else" chains read left to right),
with issue 21's Format NVM secure erase (FC: SES 2, FU: SES 1) between sanitize and
write zeroes, and its clear_action=format rows; the test derives nothing from the
code under test.
"""
import itertools

import pytest

from steward.drivers.nvme import policy as p

CES, BES, WZ, SHRED = 'sanitize_crypto', 'sanitize_block', 'write_zeroes', 'shred'
FC, FU = 'format_crypto', 'format_user_data'
EXPECTED = {
    # clear_action, clear_strategy: ladder from the spec's "selected cleanup operation"
    ('auto', 'auto'): [CES, BES, FC, FU, WZ, SHRED],  # CES, BES, format, WZ, shred
    ('auto', 'crypto'): [CES, FC],                # a cryptographic erase: CES, else format
    ('auto', 'block'): [BES, FU, WZ, SHRED],      # BES, else format, WZ, shred
    ('format', 'auto'): [FC, FU],                 # issue 21: format required
    ('format', 'crypto'): [FC],
    ('format', 'block'): [FU],
    ('sanitize', 'auto'): [CES, BES],             # CES, else BES
    ('sanitize', 'crypto'): [CES],                # CES only
    ('sanitize', 'block'): [BES],                 # BES only
    ('zero', 'auto'): [WZ, SHRED],                # write zeroes, else shred
    ('zero', 'block'): [WZ, SHRED],
    ('zero', 'crypto'): None,                     # invalid configuration
}
NEEDS = {CES: 'ces', BES: 'bes', FC: 'format_crypto', FU: 'format_erase', WZ: 'wzs',
         SHRED: None}
# format_crypto (FNA bit 2) only with format_erase (OACS bit 1)
CAPS = [dict(zip(('ces', 'bes', 'wzs', 'ns_mgmt', 'format_erase', 'format_crypto'), bits))
        for bits in itertools.product((False, True), repeat=6) if bits[4] or not bits[5]]


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
