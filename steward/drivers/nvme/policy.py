"""The cleanup policy matrix of spec 1: (clear_action, clear_strategy, hardware
capabilities) -> the one cleanup action locked in for a device.

| clear_action | clear_strategy | selected cleanup operation                             |
|--------------|----------------|--------------------------------------------------------|
| auto         | auto           | CES sanitize, else BES sanitize, else write zeroes,    |
|              |                | else shred                                             |
| auto         | crypto         | CES sanitize only                                      |
| auto         | block          | BES sanitize, else write zeroes, else shred            |
| sanitize     | auto           | CES sanitize, else BES sanitize                        |
| sanitize     | crypto         | CES sanitize only                                      |
| sanitize     | block          | BES sanitize only                                      |
| zero         | auto/block     | write zeroes, else shred                               |
| zero         | crypto         | invalid configuration                                  |

Issue 21 adds Format NVM with a secure erase (the client drives' erase: Format NVM,
OACS bit 1, and no sanitize). Its place follows the assurance each gives (NVMe Base
2.0): Sanitize erases all user data of the whole NVM subsystem, including caches,
unallocated and deallocated blocks, and is the stronger; a Format NVM secure erase
erases all user data of the namespace(s) formatted "regardless of location" (§5.14:
so also remapped blocks of that namespace, which Write Zeroes to logical blocks
cannot reach); Write Zeroes and shred clear the logical blocks only. So the ladders
become sanitize > format secure erase > write zeroes > shred, crypto before
non-crypto as spec 1 orders CES before BES, and:

| auto         | auto           | CES sanitize, else BES sanitize, else format crypto    |
|              |                | erase, else format user data erase, else write zeroes, |
|              |                | else shred                                             |
| auto         | crypto         | CES sanitize, else format crypto erase                 |
| auto         | block          | BES sanitize, else format user data erase, else write  |
|              |                | zeroes, else shred                                     |
| format       | auto           | format crypto erase, else format user data erase       |
| format       | crypto         | format crypto erase only                               |
| format       | block          | format user data erase only                            |

``clear_action=sanitize`` and ``zero`` never format (that is how an operator forbids
it); ``clear_action=format`` requires it.

"shred" is host-side zeroing of the whole block device (no controller support
needed), so rows ending in it can always be met; the others exclude a device whose
controller lacks every listed capability. Nothing here runs anything: the plan
endpoint and the driver share it.
"""
import dataclasses

CLEAR_ACTIONS = ('auto', 'sanitize', 'format', 'zero')
CLEAR_STRATEGIES = ('auto', 'crypto', 'block')

SANITIZE_CRYPTO = 'sanitize_crypto'
SANITIZE_BLOCK = 'sanitize_block'
FORMAT_CRYPTO = 'format_crypto'
FORMAT_USER_DATA = 'format_user_data'
WRITE_ZEROES = 'write_zeroes'
SHRED = 'shred'
ACTIONS = (SANITIZE_CRYPTO, SANITIZE_BLOCK, FORMAT_CRYPTO, FORMAT_USER_DATA, WRITE_ZEROES,
           SHRED)
FORMATS = (FORMAT_CRYPTO, FORMAT_USER_DATA)

# What each action needs from the controller (None: nothing).
REQUIRES = {SANITIZE_CRYPTO: 'ces', SANITIZE_BLOCK: 'bes', FORMAT_CRYPTO: 'format_crypto',
            FORMAT_USER_DATA: 'format_erase', WRITE_ZEROES: 'wzs', SHRED: None}

LABEL = {SANITIZE_CRYPTO: 'CES sanitize', SANITIZE_BLOCK: 'BES sanitize',
         FORMAT_CRYPTO: 'format crypto erase (SES 2)',
         FORMAT_USER_DATA: 'format user data erase (SES 1)',
         WRITE_ZEROES: 'write zeroes', SHRED: 'shred'}

# The assurance an action gives when it completes and its read-back passes
# (recorded in every erase record), strongest first: sanitize (the whole subsystem,
# unallocated blocks included), format secure erase (all user data of the
# namespace(s) formatted, wherever the drive keeps it), write zeroes and shred (the
# logical blocks only).
ASSURANCE = {SANITIZE_CRYPTO: 'purge-crypto', SANITIZE_BLOCK: 'purge-block',
             FORMAT_CRYPTO: 'secure-erase-crypto',
             FORMAT_USER_DATA: 'secure-erase-user-data',
             WRITE_ZEROES: 'clear-write-zeroes', SHRED: 'clear-overwrite'}

# The preference ladder of each valid row, strongest first.
LADDERS = {
    ('auto', 'auto'): (SANITIZE_CRYPTO, SANITIZE_BLOCK, FORMAT_CRYPTO, FORMAT_USER_DATA,
                       WRITE_ZEROES, SHRED),
    ('auto', 'crypto'): (SANITIZE_CRYPTO, FORMAT_CRYPTO),
    ('auto', 'block'): (SANITIZE_BLOCK, FORMAT_USER_DATA, WRITE_ZEROES, SHRED),
    ('format', 'auto'): (FORMAT_CRYPTO, FORMAT_USER_DATA),
    ('format', 'crypto'): (FORMAT_CRYPTO,),
    ('format', 'block'): (FORMAT_USER_DATA,),
    ('sanitize', 'auto'): (SANITIZE_CRYPTO, SANITIZE_BLOCK),
    ('sanitize', 'crypto'): (SANITIZE_CRYPTO,),
    ('sanitize', 'block'): (SANITIZE_BLOCK,),
    ('zero', 'auto'): (WRITE_ZEROES, SHRED),
    ('zero', 'block'): (WRITE_ZEROES, SHRED),
}
INVALID = {('zero', 'crypto'): 'clear_action=zero cannot give a cryptographic erase '
                               '(clear_strategy=crypto); use clear_action=sanitize or auto'}

_CAP_NAMES = {'ces': 'CES (Crypto Erase sanitize, SANICAP bit 0)',
              'bes': 'BES (Block Erase sanitize, SANICAP bit 1)',
              'wzs': 'WZS (Write Zeroes, ONCS bit 3)',
              'format_erase': 'Format NVM (OACS bit 1) user data erase',
              'format_crypto': 'Format NVM crypto erase (OACS bit 1, FNA bit 2)'}


_SHORT = {'format_erase': 'Format NVM', 'format_crypto': 'FNA crypto erase'}


@dataclasses.dataclass(frozen=True)
class Resolution:
    action: str | None          # one of ACTIONS, or None when nothing can be locked in
    reason: str                 # why, in words (shown by the plan and the logs)
    invalid: bool = False       # the policy itself is wrong (zero + crypto)

    @property
    def excluded(self):
        return self.action is None


def policy_of(spec_fields):
    """(clear_action, clear_strategy) of a device_spec entry, defaults applied."""
    return (str(spec_fields.get('clear_action', 'auto')).lower(),
            str(spec_fields.get('clear_strategy', 'auto')).lower())


def validate(clear_action, clear_strategy):
    """A reason string when a value is unknown (a configuration error), else None."""
    if clear_action not in CLEAR_ACTIONS:
        return f'clear_action {clear_action!r} is not one of {", ".join(CLEAR_ACTIONS)}'
    if clear_strategy not in CLEAR_STRATEGIES:
        return (f'clear_strategy {clear_strategy!r} is not one of '
                f'{", ".join(CLEAR_STRATEGIES)}')
    return None


def validate_lba_size(value):
    """A reason string when a device_spec ``lba_size`` is not a block size."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 512 or \
            value & (value - 1):
        return f'lba_size {value!r} is not a power of two of at least 512 (bytes)'
    return None


def resolve(clear_action, clear_strategy, caps):
    """The locked-in action for a controller with capabilities ``caps`` (a dict
    with ces, bes, wzs booleans; None when they could not be read)."""
    policy = f'clear_action={clear_action} clear_strategy={clear_strategy}'
    bad = validate(clear_action, clear_strategy)
    if bad:
        return Resolution(None, f'{policy}: {bad}', invalid=True)
    if (clear_action, clear_strategy) in INVALID:
        return Resolution(None, f'{policy}: invalid configuration: '
                                f'{INVALID[(clear_action, clear_strategy)]}', invalid=True)
    if caps is None:
        return Resolution(None, f'{policy}: controller capabilities unknown '
                                f'(id-ctrl could not be read)')
    ladder = LADDERS[(clear_action, clear_strategy)]
    skipped = []
    for action in ladder:
        need = REQUIRES[action]
        if need is None or caps.get(need):
            why = f'{policy}: {LABEL[action]}'
            if need:
                why += f' ({_CAP_NAMES[need]} supported)'
            else:
                why += ' (host-side zeroing of the whole block device)'
            if skipped:
                why += '; not ' + ', '.join(skipped)
            return Resolution(action, why)
        skipped.append(f'{LABEL[action]} (no {_SHORT.get(need, need.upper())})')
    return Resolution(None, f'{policy} needs ' + ' or '.join(
        _CAP_NAMES[REQUIRES[a]] for a in ladder) + '; the controller supports none: '
        'device excluded from the pool')


_SETTLE = ('read the sanitize log; wait for a sanitize still in progress (the '
           "tenant's) to end; leave sanitize failure mode (exit-failure-mode, else one "
           'recovery sanitize)')
_LAYOUT = ('namespace management (OACS bit 3): delete every namespace, attached or '
           'not, and create one covering the whole capacity (TNVMCAP) in the canonical '
           'LBA size, attached; without it the attached namespaces as found (none: error)')
_MARKS = 'write random watermarks at spread offsets of the canonical namespace'
_RESTORE = 'check the canonical layout again and record the layout before and after'

STEPS = {
    SANITIZE_CRYPTO: (
        _SETTLE, _LAYOUT, _MARKS,
        'nvme sanitize --sanact=start-crypto-erase (the whole subsystem)',
        'poll the sanitize log (SPROG) until SSTAT leaves "in progress"; only '
        '"succeeded" with the action issued is success',
        'read the watermarks back with O_DIRECT: none may survive', _RESTORE),
    SANITIZE_BLOCK: (
        _SETTLE, _LAYOUT, _MARKS,
        'nvme sanitize --sanact=start-block-erase (the whole subsystem)',
        'poll the sanitize log (SPROG) until SSTAT leaves "in progress"; only '
        '"succeeded" with the action issued is success',
        'read the watermarks back with O_DIRECT: none may survive', _RESTORE),
    WRITE_ZEROES: (
        _SETTLE, _LAYOUT, _MARKS,
        "the kernel's BLKZEROOUT over the whole namespace (blkdiscard --zeroout: "
        "the controller's Write Zeroes at their largest size)",
        'read the watermarks and 64 random blocks back with O_DIRECT: all zeroes',
        _RESTORE),
    FORMAT_CRYPTO: (
        _SETTLE, _LAYOUT, _MARKS,
        'nvme format --ses=2 (cryptographic erase) of every namespace: NSID FFFFFFFFh '
        'when FNA bit 0 makes the format apply to all namespaces, one namespace when '
        'FNA bit 1 makes its crypto erase apply to all, else each namespace; the LBA '
        'format is kept',
        'read the watermarks back with O_DIRECT: none may survive', _RESTORE),
    FORMAT_USER_DATA: (
        _SETTLE, _LAYOUT, _MARKS,
        'nvme format --ses=1 (user data erase) of every namespace: NSID FFFFFFFFh '
        'when FNA bit 0 makes the format apply to all namespaces, else each '
        'namespace; the LBA format is kept',
        'read the watermarks back with O_DIRECT: none may survive (after a user data '
        'erase the contents are indeterminate, so not necessarily zeroes)', _RESTORE),
    SHRED: (
        _SETTLE, _LAYOUT, _MARKS,
        'overwrite the whole namespace with zeroes from the host (O_DIRECT)',
        'read the watermarks and 64 random blocks back with O_DIRECT: all zeroes',
        _RESTORE),
}


_NO_SANITIZE = ('nothing to settle: the controller has no Sanitize command (SANICAP '
                'bits 2:0 clear), so no sanitize can be running or have failed, and '
                'the Sanitize Status log (0x81) is not read')
_AS_FOUND = ('no namespace management (OACS bit 3 clear): the attached namespaces as '
             'found (the tenant could not change them either; none: error)')


def steps_for(action, identify=None):
    """The STEPS of ``action`` as they run on a controller whose Identify profile
    (nvme_caps.Profile.as_dict(), kept in std_board_info) is ``identify``: what the
    controller does not advertise is not sent."""
    steps = list(STEPS.get(action, ()))
    if not steps or not identify:
        return steps
    if not (identify.get('sanitize') or {}).get('status_log_0x81', True):
        steps[steps.index(_SETTLE)] = _NO_SANITIZE
    if identify.get('namespace_management') is False:
        steps[steps.index(_LAYOUT)] = _AS_FOUND
    return steps
