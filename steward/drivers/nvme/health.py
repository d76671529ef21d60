"""An NVMe drive's health from its SMART / Health Information log page (Get Log
Page 02h, NVMe Base Specification 2.0 §5.16.1.3, Figure 207) as the real nvme-cli
prints it (``nvme smart-log <ctrl> -o json``), judged against the [health]
thresholds (issue 38).

What the page can say and what Steward makes of it:

* Critical Warning (byte 0), one condition per bit set: 0 available spare below
  threshold, 1 temperature, 2 NVM subsystem reliability degraded, 3 media read-only,
  4 volatile memory backup failed, 5 persistent memory region read-only. Unhealthy
  by default ([health] nvme_critical_warning_unhealthy).
* Available Spare (byte 3) below Available Spare Threshold (byte 4): unhealthy,
  whatever bit 0 says (a firmware that forgets to set the bit is still read).
* Percentage Used (byte 5) at or above [health] nvme_percentage_used_warning:
  warning (the vendor's wear estimate; 100 is the rated endurance, not a failure).
* Media and Data Integrity Errors (bytes 175:160): warning when above 0,
  unhealthy at [health] nvme_media_errors_unhealthy (0: never).

A drive may lie (report a new drive whatever its state): its cleanup's read-back
verification catches a drive that does not erase, not this page.

How each nvme-cli prints the page (``json_smart_log``, read in each tag's source;
tests/unit/nvme_cli_outputs/README.md): every version from 1.16 to 2.13 uses the same
key names; ``critical_warning`` is a number, except in 2.11 and 2.12, which print it as
an object ``{"value": N, "available_spare": 0|1, "temp_threshold", ...}`` even
without ``-H`` (their ``json_smart_log`` lost its ``if (human())``); 2.7 (not 2.7.1)
spells ``Temperature``; the 128-bit counters are decimal strings in 2.3 and numbers
elsewhere.
"""
import dataclasses
import json

from steward.common import exception
from steward.common import health

CRITICAL_WARNING_BITS = (
    (0x01, 'nvme.critical_warning.spare', 'available spare below threshold'),
    (0x02, 'nvme.critical_warning.temperature', 'temperature outside its thresholds'),
    (0x04, 'nvme.critical_warning.reliability', 'NVM subsystem reliability degraded'),
    (0x08, 'nvme.critical_warning.read_only', 'media placed in read-only mode'),
    (0x10, 'nvme.critical_warning.volatile_backup', 'volatile memory backup failed'),
    (0x20, 'nvme.critical_warning.pmr_read_only',
     'persistent memory region read-only'),
)


@dataclasses.dataclass(frozen=True)
class SmartLog:
    critical_warning: int
    temperature_k: int
    available_spare: int
    spare_threshold: int
    percent_used: int
    media_errors: int
    error_log_entries: int


# The object 2.11 and 2.12 print (and every 2.x with -H): one 0/1 key per bit.
CRITICAL_WARNING_KEYS = (('available_spare', 0x01), ('temp_threshold', 0x02),
                         ('reliability_degraded', 0x04), ('ro', 0x08),
                         ('vmbu_failed', 0x10), ('pmr_ro', 0x20))


def _u128(value):
    # nvme-cli 2.3 prints the 128-bit counters as decimal strings, later ones as numbers.
    return int(value or 0)


def _byte(value):
    # bool is an int to Python: a true/false here is not a byte nvme-cli printed.
    if isinstance(value, bool) or not 0 <= int(value) <= 0xff:
        raise ValueError(f'not a byte: {value!r}')
    return int(value)


def critical_warning(value):
    """Critical Warning (byte 0) from a number or from 2.11/2.12's object.

    Of the object, ``value`` and every bit key are read and ORed: a bit set in
    either is set. A printer that disagrees with itself must not hide a bit, and an
    object without ``value`` still gives its bits."""
    if not isinstance(value, dict):
        return _byte(value)
    if 'value' not in value and not any(key in value for key, _ in CRITICAL_WARNING_KEYS):
        raise ValueError(f'critical_warning object has neither value nor bits: {value!r}')
    byte = _byte(value['value']) if 'value' in value else 0
    for key, bit in CRITICAL_WARNING_KEYS:
        if key in value and _byte(value[key]):
            byte |= bit
    return byte


def parse_smart_log(text):
    try:
        raw = json.loads(text)
        return SmartLog(critical_warning=critical_warning(raw['critical_warning']),
                        temperature_k=int(raw['temperature'] if 'temperature' in raw
                                          else raw['Temperature']),    # 2.7
                        available_spare=int(raw['avail_spare']),
                        spare_threshold=int(raw['spare_thresh']),
                        percent_used=int(raw['percent_used']),
                        media_errors=_u128(raw.get('media_errors')),
                        error_log_entries=_u128(raw.get('num_err_log_entries')))
    except (ValueError, KeyError, TypeError) as err:
        raise exception.NvmeBadOutput(command='smart-log',
                                      reason=f'{type(err).__name__}: {err}')


def conditions(log, conf):
    """The health conditions ``log`` (a SmartLog) holds under ``conf``'s [health]."""
    opts = conf.health
    critical = health.HEALTH_UNHEALTHY if opts.nvme_critical_warning_unhealthy \
        else health.HEALTH_WARNING
    found = []
    for bit, code, text in CRITICAL_WARNING_BITS:
        if log.critical_warning & bit:
            found.append(health.Condition(code, critical,
                                          f'{text} (critical warning '
                                          f'{log.critical_warning:#04x})'))
    if log.available_spare < log.spare_threshold:
        found.append(health.Condition(
            'nvme.spare_below_threshold', health.HEALTH_UNHEALTHY,
            f'available spare {log.available_spare}% below threshold '
            f'{log.spare_threshold}%'))
    if log.percent_used >= opts.nvme_percentage_used_warning:
        found.append(health.Condition(
            'nvme.percentage_used', health.HEALTH_WARNING,
            f'percentage used {log.percent_used}% (warning at '
            f'{opts.nvme_percentage_used_warning}%)'))
    if log.media_errors:
        limit = opts.nvme_media_errors_unhealthy
        severity = health.HEALTH_UNHEALTHY if limit and log.media_errors >= limit \
            else health.HEALTH_WARNING
        found.append(health.Condition(
            'nvme.media_errors', severity,
            f'{log.media_errors} media and data integrity error(s)'))
    return found


def read(cli, char_path, conf):
    """A health.Reading of the controller at ``char_path``; a log that cannot be
    read is a warning (the drive answers nothing about itself), not a fault."""
    try:
        log = cli.smart_log(char_path)
    except exception.StewardError as err:
        return health.read_now([health.Condition('nvme.smart_unreadable',
                                                 health.HEALTH_WARNING, str(err))])
    return health.read_now(conditions(log, conf))
