"""A PCI function's health from what the kernel says of it in sysfs (issue 38),
for the pci, mdev (PCI parents), nvidia_gpu and nvme drivers' functions.

* The AER statistics (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats,
  kernel 4.19 and later): ``aer_dev_correctable``, ``aer_dev_fatal``,
  ``aer_dev_nonfatal`` under the function's directory, one ``<error name> <count>``
  line per error kind (names may hold spaces: the count is the last field) and a
  ``TOTAL_ERR_COR`` / ``TOTAL_ERR_FATAL`` / ``TOTAL_ERR_NONFATAL`` line. A
  function without AER capability has no such files: nothing is read, no
  condition. The counters count since the function was enumerated (boot, or a
  remove + rescan): a fatal error clears only by that.
  - fatal > 0: unhealthy ([health] pci_aer_fatal_unhealthy);
  - non-fatal > 0: warning (unhealthy with [health] pci_aer_nonfatal_unhealthy);
  - correctable: warning once it rose by [health] pci_correctable_warning since
    this agent first read it (a link that corrects errors now and then is normal;
    one that starts correcting many is not).
* The driver binding: a function that had a driver at an earlier read and has none
  now (its driver unbound it, or error recovery gave up on it): a warning, not a
  fault, because libvirt's managed hand-off to vfio-pci passes through "no driver"
  for a moment and a discovery may fall in it.

A function that disappears from the bus is not a condition: it is not reported,
and the conductor keeps a device that is not available as missing (reserved,
never bound) and removes an available one (steward/conductor/report/diff.py).
"""
import os

from steward.common import health
from steward.conf import health as health_conf

AER_FILES = (('fatal', 'aer_dev_fatal', 'TOTAL_ERR_FATAL'),
             ('nonfatal', 'aer_dev_nonfatal', 'TOTAL_ERR_NONFATAL'),
             ('correctable', 'aer_dev_correctable', 'TOTAL_ERR_COR'))


def parse_aer(text, total_key):
    """{error name: count} and the total of one aer_dev_* file's text. The total
    is the TOTAL_ERR_* line (several errors may share one message, so the kernel's
    total need not be the sum); without it, the sum."""
    counts, total = {}, None
    for line in text.splitlines():
        name, _, value = line.strip().rpartition(' ')
        if not name or not value.isdigit():
            continue
        if name == total_key:
            total = int(value)
        else:
            counts[name] = int(value)
    return counts, (sum(counts.values()) if total is None else total)


def read_aer(path):
    """{'fatal'|'nonfatal'|'correctable': (total, {name: count})} of the function
    at sysfs ``path``; kinds whose file is absent or unreadable are left out."""
    found = {}
    for kind, name, total_key in AER_FILES:
        try:
            with open(os.path.join(path, name)) as f:
                text = f.read()
        except OSError:
            continue
        counts, total = parse_aer(text, total_key)
        found[kind] = (total, counts)
    return found


def _nonzero(counts):
    return ', '.join(f'{k} {v}' for k, v in counts.items() if v) or 'no kind named'


class Watch:
    """What an agent's driver remembers between discoveries of the functions it
    reads: the correctable count and the driver of each at its first read."""

    def __init__(self, conf):
        # A driver may be handed a configuration holding only its own groups
        # (its operator page's snippets are tested that way): [health] is
        # registered here, as every driver that reads it does.
        health_conf.register_opts(conf)
        self.conf = conf
        self._correctable_base = {}
        self._had_driver = {}

    def conditions(self, address, path, driver=None):
        """The conditions of the function at ``address`` (sysfs ``path``, its
        current ``driver`` or None) under [health]."""
        opts = self.conf.health
        found = []
        aer = read_aer(path)
        if 'fatal' in aer and aer['fatal'][0]:
            total, counts = aer['fatal']
            found.append(health.Condition(
                'pci.aer_fatal', health.HEALTH_UNHEALTHY if opts.pci_aer_fatal_unhealthy
                else health.HEALTH_WARNING,
                f'{total} fatal uncorrectable error(s) ({_nonzero(counts)})'))
        if 'nonfatal' in aer and aer['nonfatal'][0]:
            total, counts = aer['nonfatal']
            found.append(health.Condition(
                'pci.aer_nonfatal', health.HEALTH_UNHEALTHY
                if opts.pci_aer_nonfatal_unhealthy else health.HEALTH_WARNING,
                f'{total} non-fatal uncorrectable error(s) ({_nonzero(counts)})'))
        if 'correctable' in aer:
            total = aer['correctable'][0]
            base = self._correctable_base.setdefault(address, total)
            if total < base:           # re-enumerated: counting starts again
                base = self._correctable_base[address] = total
            if total - base >= opts.pci_correctable_warning:
                found.append(health.Condition(
                    'pci.aer_correctable', health.HEALTH_WARNING,
                    f'{total - base} correctable error(s) since first read '
                    f'({total} in all)'))
        if driver:
            self._had_driver[address] = driver
        elif address in self._had_driver:
            found.append(health.Condition(
                'pci.driver_unbound', health.HEALTH_WARNING,
                f'bound to no driver (was {self._had_driver[address]})'))
        return found

    def reading(self, address, path, driver=None, extra=()):
        """A health.Reading of the function, with ``extra`` conditions (a driver's
        own) added."""
        return health.read_now(list(self.conditions(address, path, driver)) + list(extra))

    def forget(self, present):
        """Drop what is remembered of functions not in ``present`` (addresses)."""
        present = set(present)
        for table in (self._correctable_base, self._had_driver):
            for address in set(table) - present:
                del table[address]
