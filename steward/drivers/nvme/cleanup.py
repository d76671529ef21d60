"""Running one locked-in cleanup action on one NVMe controller, and proving it.

The tenant had the whole controller (PCI passthrough), so before its instance went
away it could issue any admin command: detach or delete its namespaces, create
smaller ones (the rest of the media then sits in unallocated capacity, and on flash a
new namespace may map the old blocks), format them differently, start a sanitize of
its own or leave the controller in sanitize failure mode. Whatever it left, every
cleanup runs the same steps:

1. **Settle**: read the sanitize log; wait out a sanitize still running (it survives
   resets and would refuse ours); leave sanitize failure mode — "exit failure mode"
   when it is unrestricted, else one recovery sanitize (the only way out of the
   restricted mode; it erases more, never less).
2. **Canonical layout** (namespace management, OACS bit 3): one namespace covering
   the whole capacity (TNVMCAP), attached, in the device's LBA format (the operator's
   ``lba_size``, else the one it had at discovery). Whatever was detached, deleted or
   never allocated is now inside that namespace, so it is what gets erased and read
   back. Without namespace management the tenant could not have changed the layout;
   the namespaces found are used, and a controller with none attached cannot be
   addressed: that is an error, never an unverified success.
3. **Watermarks**: random blocks at spread offsets of the canonical namespace,
   written before the erase, where tenant data could be.
4. **Erase**: the locked-in action. Sanitize: issued, then SPROG/SSTAT polled until
   the controller says it is over; only "succeeded" (and the action we issued) is
   success. Format NVM with a secure erase (SES 1 user data, SES 2 crypto): one
   command per namespace, or one for all of them where FNA says the format applies
   to all (bit 0: NSID FFFFFFFFh; bit 1, crypto erase: one namespace); it completes
   when done, and only the read-back makes it a success.
   Write zeroes: the kernel's BLKZEROOUT over the whole namespace (the
   controller's Write Zeroes at their largest size). Shred: zeroes written from the
   host with O_DIRECT.
5. **Verify**: the watermarks read back with O_DIRECT must be gone; after zeroing,
   they and a random sample of other blocks must read as zeroes.
6. **Restore**: the canonical layout again (a sanitize keeps it; this proves it), so
   every tenant receives the device in the same known shape. The layout before and
   after go into the erase record (``job.record``) with every other fact.
"""
import functools
import logging
import os
import time

from steward.common import exception
from steward.drivers.nvme import caps as nvme_caps
from steward.drivers.nvme import cli as nvme_cli
from steward.drivers.nvme import policy
from steward.drivers.nvme import sysfs as nvme_sysfs
from steward.privsep import blockdev
from steward.privsep import blockio

LOG = logging.getLogger(__name__)

SANACT = {policy.SANITIZE_CRYPTO: nvme_cli.SANACT_CRYPTO,
          policy.SANITIZE_BLOCK: nvme_cli.SANACT_BLOCK}
# What each action sends that the controller must advertise (nvme_caps.Profile).
NEEDS = {policy.SANITIZE_CRYPTO: ('sanitize_crypto', 'Sanitize crypto erase (SANICAP bit 0)'),
         policy.SANITIZE_BLOCK: ('sanitize_block', 'Sanitize block erase (SANICAP bit 1)'),
         policy.FORMAT_CRYPTO: ('format_crypto',
                                'Format NVM (OACS bit 1) with crypto erase (FNA bit 2)'),
         policy.FORMAT_USER_DATA: ('format_usable', 'Format NVM (OACS bit 1)'),
         policy.WRITE_ZEROES: ('write_zeroes', 'Write Zeroes (ONCS bit 3)')}
SES = {policy.FORMAT_CRYPTO: nvme_cli.SES_CRYPTO,
       policy.FORMAT_USER_DATA: nvme_cli.SES_USER_DATA}
POLL_FIRST, POLL_MAX = 0.05, 1.0
NAMESPACE_APPEAR_SECONDS = 30
ZERO_SAMPLES = 64           # extra blocks read back after zeroing, at random offsets


class Cleaner:
    def __init__(self, cli, ctrl, job, device_uuid, lba_size=None, reason=None,
                 discovered=None):
        self.cli = cli
        self.reason = reason                # why discovery locked this action in
        self.discovered = discovered        # the Identify profile discovery chose on
        self.caps = None                    # nvme_caps.Profile, read once in run()
        self.uses = {}                      # step -> what was sent, or why not
        self.ctrl = ctrl                    # nvme_sysfs.ControllerRef
        self.job = job
        self.device = device_uuid
        self.record = job.record
        self.lba_size = lba_size            # canonical LBA size; None: as found
        self.identity = None
        self._format = None                 # the canonical LBA format, once chosen

    # -- entry point ---------------------------------------------------------------
    def run(self, action):
        if action not in policy.ACTIONS:
            raise exception.CleanupUnsupported(device=self.device,
                                               reason=f'unknown cleanup action {action!r}')
        self.identity = identity = self.cli.id_ctrl(self.ctrl.char_path)
        self.record.update(serial=identity.serial, model=identity.model,
                           firmware=identity.firmware, subsysnqn=identity.subnqn,
                           capabilities=identity.capabilities(), action=action)
        # One Identify read decides what this cleanup may send; every optional
        # command below asks self.caps, and the erase record says what it found.
        self.caps = nvme_caps.profile(identity)
        self.record['capability_decision'] = {
            'available': self.caps.as_dict(), 'chosen': action,
            'assurance_level': policy.ASSURANCE[action], 'why': self.reason,
            'uses': self.uses}
        then = (self.discovered or {}).get('fields') or {}
        now = self.caps.as_dict()['fields']
        changed = {k: [then[k], now[k]] for k in now if k in then and then[k] != now[k]}
        if changed:
            # e.g. a firmware update while the device was in use: the action was
            # chosen on the old data; what is sent below follows the new.
            self.record['capability_decision']['changed_since_discovery'] = changed
            LOG.warning('device %s: Identify changed since discovery: %s', self.device,
                        changed)
        need = NEEDS.get(action)
        if need and not getattr(self.caps, need[0]):
            raise exception.CleanupUnsupported(
                device=self.device, reason=f'the locked-in action {action} needs '
                f'{need[1]}, which the controller no longer reports '
                f'({self.caps.as_dict()["fields"]}); nothing was sent. Re-discover and '
                f're-clean: in error the action may change')
        self.precheck()
        self.settle(action)
        self.record['layout_before'] = layout = self.layout()
        self.lay_out(layout)
        marks = self.write_marks()
        self.job.check()
        if action in SANACT:
            self.uses['erase'] = f'Sanitize {nvme_cli.SANACT_TEXT[SANACT[action]]}'
            self.sanitize(SANACT[action], marks)
        elif action in SES:
            self.format_erase(SES[action], marks)
        else:
            self.uses['erase'] = (
                "BLKZEROOUT: the kernel's Write Zeroes (ONCS bit 3)"
                if action == policy.WRITE_ZEROES else
                'host writes of zeroes (O_DIRECT): no optional command needed')
            self.zero(marks, kernel=action == policy.WRITE_ZEROES)
        self.uses['verify'] = 'host O_DIRECT read-back (the Verify command proves nothing here)'
        self.record['layout_after'] = self.lay_out(self.layout(), phase='restore')
        self.record['assurance_level'] = policy.ASSURANCE[action]

    # -- safety --------------------------------------------------------------------
    def precheck(self):
        self.job.progress('precheck')
        mounted = nvme_sysfs.mounted_devices()
        for ns in self.ctrl.namespaces():
            holders = self.ctrl.holders(ns)
            if holders:
                raise exception.PrecheckFailed(device=self.device,
                                               reason=f'{ns.name} is held by {holders}')
            real = os.path.realpath(ns.path)
            if any(m == real or m.startswith(real + 'p') for m in mounted):
                raise exception.PrecheckFailed(device=self.device,
                                               reason=f'{ns.name} is mounted on this host')

    # -- 1. settle -----------------------------------------------------------------
    def settle(self, action):
        """Nothing of the tenant's may still be running or blocking: wait for its
        sanitize, then leave sanitize failure mode."""
        if not self.caps.sanitize:
            # No Sanitize command: no tenant sanitize can be running or have failed,
            # and the log page 0x81 is not there to read (Invalid Log Page).
            self.record['sanitize_before'] = ('no sanitize on this controller (SANICAP '
                                              f'{self.caps.sanicap:#x}): nothing to settle')
            self.uses['sanitize_log'] = 'not read: SANICAP reports no sanitize action'
            return
        self.job.progress('sanitize_log')
        self.uses['sanitize_log'] = 'Get Log Page 0x81 (SANICAP reports sanitize)'
        status = self.cli.sanitize_log(self.ctrl.char_path)
        self.record['sanitize_before'] = status.describe()
        if status.in_progress:
            LOG.warning('device %s: %s; waiting for it first', self.device,
                        status.describe())
            status = self._poll('wait_previous')
            self.record['sanitize_before'] += f'; then {status.describe()}'
        if status.failed:
            self._leave_failure_mode(action)

    def _leave_failure_mode(self, action):
        self.job.progress('failure_mode', detail='controller in sanitize failure mode')
        try:
            self.cli.sanitize(self.ctrl.char_path, nvme_cli.SANACT_EXIT_FAILURE)
            self.record['failure_mode'] = 'unrestricted: left with exit-failure-mode'
            return
        except exception.NvmeCommandFailed as err:
            refusal = str(err)
        sanact = SANACT.get(action) or (
            nvme_cli.SANACT_CRYPTO if self.identity.ces else
            nvme_cli.SANACT_BLOCK if self.identity.bes else None)
        if sanact is None:
            raise exception.SanitizeFailed(
                device=self.device, reason='the controller is in sanitize failure mode '
                f'({refusal}) and supports no sanitize action to leave it')
        LOG.warning('device %s: restricted sanitize failure mode; a %s sanitize first',
                    self.device, nvme_cli.SANACT_TEXT[sanact])
        status = self._sanitize_once(sanact, 'failure_mode')
        if not status.succeeded:
            raise exception.SanitizeFailed(
                device=self.device, reason='the sanitize that should have left sanitize '
                f'failure mode ended: {status.describe()}')
        self.record['failure_mode'] = (f'restricted: left with a '
                                       f'{nvme_cli.SANACT_TEXT[sanact]} sanitize')

    # -- 2. canonical layout -------------------------------------------------------
    def layout(self):
        """What the controller holds now: capacity, unallocated bytes and every
        allocated namespace (attached or not)."""
        dev = self.ctrl.char_path
        ident = self.cli.id_ctrl(dev)
        found = {}
        if self.caps.active_ns_list:
            active = self.cli.list_ns(dev)
            self.uses['namespace_list'] = 'Identify CNS 02h (active namespace list)'
        else:
            # Before NVMe 1.1 there is no namespace list: Identify Namespace of every
            # nsid up to NN, an inactive one reads as zeroes.
            active = []
            for nsid in range(1, max(ident.nn, 1) + 1):
                info = self.cli.id_ns(dev, nsid)
                if info.nsze:
                    active.append(nsid)
                    found[nsid] = info
            self.uses['namespace_list'] = (
                f'Identify CNS 00h for nsid 1..{max(ident.nn, 1)} (NVMe '
                f'{nvme_caps.version_text(self.caps.ver)} has no CNS 02h)')
        if self.caps.ns_mgmt:
            allocated = self.cli.list_ns(dev, allocated=True)
            self.uses['allocated_list'] = 'Identify CNS 10h (namespace management)'
        else:
            allocated = active
        namespaces = []
        for nsid in sorted(set(allocated) | set(active)):
            entry = {'nsid': nsid, 'attached': nsid in active}
            if nsid in active:
                info = found.get(nsid) or self.cli.id_ns(dev, nsid)
                entry.update(blocks=info.nsze, lba_size=info.lba_size,
                             bytes=info.size_bytes)
                decision = self.record['capability_decision']['available']
                decision.setdefault('dlfeat', nvme_caps.dlfeat_dict(info.dlfeat))
            namespaces.append(entry)
        return {'capacity': ident.tnvmcap, 'unallocated': ident.unvmcap,
                'namespaces': namespaces}

    def _target_format(self, layout):
        formats = self.cli.formats(self.ctrl.char_path)
        want = self.lba_size or next(
            (ns['lba_size'] for ns in layout['namespaces'] if ns.get('lba_size')), None)
        if want is None:
            plain = [f for f in formats if f.metadata == 0] or formats
            if not plain:
                raise exception.NamespaceLayoutFailed(
                    device=self.device, reason='the controller reports no LBA format')
            return plain[0]
        fits = sorted((f for f in formats if f.lba_size == want),
                      key=lambda f: f.metadata)
        if not fits:
            raise exception.NamespaceLayoutFailed(
                device=self.device, reason=f'LBA size {want} is not among the '
                f'controller\'s formats ({sorted({f.lba_size for f in formats})})')
        return fits[0]

    @staticmethod
    def _canonical(layout, fmt):
        namespaces = layout['namespaces']
        if len(namespaces) != 1 or not namespaces[0]['attached']:
            return False
        ns = namespaces[0]
        return (ns['lba_size'] == fmt.lba_size and
                ns['blocks'] == layout['capacity'] // fmt.lba_size and
                layout['unallocated'] < fmt.lba_size)

    def lay_out(self, layout, phase='layout'):
        """Bring the controller from ``layout`` (as layout() read it) to the
        canonical one (see module doc); returns the layout it leaves."""
        if not self.caps.ns_mgmt:
            self.uses['layout'] = ('as found: no Namespace Management/Attachment '
                                   '(OACS bit 3)')
            if not self.ctrl.namespaces():
                raise exception.NamespaceLayoutFailed(
                    device=self.device, reason='no namespace is attached and the '
                    'controller has no namespace management (OACS bit 3): its media '
                    'can be neither addressed nor laid out, so no erase could be verified')
            self.record['layout'] = 'as found: no namespace management'
            return layout
        dev = self.ctrl.char_path
        if not layout['capacity']:
            raise exception.NamespaceLayoutFailed(
                device=self.device, reason='namespace management without TNVMCAP: the '
                                           'whole capacity cannot be laid out')
        self.uses['layout'] = ('Namespace Management + Attachment (OACS bit 3), '
                               'Identify CNS 00h NSID FFFFFFFFh for the LBA formats')
        if self._format is None:        # the restore keeps the format chosen first
            self._format = self._target_format(layout)
        fmt = self._format
        self.record['lba_size'] = fmt.lba_size
        if not self._canonical(layout, fmt):
            if phase == 'restore':
                LOG.warning('device %s: layout changed during the erase: %s', self.device,
                            layout)
            self.job.progress(phase, detail=f'one namespace of {layout["capacity"]} '
                                            f'bytes in {fmt.lba_size}-byte blocks')
            try:
                for ns in layout['namespaces']:
                    self.job.check()
                    self.cli.delete_ns(dev, ns['nsid'])
                blocks = layout['capacity'] // fmt.lba_size
                flbas = (fmt.index & 0xf) | ((fmt.index & 0x30) << 1)
                new = self.cli.create_ns(dev, blocks, flbas)
                self.cli.attach_ns(dev, new, self.identity.cntlid)
                self.cli.ns_rescan(dev)
            except exception.NvmeCommandFailed as err:
                raise exception.NamespaceLayoutFailed(device=self.device, reason=str(err))
            self.record.setdefault('layout_changes', []).append(
                {'phase': phase, 'deleted': [ns['nsid'] for ns in layout['namespaces']],
                 'created': new, 'blocks': blocks, 'lba_size': fmt.lba_size})
            layout = self.layout()
            if not self._canonical(layout, fmt):
                raise exception.NamespaceLayoutFailed(
                    device=self.device, reason=f'after re-creating the namespace the '
                    f'controller reports {layout}, not one namespace over its capacity')
        nsid = layout['namespaces'][0]['nsid']
        deadline = time.monotonic() + NAMESPACE_APPEAR_SECONDS
        while not any(ns.nsid == nsid and os.path.exists(ns.path)
                      for ns in self.ctrl.namespaces()):
            self.job.check()
            if time.monotonic() > deadline:
                raise exception.NamespaceLayoutFailed(
                    device=self.device, reason=f'namespace {nsid} exists but its block '
                    f'device did not appear within {NAMESPACE_APPEAR_SECONDS} s')
            time.sleep(0.1)
            self.cli.ns_rescan(dev)
        return layout

    # -- 3. watermarks -------------------------------------------------------------
    def write_marks(self):
        self.job.progress('watermark')
        marks = {}
        for ns in self.ctrl.namespaces():
            try:
                marks[ns.nsid] = (ns, blockdev.size(ns.path), blockdev.write_marks(ns.path))
            except OSError as err:
                raise exception.PrecheckFailed(
                    device=self.device, reason=f'cannot write watermarks on {ns.path}: '
                                               f'{err.strerror or err}')
        if not any(ms for _, _, ms in marks.values()):
            raise exception.PrecheckFailed(
                device=self.device, reason='no namespace large enough for a watermark: '
                                           'the erase could not be verified')
        self.record['watermarks'] = sum(len(m) for _, _, m in marks.values())
        return marks

    # -- 5. verify -----------------------------------------------------------------
    def verify(self, marks, expect_zero):
        self.job.progress('verify')
        self.job.check()
        problems, checked = [], 0
        current = {ns.nsid: ns for ns in self.ctrl.namespaces()}
        for nsid, (ns, size, ms) in sorted(marks.items()):
            if nsid not in current or current[nsid].path != ns.path:
                problems.append(f'{ns.path} went away during the erase')
                continue
            try:
                problems += blockdev.check_marks(ns.path, ms, expect_zero)
                checked += len(ms)
                if expect_zero:
                    offsets = blockio.sample_offsets(size, ZERO_SAMPLES)
                    problems += [f'{ns.path}@{o}: not zero after zeroing'
                                 for o in blockdev.nonzero_blocks(ns.path, offsets)]
                    checked += len(offsets)
            except OSError as err:
                problems.append(f'{ns.path}: read-back failed ({err.strerror or err})')
        self.record['verification_checked'] = checked
        if problems or not checked:
            self.record['verification'] = 'failed'
            self.record['verification_detail'] = '; '.join(problems[:10]) or \
                'nothing could be read back'
            raise exception.VerifyFailed(device=self.device,
                                         reason=self.record['verification_detail'])
        self.record['verification'] = 'passed'
        self.record['verification_detail'] = (
            f'{checked} block(s) read back with O_DIRECT: no watermark'
            + (', all zero' if expect_zero else ''))

    # -- 4. erase: sanitize --------------------------------------------------------
    def _poll(self, phase):
        """Read the sanitize log until it leaves "in progress"."""
        delay = POLL_FIRST
        while True:
            status = self.cli.sanitize_log(self.ctrl.char_path)
            self.record['sprog'] = status.sprog
            if not status.in_progress:
                return status
            self.job.progress(phase, status.percent, status.describe())
            self.job.check()
            time.sleep(delay)
            self.job.check()
            delay = min(delay * 1.5, POLL_MAX)

    def _sanitize_once(self, sanact, phase):
        self.job.progress(phase, 0.0)
        try:
            self.cli.sanitize(self.ctrl.char_path, sanact)
        except exception.NvmeCommandFailed as err:
            raise exception.SanitizeFailed(device=self.device,
                                           reason=f'the sanitize command failed: {err}')
        return self._poll(phase)

    def sanitize(self, sanact, marks):
        status = self.cli.sanitize_log(self.ctrl.char_path)
        estimate = status.estimates.get('crypto' if sanact == nvme_cli.SANACT_CRYPTO
                                        else 'block')
        if estimate is not None:
            self.record['estimated_seconds'] = estimate
        status = self._sanitize_once(sanact, 'erase')
        self.record['sstat'] = status.sstat
        self.record['sstat_text'] = status.describe()
        self.record['sprog'] = status.sprog
        if status.failed:
            raise exception.SanitizeFailed(
                device=self.device, reason='the controller reports the sanitize failed '
                                           '(SSTAT 3); it stays in sanitize failure mode')
        if not status.succeeded:
            raise exception.SanitizeFailed(
                device=self.device, reason=f'SSTAT after the sanitize: {status.text}')
        if status.sanact is not None and status.sanact != sanact:
            raise exception.SanitizeFailed(
                device=self.device, reason=f'the sanitize log records '
                f'{nvme_cli.SANACT_TEXT.get(status.sanact, status.sanact)}, not the '
                f'{nvme_cli.SANACT_TEXT[sanact]} that was issued')
        self.job.progress('erase', 100.0, status.describe())
        self.verify(marks, expect_zero=False)

    # -- 4. erase: Format NVM secure erase -----------------------------------------
    def format_scope(self, ses, nsids):
        """The NSIDs to send Format NVM to, and why (NVMe 2.0 §5.14 and Identify
        Controller FNA). FNA bit 0: a format of any namespace formats all of them
        (which then share one LBA format): one command, to NSID FFFFFFFFh (nvme-cli
        2.3 sends it there anyway; with FNA bit 3, which refuses that NSID, format
        is not offered at all: nvme_cli.Controller.format_erase). FNA bit 1: a crypto
        erase of one namespace erases all of them (their LBA formats stay their
        own): one command, to one namespace. Otherwise each namespace in turn."""
        fna = self.caps.fna
        if fna & 0x1:
            return [nvme_cli.NSID_ALL], 'NSID FFFFFFFFh: every namespace (FNA bit 0)'
        if ses == nvme_cli.SES_CRYPTO and fna & 0x2:
            return nsids[:1], (f'namespace {nsids[0]}, whose crypto erase FNA bit 1 '
                               'applies to all namespaces')
        return nsids, (f'each namespace ({", ".join(map(str, nsids))}): FNA {fna:#x} '
                       'formats only the namespace named')

    def format_erase(self, ses, marks):
        """Format NVM with Secure Erase Settings ``ses`` over every namespace the
        watermarks are on, keeping each one's LBA format; then the read-back."""
        dev = self.ctrl.char_path
        nsids = sorted(marks)
        targets, scope = self.format_scope(ses, nsids)
        what = 'cryptographic erase' if ses == nvme_cli.SES_CRYPTO else 'user data erase'
        self.uses['erase'] = f'Format NVM SES {ses} ({what}, OACS bit 1' + (
            ', FNA bit 2)' if ses == nvme_cli.SES_CRYPTO else ')') + f'; scope: {scope}'
        lbafs = {}
        for nsid in nsids:
            flbas = self.cli.id_ns(dev, nsid).flbas
            lbafs[nsid] = (flbas & 0xf) | ((flbas >> 1) & 0x30)
        self.record['format'] = {'ses': ses, 'nsids': targets, 'scope': scope}
        for i, nsid in enumerate(targets):
            self.job.check()
            self.job.progress('erase', round(i * 100 / len(targets), 1),
                              f'Format NVM SES {ses}, nsid {nsid:#x}')
            lbaf = lbafs[nsids[0] if nsid == nvme_cli.NSID_ALL else nsid]
            try:
                self.cli.format(dev, nsid, lbaf, ses)
            except exception.NvmeCommandFailed as err:
                raise exception.FormatFailed(device=self.device, reason=str(err))
        self.job.progress('erase', 100.0, f'Format NVM SES {ses} completed')
        # Completion is the drive's word: the read-back below decides.
        self.verify(marks, expect_zero=False)

    # -- 4. erase: zero ------------------------------------------------------------
    def zero(self, marks, kernel):
        namespaces = [ns for ns, _, _ in (marks[n] for n in sorted(marks))]
        sizes = {ns.nsid: marks[ns.nsid][1] for ns in namespaces}
        total = sum(sizes.values()) or 1
        done = 0
        for ns in namespaces:
            self.job.check()

            def progress(fraction, base=done, size=sizes[ns.nsid], name=ns.name):
                self.job.progress('erase', round((base + fraction * size) * 100 / total, 1),
                                  f'zeroing {name}')
            # One privsep call per piece: cancel and progress stay here.
            if kernel:
                pieces = blockio.zeroout_chunks(sizes[ns.nsid])
                do = functools.partial(blockdev.zeroout_range, ns.path)
            else:
                pieces = blockio.slices(sizes[ns.nsid])
                do = functools.partial(blockdev.zero_range, ns.path)
            try:
                blockio.run_pieces(pieces, do, cancel=self.job.cancelled,
                                   progress=progress)
            except blockio.Cancelled:
                self.job.check()
            except OSError as err:
                raise exception.ZeroingFailed(device=self.device,
                                              reason=f'{ns.path}: {err.strerror or err}')
            done += sizes[ns.nsid]
        self.record['bytes_zeroed'] = done
        self.verify(marks, expect_zero=True)


def read_interrupted(cli, ctrl):
    """What the sanitize log says of a controller whose cleanup was cut short
    (agent crash), e.g. "sanitize still in progress 43 %"."""
    try:
        caps = nvme_caps.profile(cli.id_ctrl(ctrl.char_path))
        if not caps.sanitize:
            return (f'no sanitize on this controller (SANICAP {caps.sanicap:#x}): '
                    'nothing runs on in the background')
        return cli.sanitize_log(ctrl.char_path).describe()
    except exception.NvmeCliMissing:
        return 'sanitize log unreadable: nvme-cli missing'
    except exception.NvmeCommandFailed as err:
        return f'sanitize log unreadable: {err}'
