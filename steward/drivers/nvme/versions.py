"""The nvme-cli versions the nvme driver reads, checked when the agent starts.

A version is supported when what it prints for every command the driver parses was
recorded from a real binary and passes tests/unit/test_nvme_cli_versions.py
(tests/unit/nvme_cli_outputs/README.md), or, for a point release, when its printing
code is the same as its recorded release's (read in both tags). Any other version
is refused at start: the output of one the driver was never checked against can
differ where it matters, as 2.11's critical_warning did (a drive gone read-only read
as "unreadable" and stayed in service), and 2.14 prints create-ns's nsid in another
form.
"""
import re

from steward.common import exception

# The distributions' own: Ubuntu 22.04 1.16, Debian 12 2.3, Ubuntu 24.04 2.8,
# RHEL 9 2.9, RHEL 10 and Fedora 2.11 / 2.12, Debian 13 2.13; with every 2.x
# between them.
RECORDED = ('1.16', '2.3', '2.4', '2.5', '2.6', '2.7', '2.7.1', '2.8', '2.9', '2.10',
            '2.11', '2.12', '2.13')
# Point releases whose json_smart_log, json_sanitize_log, json_nvme_id_ctrl,
# json_nvme_id_ns, json_nvme_list_ns, json_output_status and create-ns message are
# the same code as the release before them.
SAME_PRINTERS = ('2.9.1', '2.10.1', '2.10.2')
SUPPORTED = RECORDED + SAME_PRINTERS

_VERSION_RE = re.compile(r'^\d+\.\d+(\.\d+)?$')


def supported_text():
    return ', '.join(SUPPORTED)


def check(version, binary):
    """``version`` as ``nvme version`` printed it, or NvmeCliUnsupported."""
    if version is None or not _VERSION_RE.match(version) or version not in SUPPORTED:
        raise exception.NvmeCliUnsupported(version=version or 'unknown', binary=binary,
                                           supported=supported_text())
    return version
