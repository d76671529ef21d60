"""Running nvme-cli and reading what it prints, for every version of
versions.SUPPORTED (1.16, 2.3 to 2.13: the distributions' own; each one's printing
code read in its tag, tests/unit/nvme_cli_outputs/README.md).

A failure is any non-zero exit code: 1 in 2.x; in 1.x the errno the NVMe status maps
to (EIO, EINVAL, ...). What it says is on stderr as ``NVMe status: <text>(0x<status>)``
(or an OS error), except that 2.5 and later, given ``-o json``, print it on *stdout*
as JSON (``{"error": "<text>", "type": "nvme"}``; with ``"value": <status>`` in 2.5
and 2.6, keys capitalised in 2.7 and 2.7.1): without a number, the text names the
status. The
JSON differs between versions, so every parser accepts every shape:

* 128-bit fields (tnvmcap, unvmcap, nvmcap...) are decimal *strings* in 2.3, numbers
  in 1.x (printed from a long double) and from 2.4 on;
* 2.3 prints 32-bit fields (sanicap, nn...) as *signed* ints, so ``value & 0xffffffff``;
* sn/mn/fr come padded with spaces; 1.x leaves out a key whose string is empty;
* 0xffffffff ("not reported") in the sanitize log prints -1 in 2.3, 4294967295 later;
* the sanitize log is keyed by the device's name (``{"nvme0": {...}}``) in every
  version, and gains keys in newer ones; its ``sstat.status`` is a string ``"(N)
  text"``, except that 2.7, 2.7.1 and 2.8 use the text itself as the key;
* id-ns has no ``dlfeat`` in 1.x; list-ns says ``NSID`` in 2.7 (not 2.7.1);
* smart-log: health.py.
"""
import dataclasses
import json
import logging
import os
import re
import shutil

from steward.common import exception
from steward.drivers.nvme import health as nvme_health
from steward.privsep import nvme as privsep_nvme

LOG = logging.getLogger(__name__)

U32 = 0xffffffff
NSID_ALL = 0xffffffff
FORMAT_TIMEOUT = 3590                # s; a user data erase takes the drive's time
SES_USER_DATA, SES_CRYPTO = 1, 2
BLOCKS_PER_WRITE_ZEROES = 65536     # NLB is 16-bit and zero-based
SANACT_EXIT_FAILURE, SANACT_BLOCK, SANACT_OVERWRITE, SANACT_CRYPTO = 1, 2, 3, 4

SSTAT_NEVER, SSTAT_SUCCESS, SSTAT_IN_PROGRESS, SSTAT_FAILED, SSTAT_SUCCESS_NDAS = range(5)
SSTAT_TEXT = {
    SSTAT_NEVER: 'never sanitized',
    SSTAT_SUCCESS: 'most recent sanitize succeeded',
    SSTAT_IN_PROGRESS: 'sanitize in progress',
    SSTAT_FAILED: 'most recent sanitize failed',
    SSTAT_SUCCESS_NDAS: 'most recent sanitize (no-deallocate) succeeded',
}
SANACT_TEXT = {SANACT_EXIT_FAILURE: 'exit-failure', SANACT_BLOCK: 'block-erase',
               SANACT_OVERWRITE: 'overwrite', SANACT_CRYPTO: 'crypto-erase'}

# NVMe status codes (status & 0x7ff: SCT in bits 10:8, SC in 7:0; DNR/More dropped).
STATUS_INVALID_OPCODE = 0x001
STATUS_INVALID_FIELD = 0x002
STATUS_SANITIZE_IN_PROGRESS = 0x01d
STATUS_SANITIZE_FAILED = 0x01c
STATUS_ACCESS_DENIED = 0x286


# --- which error a failed run raises ----------------------------------------------
_STATUS_ERRORS = {STATUS_INVALID_OPCODE: exception.NvmeInvalidOpcode,
                  STATUS_SANITIZE_IN_PROGRESS: exception.NvmeSanitizeInProgress,
                  STATUS_ACCESS_DENIED: exception.NvmeAccessDenied}
_STATUS_RE = re.compile(r'NVMe status: (?P<text>.*)\(0x(?P<status>[0-9a-fA-F]+)\)\s*$', re.M)
# The names libnvme (2.x) and nvme-cli 1.x give the statuses of _STATUS_ERRORS: all
# a JSON error of 2.8 and later says of which status it was.
_STATUS_TEXTS = ((re.compile(r'^(Invalid Command Opcode|INVALID_OPCODE)\b'),
                  STATUS_INVALID_OPCODE),
                 (re.compile(r'^(Sanitize In Progress|SANITIZE_IN_PROGRESS)\b'),
                  STATUS_SANITIZE_IN_PROGRESS),
                 (re.compile(r'^(Access Denied|ACCESS_DENIED)\b'), STATUS_ACCESS_DENIED))


def _json_error(stdout):
    """(text, status or None) of the JSON error 2.5 and later print on stdout under
    ``-o json``: ``{"error": ..., "type": "nvme", "value": <status>}`` in 2.5 and
    2.6, ``{"Error": ..., "Type": "nvme"}`` in 2.7, ``{"error": ..., "type":
    "nvme"}`` from 2.8 (an OS error: ``{"error": "<device>: ..."}``); None when
    stdout holds no such thing."""
    try:
        d = json.loads(stdout or '')
    except ValueError:
        return None
    if not isinstance(d, dict):
        return None
    d = {str(k).lower(): v for k, v in d.items()}
    if not isinstance(d.get('error'), str):
        return None
    value = d.get('value')
    status = value if isinstance(value, int) and not isinstance(value, bool) else None
    return d['error'].strip(), status


def error_from_stderr(command, stderr, stdout=''):
    """The NvmeCommandFailed (subclass) describing a failed run's stderr (and the
    stdout of a JSON error, see the module's docstring)."""
    m = _STATUS_RE.search(stderr or '')
    if m:
        status = int(m.group('status'), 16)
        cls = _STATUS_ERRORS.get(status & 0x7ff, exception.NvmeCommandFailed)
        return cls(command=command, status=status,
                   reason=f'{m.group("text").strip()} (NVMe status 0x{status:x})')
    found = _json_error(stdout)
    if found:
        text, status = found
        if status is not None:
            cls = _STATUS_ERRORS.get(status & 0x7ff, exception.NvmeCommandFailed)
            return cls(command=command, status=status,
                       reason=f'{text} (NVMe status 0x{status:x})')
        for pattern, code in _STATUS_TEXTS:
            if pattern.match(text):
                # No number to report: the class says which status it was.
                return _STATUS_ERRORS[code](command=command, reason=text)
        return exception.NvmeCommandFailed(command=command, reason=text)
    lines = [ln.strip() for ln in (stderr or '').splitlines()
             if ln.strip() and not ln.startswith('FAKENVME')]
    return exception.NvmeCommandFailed(
        command=command, reason=lines[0] if lines else 'non-zero exit status, no message')


# --- parsed records ---------------------------------------------------------------
def u32(value):
    return int(value) & U32


def u128(value):
    """128-bit counters: a decimal string in 2.3, a number later."""
    if value is None or value == '':
        return 0
    return int(value)


def not_reported(value):
    """Sanitize-log estimates: 0xffffffff (-1 in 2.3) means not reported."""
    if value is None:
        return None
    value = int(value)
    return None if value in (-1, U32) else value


@dataclasses.dataclass
class Controller:
    vid: int
    serial: str
    model: str
    firmware: str
    cntlid: int
    oacs: int
    oncs: int
    sanicap: int
    fna: int
    nn: int
    tnvmcap: int
    unvmcap: int = 0
    subnqn: str = ''
    ver: int = 0
    lpa: int = 0
    mdts: int = 0

    @property
    def ces(self):
        return bool(self.sanicap & 0x1)

    @property
    def bes(self):
        return bool(self.sanicap & 0x2)

    @property
    def ows(self):
        return bool(self.sanicap & 0x4)

    @property
    def wzs(self):
        return bool(self.oncs & 0x8)

    @property
    def ns_mgmt(self):
        return bool(self.oacs & 0x8)

    @property
    def format_erase(self):
        """Format NVM (OACS bit 1): its User Data Erase (SES 1) needs nothing more.
        Not with FNA bits 0 and 3 both set: nvme-cli (the ``format`` of every
        supported version, 1.16 to 2.13, reads FNA first) sends every format of a
        controller with FNA bit 0 to NSID FFFFFFFFh, which FNA bit 3 (NVMe 2.0,
        FNVMBS) says the controller refuses, so no format can be sent through it."""
        return bool(self.oacs & 0x2) and (self.fna & 0x9) != 0x9

    @property
    def format_crypto(self):
        """Format NVM with Cryptographic Erase (SES 2): FNA bit 2 as well."""
        return self.format_erase and bool(self.fna & 0x4)

    def capabilities(self):
        return {'ces': self.ces, 'bes': self.bes, 'wzs': self.wzs, 'ns_mgmt': self.ns_mgmt,
                'format_erase': self.format_erase, 'format_crypto': self.format_crypto}


def _json(command, text):
    try:
        return json.loads(text)
    except (TypeError, ValueError) as err:
        raise exception.NvmeBadOutput(command=command,
                                      reason=f'not JSON ({err}): {text[:200]!r}')


def parse_id_ctrl(text):
    d = _json('id-ctrl', text)
    try:
        return Controller(
            vid=int(d['vid']), serial=str(d.get('sn', '')).strip(),
            model=str(d.get('mn', '')).strip(), firmware=str(d.get('fr', '')).strip(),
            cntlid=int(d.get('cntlid', 0)), oacs=int(d.get('oacs', 0)) & 0xffff,
            oncs=int(d.get('oncs', 0)) & 0xffff, sanicap=u32(d.get('sanicap', 0)),
            fna=int(d.get('fna', 0)) & 0xff, nn=u32(d.get('nn', 0)),
            tnvmcap=u128(d.get('tnvmcap')), unvmcap=u128(d.get('unvmcap')),
            subnqn=str(d.get('subnqn') or '').strip('\x00 '),
            ver=u32(d.get('ver', 0)), lpa=int(d.get('lpa', 0)) & 0xff,
            mdts=int(d.get('mdts', 0)) & 0xff)
    except (KeyError, TypeError, ValueError) as err:
        raise exception.NvmeBadOutput(command='id-ctrl',
                                      reason=f'missing or bad field ({err})')


@dataclasses.dataclass
class Namespace:
    nsid: int
    nsze: int
    ncap: int
    flbas: int
    lba_size: int
    dlfeat: int | None = 0      # None: not printed (nvme-cli 1.x)

    @property
    def size_bytes(self):
        return self.nsze * self.lba_size


def parse_id_ns(text, nsid):
    d = _json('id-ns', text)
    try:
        flbas = int(d.get('flbas', 0))
        lbafs = d.get('lbafs') or [{'ds': 9}]
        # FLBAS bits 3:0 index the format, bits 6:5 extend it past 16 formats.
        index = (flbas & 0xf) | ((flbas >> 1) & 0x30)
        lba_size = 2 ** int(lbafs[index]['ds']) if index < len(lbafs) else 512
        return Namespace(nsid=nsid, nsze=int(d['nsze']), ncap=int(d.get('ncap', 0)),
                         flbas=flbas, lba_size=lba_size,
                         dlfeat=int(d['dlfeat']) & 0xff if 'dlfeat' in d else None)
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise exception.NvmeBadOutput(command='id-ns',
                                      reason=f'missing or bad field ({err})')


@dataclasses.dataclass(frozen=True)
class LbaFormat:
    index: int
    lba_size: int
    metadata: int


def parse_formats(text):
    """The LBA formats of ``id-ns -n 0xffffffff`` (the common namespace
    capabilities that Namespace Management creates namespaces from)."""
    d = _json('id-ns', text)
    try:
        count = int(d.get('nlbaf', 0)) + 1
        return [LbaFormat(i, 2 ** int(f['ds']), int(f.get('ms', 0)))
                for i, f in enumerate((d.get('lbafs') or [])[:count]) if int(f['ds'])]
    except (KeyError, TypeError, ValueError) as err:
        raise exception.NvmeBadOutput(command='id-ns', reason=f'bad lbafs ({err})')


def parse_list_ns(text):
    d = _json('list-ns', text)
    try:
        # 2.7 (not 2.7.1) spells it NSID
        return sorted(u32(e['nsid'] if 'nsid' in e else e['NSID'])
                      for e in d.get('nsid_list', []))
    except (KeyError, TypeError, ValueError) as err:
        raise exception.NvmeBadOutput(command='list-ns', reason=f'bad nsid_list ({err})')


@dataclasses.dataclass
class SanitizeStatus:
    sprog: int
    sstat: int                  # SSTAT bits 2:0
    global_erased: bool
    passes: int
    sanact: int | None          # action of the most recent sanitize (SCDW10 bits 2:0)
    estimates: dict             # {'crypto'|'block'|'overwrite': seconds or None}

    @property
    def in_progress(self):
        return self.sstat == SSTAT_IN_PROGRESS

    @property
    def succeeded(self):
        return self.sstat in (SSTAT_SUCCESS, SSTAT_SUCCESS_NDAS)

    @property
    def failed(self):
        return self.sstat == SSTAT_FAILED

    @property
    def percent(self):
        """Progress of a running sanitize (SPROG/65536), 100 once finished."""
        if not self.in_progress:
            return 100.0
        return round(self.sprog * 100.0 / 65536, 1)

    @property
    def text(self):
        return SSTAT_TEXT.get(self.sstat, f'reserved SSTAT value {self.sstat}')

    def describe(self):
        action = SANACT_TEXT.get(self.sanact, f'action {self.sanact}')
        if self.in_progress:
            return f'sanitize still in progress {self.percent:g} % ({action})'
        if self.sstat == SSTAT_NEVER:
            return self.text
        return f'{self.text} ({action})'


_SSTAT_RE = re.compile(r'\s*\((\d+)\)')


def _sstat_status(raw):
    """The status of a decoded sstat object: ``status``, or in 2.7 and 2.8 (whose
    ``json_sanitize_log`` keys it by its own text) the one string value ``"(N) ..."``."""
    if 'status' in raw:
        return raw['status']
    found = [v for v in raw.values() if isinstance(v, str) and _SSTAT_RE.match(v)]
    if len(found) != 1:
        raise ValueError(f'no sstat status in {raw!r}')
    return found[0]


def _sstat_fields(raw):
    """(sstat, global_erased, passes) from an int or the decoded object."""
    if isinstance(raw, dict):
        status = _sstat_status(raw)
        if isinstance(status, str):
            m = _SSTAT_RE.search(status)
            if not m:
                raise ValueError(f'unrecognised sstat status {status!r}')
            code = int(m.group(1))
        else:
            code = int(status) & 0x7
        return code, bool(raw.get('global_erased', 0)), int(raw.get('no_cmplted_passes', 0))
    value = int(raw)
    return value & 0x7, bool(value & 0x100), (value >> 3) & 0x1f


def parse_sanitize_log(text, device_name=None):
    d = _json('sanitize-log', text)
    if isinstance(d, dict) and 'sprog' not in d:
        if device_name in d:
            d = d[device_name]
        elif len(d) == 1 and isinstance(next(iter(d.values())), dict):
            d = next(iter(d.values()))
    try:
        sstat, erased, passes = _sstat_fields(d['sstat'])
        cdw10 = d.get('cdw10_info', d.get('scdw10'))
        return SanitizeStatus(
            sprog=int(d['sprog']) & 0xffff, sstat=sstat, global_erased=erased,
            passes=passes, sanact=None if cdw10 is None else int(cdw10) & 0x7,
            estimates={'crypto': not_reported(d.get('time_crypto_erase')),
                       'block': not_reported(d.get('time_block_erase')),
                       'overwrite': not_reported(d.get('time_over_write'))})
    except (KeyError, TypeError, ValueError) as err:
        raise exception.NvmeBadOutput(command='sanitize-log',
                                      reason=f'missing or bad field ({err})')


_CREATED_RE = re.compile(r'created nsid:\s*(\d+)')


def parse_created_nsid(text):
    m = _CREATED_RE.search(text or '')
    if not m:
        raise exception.NvmeBadOutput(command='create-ns', reason=f'no nsid in {text!r}')
    return int(m.group(1))


_VERSION_RE = re.compile(r'nvme version (\S+)')


def parse_version(text):
    m = _VERSION_RE.search(text or '')
    return m.group(1) if m else None


# --- running it -------------------------------------------------------------------
class NvmeCli:
    """The nvme-cli binary named by ``[nvme] nvme_cli``, run by the ``nvme_admin``
    privsep daemon (steward/privsep/nvme.py) with the daemon's environment. Each
    call has a timeout; nothing is retried here."""

    def __init__(self, binary='nvme', timeout=60):
        self.binary = binary
        self.timeout = timeout

    def path(self):
        """Absolute path of the binary, or None when it cannot be run."""
        if os.sep in self.binary:
            return self.binary if os.access(self.binary, os.X_OK) else None
        return shutil.which(self.binary)

    def run(self, command, dev=None, timeout=None, **options):
        """What ``nvme <command> <dev> <options>`` printed on stdout; ``options``
        are the integers the privsep entrypoint turns into flags."""
        text = ' '.join([command] + [str(dev)] * (dev is not None) +
                        [f'{k}={v}' for k, v in sorted(options.items())])
        if self.path() is None:
            raise exception.NvmeCliMissing(binary=self.binary)
        out = privsep_nvme.run(self.binary, command, dev, options,
                               timeout or self.timeout)
        if out.get('missing'):
            raise exception.NvmeCliMissing(binary=self.binary)
        if out.get('timeout'):
            raise exception.NvmeCommandTimeout(
                command=text, reason=f'no answer within {timeout or self.timeout} s')
        if out['rc'] != 0:
            # Exit code 127/126 come from a wrapper script that could not exec nvme.
            if out['rc'] in (126, 127):
                raise exception.NvmeCliMissing(binary=self.binary)
            raise error_from_stderr(text, out['stderr'], out['stdout'])
        LOG.debug('nvme %s -> %d bytes', text, len(out['stdout']))
        return out['stdout']

    def version(self):
        return parse_version(self.run('version'))

    def id_ctrl(self, dev):
        return parse_id_ctrl(self.run('id-ctrl', dev))

    def id_ns(self, dev, nsid):
        return parse_id_ns(self.run('id-ns', dev, nsid=nsid), nsid)

    def formats(self, dev):
        return parse_formats(self.run('id-ns', dev, nsid=NSID_ALL))

    def list_ns(self, dev, allocated=False):
        return parse_list_ns(self.run('list-ns', dev, allocated=int(allocated)))

    def sanitize_log(self, dev):
        return parse_sanitize_log(self.run('sanitize-log', dev), os.path.basename(dev))

    def smart_log(self, dev):
        """The controller's SMART / Health Information log (nvme_health.SmartLog)."""
        return nvme_health.parse_smart_log(self.run('smart-log', dev))

    def sanitize(self, dev, sanact):
        self.run('sanitize', dev, sanact=sanact)

    def write_zeroes(self, dev, nsid, start_block, blocks):
        if not 1 <= blocks <= BLOCKS_PER_WRITE_ZEROES:
            raise ValueError(f'write-zeroes takes 1..{BLOCKS_PER_WRITE_ZEROES} blocks')
        self.run('write-zeroes', dev, nsid=nsid, start_block=start_block, blocks=blocks)

    def create_ns(self, dev, blocks, flbas):
        return parse_created_nsid(self.run('create-ns', dev, blocks=blocks, flbas=flbas,
                                           timeout=max(self.timeout, 130)))

    def attach_ns(self, dev, nsid, cntlid):
        self.run('attach-ns', dev, nsid=nsid, cntlid=cntlid)

    def detach_ns(self, dev, nsid, cntlid):
        self.run('detach-ns', dev, nsid=nsid, cntlid=cntlid)

    def delete_ns(self, dev, nsid):
        self.run('delete-ns', dev, nsid=nsid, timeout=max(self.timeout, 130))

    def ns_rescan(self, dev):
        self.run('ns-rescan', dev)

    def format(self, dev, nsid, lbaf, ses, timeout=FORMAT_TIMEOUT):
        """Format NVM with a secure erase (SES 1 or 2), keeping LBA format ``lbaf``.
        The command completes when the format has: no progress to poll."""
        self.run('format', dev, nsid=nsid, lbaf=lbaf, ses=ses, timeout_ms=timeout * 1000,
                 timeout=timeout + 10)
