"""What one NVMe controller supports, read once from its Identify data (issue 21).

The NVMe Base Specification makes most of what a cleanup could use optional, and a
controller that follows it refuses what it does not advertise: a Get Log Page for
the Sanitize Status log (0x81) without the Sanitize command is aborted with Invalid
Log Page, a Namespace Management command without OACS bit 3 with Invalid Command
Opcode, Identify CNS 02h on an NVMe 1.0 controller with Invalid Field in Command.
So every optional command, log page and Identify CNS value the driver may send is
named here, and the cleanup asks this profile (built once, from one Identify
Controller read) before it sends any of them. The profile, the action chosen and
why go into the erase record (``capability_decision``).

| what | advertised by |
|---|---|
| Sanitize crypto / block / overwrite | SANICAP bits 0 / 1 / 2 |
| Sanitize Status log (LID 0x81) | the Sanitize command (any SANICAP action) |
| No-Deallocate After Sanitize refused | SANICAP bit 29 (NDI) |
| Format NVM | OACS bit 1; FNA bit 0 (all namespaces), 1 (crypto erase all), 2 (crypto erase), 3 (no broadcast NSID) |
| Namespace Management / Attachment, Identify CNS 10h-13h, CNS 00h with NSID FFFFFFFFh | OACS bit 3 |
| Dataset Management (deallocate) / Write Zeroes / Verify | ONCS bits 2 / 3 / 7 |
| Identify CNS 02h (active namespace list) | VER >= 1.1 (VER itself is mandatory only from 1.2: 0 reads as "1.0") |
| Identify CNS 03h (namespace descriptors) | VER >= 1.3 |
| Commands Supported and Effects log / per-namespace SMART / log page offset | LPA bits 1 / 0 / 2 |
| Error, SMART (controller), Firmware Slot logs | mandatory |
| what a deallocated block reads / Write Zeroes may deallocate | DLFEAT bits 2:0 / 3 (Identify Namespace) |
"""
import dataclasses

MPSMIN = 4096               # MDTS counts in CAP.MPSMIN pages; 4 KiB on every x86 host


def version_text(ver):
    if not ver:
        return '1.0 (VER not reported)'
    major, minor, tertiary = ver >> 16, (ver >> 8) & 0xff, ver & 0xff
    return f'{major}.{minor}' + (f'.{tertiary}' if tertiary else '')


@dataclasses.dataclass(frozen=True)
class Profile:
    ver: int
    oacs: int
    oncs: int
    sanicap: int
    fna: int
    lpa: int
    mdts: int

    # -- sanitize
    @property
    def sanitize_crypto(self):
        return bool(self.sanicap & 0x1)

    @property
    def sanitize_block(self):
        return bool(self.sanicap & 0x2)

    @property
    def sanitize_overwrite(self):
        return bool(self.sanicap & 0x4)

    @property
    def sanitize(self):
        """The Sanitize command exists at all (and with it the log page 0x81)."""
        return bool(self.sanicap & 0x7)

    @property
    def sanitize_ndi(self):
        return bool(self.sanicap & (1 << 29))

    # -- admin
    @property
    def format_nvm(self):
        return bool(self.oacs & 0x2)

    @property
    def format_usable(self):
        """Format NVM can be sent through nvme-cli (see nvme_cli.Controller.format_erase:
        not with FNA bits 0 and 3 both set)."""
        return self.format_nvm and (self.fna & 0x9) != 0x9

    @property
    def format_crypto(self):
        return self.format_usable and bool(self.fna & 0x4)

    @property
    def ns_mgmt(self):
        return bool(self.oacs & 0x8)

    # -- I/O
    @property
    def dsm(self):
        return bool(self.oncs & 0x4)

    @property
    def write_zeroes(self):
        return bool(self.oncs & 0x8)

    @property
    def verify(self):
        return bool(self.oncs & 0x80)

    # -- Identify CNS values beyond 00h/01h
    @property
    def active_ns_list(self):
        return self.ver >= 0x10100

    @property
    def ns_descriptors(self):
        return self.ver >= 0x10300

    # -- logs
    @property
    def effects_log(self):
        return bool(self.lpa & 0x2)

    @property
    def smart_per_namespace(self):
        return bool(self.lpa & 0x1)

    @property
    def mdts_bytes(self):
        return None if not self.mdts else MPSMIN << self.mdts

    def as_dict(self):
        """The profile as stored in the erase record and std_board_info."""
        return {
            'nvme_version': version_text(self.ver),
            'fields': {'ver': f'{self.ver:#x}', 'oacs': f'{self.oacs:#x}',
                       'oncs': f'{self.oncs:#x}', 'sanicap': f'{self.sanicap:#x}',
                       'fna': f'{self.fna:#x}', 'lpa': f'{self.lpa:#x}',
                       'mdts': self.mdts},
            'sanitize': {'crypto': self.sanitize_crypto, 'block': self.sanitize_block,
                         'overwrite': self.sanitize_overwrite,
                         'no_deallocate_inhibited': self.sanitize_ndi,
                         'status_log_0x81': self.sanitize},
            'format_nvm': {'supported': self.format_nvm,
                           'all_namespaces': bool(self.fna & 0x1),
                           'crypto_erase_all_namespaces': bool(self.fna & 0x2),
                           'crypto_erase': bool(self.fna & 0x4),
                           'broadcast_nsid_refused': bool(self.fna & 0x8),
                           'usable_through_nvme_cli': self.format_usable},
            'namespace_management': self.ns_mgmt,
            'write_zeroes': self.write_zeroes,
            'dataset_management': self.dsm,
            'verify': self.verify,
            'identify_cns': sorted({0x00, 0x01}
                                   | ({0x02} if self.active_ns_list else set())
                                   | ({0x03} if self.ns_descriptors else set())
                                   | ({0x10, 0x11, 0x12, 0x13} if self.ns_mgmt else set())),
            'logs': sorted({0x01, 0x02, 0x03}
                           | ({0x05} if self.effects_log else set())
                           | ({0x81} if self.sanitize else set())),
            'smart_per_namespace': self.smart_per_namespace,
            'max_transfer_bytes': self.mdts_bytes,
        }


def profile(identity):
    """The Profile of an ``nvme_cli.Controller`` (one id-ctrl read)."""
    return Profile(ver=identity.ver, oacs=identity.oacs, oncs=identity.oncs,
                   sanicap=identity.sanicap, fna=identity.fna, lpa=identity.lpa,
                   mdts=identity.mdts)


def dlfeat_dict(dlfeat):
    """Identify Namespace DLFEAT: what a deallocated block reads as."""
    if dlfeat is None:
        return None
    reads = {0: 'not reported', 1: 'zeroes', 2: 'ones'}.get(dlfeat & 0x7, 'reserved')
    return {'dlfeat': f'{dlfeat:#x}', 'deallocated_reads': reads,
            'write_zeroes_deallocates': bool(dlfeat & 0x8)}
