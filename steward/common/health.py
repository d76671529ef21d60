"""Device health (issue 38): the three health states, the conditions a driver can
report (stable codes, never reused for another meaning), and the reading a driver
sends with each device.

A driver reads what the hardware says about itself (an NVMe drive's SMART log, the
kernel's AER counters, a GPU's Xid events), turns each finding into a Condition
with one of the codes below and a severity chosen by the operator's thresholds
([health] options), and reports the Reading with the device. The conductor
(steward/conductor/health_ops.py) stores it and takes an unhealthy device out of
service. Nothing here touches the database.
"""
import dataclasses

from oslo_utils import timeutils

HEALTH_OK = 'ok'
"""Nothing the hardware reports is wrong."""
HEALTH_WARNING = 'warning'
"""Something deserves an operator's eye (wear, correctable errors); the device is
still handed out."""
HEALTH_UNHEALTHY = 'unhealthy'
"""The device is failing: nothing new is placed on it, and it is not handed out
again until an operator brings it back once the condition has cleared."""
HEALTH_STATES = (HEALTH_OK, HEALTH_WARNING, HEALTH_UNHEALTHY)
HEALTH_UNKNOWN = 'unknown'
"""What the API says of a device no driver has read the health of (an agent
older than health, a driver that reads none): not a stored state."""
_RANK = {HEALTH_OK: 0, HEALTH_WARNING: 1, HEALTH_UNHEALTHY: 2}

# code: what it means. The doc page (doc/health.md) lists them; a driver uses only
# these codes.
CONDITIONS = {
    # NVMe: SMART / Health Information log page (Get Log Page 02h), Critical
    # Warning byte 0, NVMe Base 2.0 Figure 207.
    'nvme.critical_warning.spare': 'critical warning bit 0: available spare below '
                                   'its threshold',
    'nvme.critical_warning.temperature': 'critical warning bit 1: temperature '
                                         'outside its thresholds',
    'nvme.critical_warning.reliability': 'critical warning bit 2: NVM subsystem '
                                         'reliability degraded',
    'nvme.critical_warning.read_only': 'critical warning bit 3: media placed in '
                                       'read-only mode',
    'nvme.critical_warning.volatile_backup': 'critical warning bit 4: volatile memory '
                                             'backup device failed',
    'nvme.critical_warning.pmr_read_only': 'critical warning bit 5: persistent memory '
                                           'region read-only',
    'nvme.spare_below_threshold': 'available spare (byte 3) below the available '
                                  'spare threshold (byte 4)',
    'nvme.percentage_used': 'percentage used (byte 5) at or above [health] '
                            'nvme_percentage_used_warning',
    'nvme.media_errors': 'media and data integrity errors (bytes 175:160) at or '
                         'above [health] nvme_media_errors_unhealthy',
    'nvme.smart_unreadable': 'the SMART log could not be read',
    # PCI functions and mdev parents: the kernel's AER counters in sysfs.
    'pci.aer_fatal': 'aer_dev_fatal counts uncorrectable fatal errors',
    'pci.aer_nonfatal': 'aer_dev_nonfatal counts uncorrectable non-fatal errors',
    'pci.aer_correctable': 'aer_dev_correctable rose by [health] '
                           'pci_correctable_warning or more since the first read',
    'pci.driver_unbound': 'the function is bound to no driver',
    # NVIDIA GPUs: the kernel log's Xid lines.
    'gpu.xid_critical': 'the kernel logged an Xid event listed in [health] '
                        'gpu_critical_xids',
    'gpu.xid': 'the kernel logged another Xid event',
    # The fake driver, told by its operator.
    'fake.told': 'the fake driver was told the device is unhealthy or warning',
}
CONDITION_CODES = frozenset(CONDITIONS)


@dataclasses.dataclass(frozen=True)
class Condition:
    code: str
    severity: str          # HEALTH_WARNING or HEALTH_UNHEALTHY
    detail: str = ''

    def __post_init__(self):
        if self.code not in CONDITION_CODES:
            raise ValueError(f'unknown health condition {self.code!r}')
        if self.severity not in (HEALTH_WARNING, HEALTH_UNHEALTHY):
            raise ValueError(f'severity {self.severity!r} of {self.code}')

    def text(self):
        return f'{self.code}: {self.detail}' if self.detail else self.code


def worst(conditions):
    """The health state the conditions make."""
    state = HEALTH_OK
    for c in conditions:
        if _RANK[c.severity] > _RANK[state]:
            state = c.severity
    return state


@dataclasses.dataclass(frozen=True)
class Reading:
    """What a driver read of one device's health, at ``read_at`` (ISO 8601 UTC)."""
    conditions: tuple = ()
    read_at: str = ''

    @property
    def state(self):
        return worst(self.conditions)

    def unhealthy(self):
        return [c for c in self.conditions if c.severity == HEALTH_UNHEALTHY]

    def to_dict(self):
        return {'state': self.state, 'read_at': self.read_at,
                'conditions': [dataclasses.asdict(c) for c in self.conditions]}

    @classmethod
    def from_dict(cls, d):
        """A reading sent by an agent; ValueError for one this conductor does not
        understand (an unknown code is refused rather than guessed at)."""
        if not isinstance(d, dict):
            raise ValueError(f'health reading must be an object, not {d!r}')
        conditions = tuple(Condition(code=c['code'], severity=c['severity'],
                                     detail=str(c.get('detail') or ''))
                           for c in d.get('conditions') or ())
        return cls(conditions=conditions, read_at=str(d.get('read_at') or ''))


def read_now(conditions):
    """A Reading of ``conditions`` stamped now."""
    return Reading(conditions=tuple(conditions),
                   read_at=timeutils.utcnow().replace(microsecond=0).isoformat())


def summary(conditions):
    """One line for last_error, the history and logs."""
    return '; '.join(c.text() for c in conditions)
