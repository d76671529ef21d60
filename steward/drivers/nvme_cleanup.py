"""Running one locked-in cleanup action on one NVMe controller, and proving it.

Sanitize path (spec 1, "Cleanup execution order"): read the sanitize log first and
wait out a sanitize already running (it survives resets and power loss, and a second
one would be refused), write watermarks, issue the action, poll SPROG/SSTAT until the
controller says it is over, then decode SSTAT: only "succeeded" is success, whatever
the sanitize command itself returned. A sanitize already running is waited for but
not taken as ours: its erase began before our watermarks, so it proves nothing.

Zero path: write watermarks; with more than one namespace and namespace management
(OACS bit 3) delete them all and create one covering the capacity; then zero every
block, through ``nvme write-zeroes`` (65 536 blocks per command: NLB is 16 bits) when
the controller has WZS, else from the host (blockio.zero_fill).

Both end by reading the watermark offsets back with O_DIRECT: a surviving watermark
(or, after zeroing, a non-zero byte) fails the cleanup. Every fact along the way goes
into ``job.record`` (the erase record).
"""
import logging
import os
import time

from steward.common import exception
from steward.drivers import blockio
from steward.drivers import nvme_cli
from steward.drivers import nvme_policy as policy
from steward.drivers import nvme_sysfs

LOG = logging.getLogger(__name__)

SANACT = {policy.SANITIZE_CRYPTO: nvme_cli.SANACT_CRYPTO,
          policy.SANITIZE_BLOCK: nvme_cli.SANACT_BLOCK}
POLL_FIRST, POLL_MAX = 0.05, 1.0
NAMESPACE_APPEAR_SECONDS = 30


class Cleaner:
    def __init__(self, cli, ctrl, job, device_uuid):
        self.cli = cli
        self.ctrl = ctrl                    # nvme_sysfs.ControllerRef
        self.job = job
        self.device = device_uuid
        self.record = job.record

    # -- entry point ---------------------------------------------------------------
    def run(self, action):
        identity = self.cli.id_ctrl(self.ctrl.char_path)
        self.record.update(serial=identity.serial, model=identity.model,
                           firmware=identity.firmware,
                           capabilities=identity.capabilities(), action=action)
        self.identity = identity
        self.precheck()
        if action in SANACT:
            self.sanitize(SANACT[action])
        elif action == policy.WRITE_ZEROES:
            self.zero(controller_side=True)
        elif action == policy.SHRED:
            self.zero(controller_side=False)
        else:
            raise exception.CleanupUnsupported(device=self.device,
                                               reason=f'unknown cleanup action {action!r}')
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

    # -- watermarks ----------------------------------------------------------------
    def write_marks(self, tolerate_failure=None):
        """Watermarks on every namespace. ``tolerate_failure`` (a reason) lets a
        controller that refuses I/O (sanitize failure mode) go on unverified."""
        self.job.progress('watermark')
        marks = {}
        for ns in self.ctrl.namespaces():
            try:
                marks[ns.nsid] = (ns, blockio.size_of(ns.path), blockio.write_marks(ns.path))
            except OSError as err:
                if tolerate_failure:
                    LOG.warning('device %s: no watermarks (%s: %s)', self.device,
                                tolerate_failure, err)
                    self.record['watermarks_skipped'] = f'{tolerate_failure}: {err}'
                    return {}
                raise exception.PrecheckFailed(
                    device=self.device, reason=f'cannot write watermarks on {ns.path}: '
                                               f'{err.strerror or err}')
        self.record['namespaces_before'] = sorted(marks)
        self.record['watermarks'] = sum(len(m) for _, _, m in marks.values())
        return marks

    def verify(self, marks, expect_zero):
        self.job.progress('verify')
        self.job.check()
        problems, checked = [], 0
        current = {ns.nsid: ns for ns in self.ctrl.namespaces()}
        by_content = {data for _, _, ms in marks.values() for _, data in ms}
        offset_base, survivors = 0, []
        for nsid, (old, old_size, ms) in sorted(marks.items()):
            ns = current.get(nsid)
            try:
                if ns is not None and ns.path == old.path:
                    problems += blockio.check_marks(ns.path, ms, expect_zero)
                    checked += len(ms)
                else:
                    survivors.append((offset_base, old, ms))
            except OSError as err:
                problems.append(f'{old.path}: read-back failed ({err.strerror or err})')
            offset_base += old_size
        # Namespaces were consolidated: look for every old mark at the same linear
        # offsets of what exists now, and require zeroes there.
        for base, old, ms in survivors:
            for ns in current.values():
                try:
                    size = blockio.size_of(ns.path)
                    offsets = [base + off for off, _ in ms
                               if base + off + blockio.MARK_SIZE <= size]
                    offsets += blockio.mark_offsets(size)
                    hits = blockio.find_any_mark(ns.path, by_content, offsets)
                    problems += [f'{ns.path}@{o}: watermark of old {old.name} survived'
                                 for o in hits]
                    if expect_zero:
                        blocks = blockio.read_blocks(ns.path, offsets)
                        problems += [f'{ns.path}@{o}: not zero after zeroing'
                                     for o, b in blocks.items() if b.count(0) != len(b)]
                    checked += len(offsets)
                except OSError as err:
                    problems.append(f'{ns.path}: read-back failed ({err.strerror or err})')
        self.record['verification_checked'] = checked
        if problems:
            self.record['verification'] = 'failed'
            self.record['verification_detail'] = '; '.join(problems[:10])
            raise exception.VerifyFailed(device=self.device, reason=self.record[
                'verification_detail'])
        if not marks:
            self.record['verification'] = 'skipped'
            self.record['verification_detail'] = self.record.get(
                'watermarks_skipped', 'no namespace to write watermarks on')
        else:
            self.record['verification'] = 'passed'
            self.record['verification_detail'] = (
                f'{checked} block(s) read back with O_DIRECT: no watermark'
                + (', all zero' if expect_zero else ''))

    # -- sanitize ------------------------------------------------------------------
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

    def sanitize(self, sanact):
        self.job.progress('sanitize_log')
        before = self.cli.sanitize_log(self.ctrl.char_path)
        self.record['sanitize_before'] = before.describe()
        if before.in_progress:
            LOG.warning('device %s: %s; waiting for it before starting ours',
                        self.device, before.describe())
            before = self._poll('wait_previous')
            self.record['sanitize_before'] += f'; then {before.describe()}'
        estimate = before.estimates.get('crypto' if sanact == nvme_cli.SANACT_CRYPTO
                                        else 'block')
        if estimate is not None:
            self.record['estimated_seconds'] = estimate
        # After a failed sanitize the controller may refuse I/O until one succeeds.
        marks = self.write_marks(tolerate_failure='controller in sanitize failure mode'
                                 if before.failed else None)
        self.job.check()
        self.job.progress('erase', 0.0)
        try:
            self.cli.sanitize(self.ctrl.char_path, sanact)
        except exception.NvmeCommandFailed as err:
            raise exception.SanitizeFailed(device=self.device,
                                           reason=f'the sanitize command failed: {err}')
        status = self._poll('erase')
        self._record_sstat(status)
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

    def _record_sstat(self, status):
        self.record['sstat'] = status.sstat
        self.record['sstat_text'] = status.describe()
        self.record['sprog'] = status.sprog

    # -- zero ----------------------------------------------------------------------
    def zero(self, controller_side):
        marks = self.write_marks()
        self.consolidate()
        namespaces = self.ctrl.namespaces()
        self.record['namespaces_after'] = [ns.nsid for ns in namespaces]
        if not namespaces:
            LOG.warning('device %s has no namespace: nothing is host-addressable',
                        self.device)
        sizes = {ns.nsid: blockio.size_of(ns.path) for ns in namespaces}
        total = sum(sizes.values()) or 1
        done = 0
        for ns in namespaces:
            self.job.check()

            def progress(fraction, base=done, size=sizes[ns.nsid]):
                self.job.progress('erase', round((base + fraction * size) * 100 / total, 1),
                                  f'zeroing {ns.name}')
            try:
                if controller_side:
                    self._write_zeroes(ns, progress)
                else:
                    blockio.zero_fill(ns.path, cancel=self.job.cancelled,
                                      progress=progress)
            except blockio.Cancelled:
                self.job.check()
            except OSError as err:
                raise exception.ZeroingFailed(device=self.device,
                                              reason=f'{ns.path}: {err.strerror or err}')
            except exception.NvmeCommandFailed as err:
                raise exception.ZeroingFailed(device=self.device, reason=str(err))
            done += sizes[ns.nsid]
        self.record['bytes_zeroed'] = done
        self.verify(marks, expect_zero=True)

    def _write_zeroes(self, ns, progress):
        info = self.cli.id_ns(self.ctrl.char_path, ns.nsid)
        step = nvme_cli.BLOCKS_PER_WRITE_ZEROES
        start = 0
        while start < info.nsze:
            self.job.check()
            count = min(step, info.nsze - start)
            self.cli.write_zeroes(ns.path, ns.nsid, start, count)
            start += count
            progress(start / info.nsze)

    def consolidate(self):
        """More than one namespace (and OACS bit 3): delete all, create one covering
        the whole capacity, attach it, rescan."""
        if not self.identity.ns_mgmt:
            return
        dev = self.ctrl.char_path
        try:
            nsids = self.cli.list_ns(dev, allocated=True)
        except exception.NvmeCommandFailed:
            nsids = self.cli.list_ns(dev)
        if len(nsids) <= 1:
            return
        self.job.progress('namespaces', detail=f'consolidating namespaces {nsids}')
        try:
            infos = [self.cli.id_ns(dev, n) for n in nsids]
            capacity = self.identity.tnvmcap or sum(i.size_bytes for i in infos)
            fmt = infos[0]
            for n in nsids:
                self.job.check()
                self.cli.delete_ns(dev, n)
            blocks = capacity // fmt.lba_size
            new = self.cli.create_ns(dev, blocks, fmt.flbas & 0x6f)
            self.cli.attach_ns(dev, new, self.identity.cntlid)
            self.cli.ns_rescan(dev)
        except exception.NvmeCommandFailed as err:
            raise exception.NamespaceLayoutFailed(device=self.device, reason=str(err))
        self.record['namespaces_consolidated'] = {'deleted': nsids, 'created': new}
        deadline = time.monotonic() + NAMESPACE_APPEAR_SECONDS
        while not any(ns.nsid == new and os.path.exists(ns.path)
                      for ns in self.ctrl.namespaces()):
            self.job.check()
            if time.monotonic() > deadline:
                raise exception.NamespaceLayoutFailed(
                    device=self.device, reason=f'namespace {new} was created but its '
                    f'block device did not appear within {NAMESPACE_APPEAR_SECONDS} s')
            time.sleep(0.1)


def read_interrupted(cli, ctrl):
    """What the sanitize log says of a controller whose cleanup was cut short
    (agent crash), e.g. "sanitize still in progress 43 %"."""
    try:
        return cli.sanitize_log(ctrl.char_path).describe()
    except exception.NvmeCliMissing:
        return 'sanitize log unreadable: nvme-cli missing'
    except exception.NvmeCommandFailed as err:
        return f'sanitize log unreadable: {err}'
