"""Controller families operators buy, as their Identify data says (issue 21).

Each preset is the capability half of ``Simulation.add_controller()``: the fields a
real model reports in Identify Controller (VER, MDTS, OACS, LPA, SANICAP, ONCS, FNA,
NN), with the source of every value beside it. Where a capture does not show a field,
the value is marked *assumed* and chosen to keep the family what it is. Sizes,
serials and PCI ids stay the test's (media is small in tests; capacity is not a
capability).

OACS bit 1 -> ``format_nvm``, bit 3 -> ``ns_mgmt``; ONCS bit 2 -> ``dsm``, bit 3 ->
``wzs``, bit 7 -> ``verify``; SANICAP bit 0 -> ``ces``, bit 1 -> ``bes``, bits 31:29
-> ``sanicap_extra``; LPA bits 0-2. Bits the simulator does not model (Security
Send/Receive, Self-test, Compare, Timestamp, telemetry and persistent event logs...)
are listed in the comment but neither reported nor served: a simulated controller
claims nothing it would then refuse.
"""
import copy

PRESETS = {
    # Enterprise, crypto + block sanitize: Samsung PM1733 7.68 TB (U.2), from
    # `nvme id-ctrl -H` in github.com/tnear/linux nvme-id-ctrl.md: VER 0x10300,
    # MDTS 8, OACS 0x5f (Security, Format, FW, NS Mgmt, Self-test, NVMe-MI), LPA 0xe
    # (effects log, extended data, telemetry; no per-NS SMART), SANICAP 0x3, ONCS
    # 0x7f (Compare, WrUnc, DSM, Write Zeroes, Save/Select, Reservations, Timestamp;
    # no Verify), FNA 0x4 (crypto erase in Format, per-namespace scope), NN 32.
    # DLFEAT (Identify Namespace) is not in the capture: 0x09 assumed.
    'enterprise_crypto_block': dict(
        model='SAMSUNG MZWLJ7T6HALA-00AU3', version=0x10300, mdts=8, lpa=0xe,
        ces=True, bes=True, sanicap_extra=0, wzs=True, dsm=True, verify=False,
        format_nvm=True, ns_mgmt=True, fna=0x4, max_namespaces=32, dlfeat=0x9),
    # Data-centre, block erase only: DERA P44 3.2 TB U.2 (DERAP44YGM03T2US, firmware
    # D7Y05M1F), from a public `nvme id-ctrl /dev/nvme0` capture in a GitHub
    # learning-notes page (found with the code search for "sanicap   : 0x40000002"):
    # VER 0x20000, MDTS 8, OACS 0x1e (Format, FW, NS Mgmt, Self-test), LPA 0x2a
    # (effects log, telemetry, bit 5), SANICAP 0x40000002 (BES; NODMMAS 01b), ONCS 0x44
    # (DSM, Timestamp: no Write Zeroes), FNA 0, NN 1. DLFEAT not in the capture: 0x01
    # assumed (deallocated blocks read zeroes; no Write Zeroes to deallocate with).
    # The simulator does not serve the telemetry logs LPA bit 3 announces.
    'block_erase': dict(
        model='DERAP44YGM03T2US', version=0x20000, mdts=8, lpa=0x2a,
        ces=False, bes=True, sanicap_extra=0x40000000, wzs=False, dsm=True,
        verify=False, format_nvm=True, ns_mgmt=True, fna=0x0, max_namespaces=1,
        dlfeat=0x1),
    # Client, Format NVM with secure erase and no sanitize: Samsung PM981a 1 TB
    # (MZVLB1T0HBLR-000H1), smartctl 7.2 in linux-hardware.ru probe 543d2dfef7:
    # NVMe 1.3, OACS 0x0017 (Security, Format, FW, Self-test; no NS Mgmt), ONCS
    # 0x005f (Compare, WrUnc, DSM, Write Zeroes, Save/Select, Timestamp), LPA 0x03
    # (per-NS SMART, effects log), MDTS 512 pages (2^9), NN 1. smartctl does
    # not print SANICAP or FNA: SANICAP 0 (the family: no sanitize) and FNA 0x4
    # (crypto erase as part of Format) assumed.
    'client_format': dict(
        model='SAMSUNG MZVLB1T0HBLR-000H1', version=0x10300, mdts=9, lpa=0x3,
        ces=False, bes=False, sanicap_extra=0, wzs=True, dsm=True, verify=False,
        format_nvm=True, ns_mgmt=False, fna=0x4, max_namespaces=1, dlfeat=0x9),
    # DRAM-less client, Write Zeroes + deallocate: Kingston NV2 2 TB (SNV2S2000G),
    # smartctl 7.3 in linux-hardware.ru probe 7117d51b53: NVMe 1.4, OACS 0x0016
    # (Format, FW, Self-test), ONCS 0x009f (Compare, WrUnc, DSM, Write Zeroes,
    # Save/Select, Verify), LPA 0x12 (effects log, persistent event log), MDTS 64
    # pages (2^6), 1 namespace. SANICAP 0 and FNA 0 assumed (not printed by smartctl).
    'write_zeroes_dealloc': dict(
        model='KINGSTON SNV2S2000G', version=0x10400, mdts=6, lpa=0x12,
        ces=False, bes=False, sanicap_extra=0, wzs=True, dsm=True, verify=True,
        format_nvm=True, ns_mgmt=False, fna=0x0, max_namespaces=1, dlfeat=0x9),
    # Minimal: no real model; what the Base Specification makes mandatory and nothing
    # else: read, write, flush, Identify CNS 0/1, the error/SMART/firmware logs. VER 0
    # (the field is only mandatory from NVMe 1.2: a 1.0 controller reports 0, so even
    # the active namespace list, CNS 02h of NVMe 1.1, is refused), OACS/ONCS/SANICAP/
    # FNA/LPA 0, DLFEAT 0 (deallocate behaviour not reported), NN 1.
    'minimal': dict(
        model='Minimal NVMe 1.0', version=0x0, mdts=5, lpa=0x0,
        ces=False, bes=False, sanicap_extra=0, wzs=False, dsm=False, verify=False,
        format_nvm=False, ns_mgmt=False, fna=0x0, max_namespaces=1, dlfeat=0x0),
}
NAMES = tuple(PRESETS)


def get(name):
    """add_controller() keyword arguments of a preset (a copy)."""
    if name not in PRESETS:
        raise KeyError(f'no preset {name!r}; known: {", ".join(NAMES)}')
    return copy.deepcopy(PRESETS[name])
