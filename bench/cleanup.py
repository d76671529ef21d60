"""NVMe cleanup speed: host-side zeroing against dd, and parallel sanitizes.

1. Host-side zeroing (the "shred" action, steward/privsep/blockio.zero_fill) of a
   2 GiB backing file, as a ratio to ``dd if=/dev/zero of=FILE bs=1M count=2048
   oflag=direct`` on the same file (target >= 0.9). That dd command truncates the
   file first and so re-allocates it; ``conv=notrunc`` (an in-place overwrite, what
   zero_fill does) is printed too. Runs alternate; medians are reported.
2. Wall time of 8 sanitizes run in parallel by the nvme driver on 8 simulated
   controllers (tests/nvme_sim, the real nvme-cli), next to one alone.
3. Big drives: Steward's own cost per GiB of each cleanup path, and the time a 4 TB
   namespace would take. The simulated controller erases instantly (a hole punch),
   so what is timed is everything Steward does around the media: processes, ioctls,
   layout, watermarks, read-back. The projection adds what the media itself needs
   where this machine can measure it (host-side zeroing runs at the speed part 1
   measured on this disk); a drive's own Write Zeroes or sanitize time is its own
   and is printed as such. The old write_zeroes path (one ``nvme write-zeroes`` per
   65 536 blocks) is timed for comparison.
4. ``--preset NAME`` (repeatable, or ``all``; then only this part runs): one
   simulated controller per family of tests/nvme_sim/presets.py, cleaned by the
   driver on the path its Identify data allows (auto/auto policy; and clear_action=zero
   on the Write Zeroes family, the one path no family takes under auto/auto). Steward's
   cost per GiB is the difference between a ``--preset-gib`` namespace and a 64 MiB
   one, minus the simulated sanitize or Format NVM time; the media's own time is the
   drive's.

    .venv/bin/python bench/cleanup.py [--size-mib 2048] [--runs 5] [--dir DIR]
                                      [--controllers 8] [--sanitize-seconds 2]
                                      [--big-gib 16]
    .venv/bin/python bench/cleanup.py --preset all [--preset-gib 2]
"""
import argparse
import concurrent.futures
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from steward.privsep import blockio  # noqa: E402

MiB = 2 ** 20


def _prepare(path, size):
    """A fully allocated file of ``size`` bytes, flushed, as a disk would be."""
    with open(path, 'wb') as f:
        os.posix_fallocate(f.fileno(), 0, size)
        f.flush()
        os.fsync(f.fileno())


def _dd(path, size_mib, notrunc):
    cmd = ['dd', 'if=/dev/zero', f'of={path}', 'bs=1M', f'count={size_mib}',
           'oflag=direct'] + (['conv=notrunc'] if notrunc else [])
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def _steward(path):
    t0 = time.perf_counter()
    blockio.zero_fill(path)
    return time.perf_counter() - t0


def bench_zeroing(directory, size_mib, runs):
    size = size_mib * MiB
    path = os.path.join(directory, 'backing.img')
    times = {'dd': [], 'dd conv=notrunc': [], 'steward': []}
    try:
        for _ in range(runs):
            for name, run in (('dd', lambda: _dd(path, size_mib, False)),
                              ('dd conv=notrunc', lambda: _dd(path, size_mib, True)),
                              ('steward', lambda: _steward(path))):
                _prepare(path, size)
                times[name].append(run())
        with open(path, 'rb') as f:              # what was measured did its job
            f.seek(size - MiB)
            assert f.read() == bytes(MiB)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    med = {k: statistics.median(v) for k, v in times.items()}
    mbps = {k: size / MiB / v for k, v in med.items()}
    print(f'Host-side zeroing of a {size_mib} MiB file ({runs} runs, median):')
    for name in times:
        print(f'  {name:<16} {med[name]:6.2f} s  {mbps[name]:7.0f} MiB/s')
    print(f'  ratio steward / dd (bs=1M oflag=direct):             '
          f'{mbps["steward"] / mbps["dd"]:.2f}  (target >= 0.9)')
    print(f'  ratio steward / dd conv=notrunc (same in-place work): '
          f'{mbps["steward"] / mbps["dd conv=notrunc"]:.2f}')
    return mbps


def _nvme_driver(sim, spec='{"vendor_id": "8086"}'):
    """The production nvme driver pointed at the simulation's sysfs, /dev and nvme-cli."""
    from steward.conf import CONF
    from steward.drivers.nvme import driver as nvme
    for name, value, group in (('sysfs_root', sim.sysfs_root, None),
                               ('dev_root', sim.dev_root, None),
                               ('nvme_cli', sim.nvme_cli, 'nvme'),
                               ('device_spec', [spec], 'nvme')):
        CONF.set_override(name, value, group=group)
    # The privsep daemons (steward/privsep) keep the configuration and environment
    # of their start: new ones for each simulation.
    from steward import privsep
    privsep.stop_all()
    driver = nvme.NvmeDriver(CONF, 'bench-host')
    driver.init_host()
    return driver


def bench_sanitizes(directory, count, seconds, namespace_mib):
    from oslo_config import cfg
    from steward.conf import CONF
    from steward.drivers import cleanup_job
    from tests.nvme_sim import Simulation

    CONF([], project='steward', default_config_files=[])
    sim = Simulation(os.path.join(directory, 'sim'))
    try:
        os.environ.update(sim.env)
        for i in range(count):
            sim.add_controller(address=f'0000:{0x10 + i:02x}:00.0',
                               namespaces=[namespace_mib * MiB], sanitize_seconds=seconds)
        driver = _nvme_driver(sim)
        devices = [{'uuid': f'bench-{i}', 'std_board_info': d.std_board_info}
                   for i, d in enumerate(driver.discover())]
        assert len(devices) == count, devices

        def clean(dev):
            job = cleanup_job.CleanupJob(dev['uuid'])
            driver.cleanup(dev, job)
            return job.record

        t0 = time.perf_counter()
        one = clean(devices[0])
        alone = time.perf_counter() - t0
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
            records = list(pool.map(clean, devices))
        wall = time.perf_counter() - t0
        assert all(r['verification'] == 'passed' for r in records + [one]), records
    finally:
        sim.close()
        for name, group in (('sysfs_root', None), ('dev_root', None),
                            ('nvme_cli', 'nvme'), ('device_spec', 'nvme')):
            cfg.CONF.clear_override(name, group=group)
    print(f'{count} simulated sanitizes in parallel ({seconds} s each on the controller, '
          f'{namespace_mib} MiB namespace, watermarks + verification included):')
    print(f'  one alone {alone:.2f} s; {count} in parallel {wall:.2f} s wall '
          f'({wall / alone:.2f}x one)')
    return alone, wall


TB4 = 4 * 10 ** 12
GiB = 2 ** 30


def _sim_driver(directory, spec='{"vendor_id": "8086"}', **controller):
    """A simulated controller, discovered by the nvme driver, as a device dict."""
    from tests.nvme_sim import Simulation

    sim = Simulation(directory)
    os.environ.update(sim.env)
    ctrl = sim.add_controller(**controller)
    driver = _nvme_driver(sim, spec)
    [dev] = driver.discover()
    return sim, ctrl, driver, {'uuid': 'bench', 'std_board_info': dev.std_board_info}


def _timed_cleanup(driver, device):
    from steward.drivers import cleanup_job
    job = cleanup_job.CleanupJob(device['uuid'])
    t0 = time.perf_counter()
    driver.cleanup(device, job)
    elapsed = time.perf_counter() - t0
    assert job.record['verification'] == 'passed', job.record
    return elapsed, job.record


def bench_big_drives(directory, big_gib, host_mib_per_s):
    from steward.drivers.nvme import cli as nvme_cli
    size = big_gib * GiB
    rows = []
    # write_zeroes: BLKZEROOUT in pieces (blockio.zeroout_chunks), one namespace.
    sim, ctrl, driver, dev = _sim_driver(os.path.join(directory, 'wz'), namespaces=[size],
                                         ces=False, bes=False, wzs=True, format_nvm=False)
    try:
        elapsed, rec = _timed_cleanup(driver, dev)
        pieces = len(blockio.zeroout_chunks(size))
        # Fixed part (layout, watermarks, read-back) measured on a one-piece namespace.
        zero = [c for c in ctrl.commands() if c.get('name') == 'blkzeroout']
        assert len(zero) == pieces, (len(zero), pieces)
    finally:
        sim.close()
    sim, ctrl, driver, dev = _sim_driver(os.path.join(directory, 'wz1'),
                                         namespaces=[64 * MiB], ces=False, bes=False,
                                         format_nvm=False)
    try:
        fixed, _ = _timed_cleanup(driver, dev)
    finally:
        sim.close()
    per_piece = max(elapsed - fixed, 0.0) / pieces
    pieces_4tb = len(blockio.zeroout_chunks(TB4))
    rows.append(('write_zeroes (BLKZEROOUT)', elapsed, max(elapsed - fixed, 0.0) / big_gib,
                 fixed + pieces_4tb * per_piece, "+ the drive's own Write Zeroes time"))
    # The old path: one nvme-cli process per 65536 blocks (512-byte LBAs: 32 MiB).
    sim, ctrl, driver, dev = _sim_driver(os.path.join(directory, 'old'),
                                         namespaces=[256 * MiB], ces=False, bes=False,
                                         ns_mgmt=False, format_nvm=False)
    try:
        cli = nvme_cli.NvmeCli(sim.nvme_cli)
        node = ctrl.namespace_paths()[0]
        commands = 256 * MiB // 512 // nvme_cli.BLOCKS_PER_WRITE_ZEROES
        t0 = time.perf_counter()
        for i in range(commands):
            cli.write_zeroes(node, 1, i * nvme_cli.BLOCKS_PER_WRITE_ZEROES,
                             nvme_cli.BLOCKS_PER_WRITE_ZEROES)
        per_cmd = (time.perf_counter() - t0) / commands
    finally:
        sim.close()
    cmds_4tb = TB4 // 512 // nvme_cli.BLOCKS_PER_WRITE_ZEROES
    per_gib = per_cmd * GiB / (512 * nvme_cli.BLOCKS_PER_WRITE_ZEROES)
    rows.append(('old: nvme write-zeroes x 64K blocks', fixed + per_gib * big_gib,
                 per_gib, fixed + cmds_4tb * per_cmd,
                 "+ the drive's own Write Zeroes time"))
    # shred: host-side zeroing; the media time is this disk's measured speed.
    shred_4tb = TB4 / MiB / host_mib_per_s
    rows.append(('shred (host O_DIRECT zeroes)', None, 1024 / host_mib_per_s,
                 fixed + shred_4tb, f'at {host_mib_per_s:.0f} MiB/s (part 1, this disk)'))
    # sanitize: one command and polling whatever the size.
    sim, ctrl, driver, dev = _sim_driver(os.path.join(directory, 'san'), namespaces=[size],
                                         ces=False, sanitize_seconds=0.2)
    try:
        san, _ = _timed_cleanup(driver, dev)
    finally:
        sim.close()
    rows.append(('sanitize (crypto or block)', san, max(san - 0.2 - fixed, 0) / big_gib,
                 san - 0.2,
                 "+ the drive's own sanitize time (ETCE/ETBE)"))
    print(f'Big drives: Steward\'s own cost per GiB beyond its fixed {fixed:.2f} s '
          f'(layout, watermarks, read-back), and a 4 TB namespace '
          f'(timed on a {big_gib} GiB simulated namespace):')
    print(f'  {"path":<38} {"timed":>8} {"per GiB":>10} {"4 TB projected":>16}')
    for name, timed, per_gib, projected, note in rows:
        timed_s = f'{timed:7.2f}s' if timed is not None else '       -'
        print(f'  {name:<38} {timed_s} {per_gib * 1000:8.2f}ms {projected:14.1f} s  {note}')
    return rows


def bench_presets(directory, names, size_gib, sanitize_seconds=0.2):
    from steward.drivers.nvme import policy as nvme_policy

    # auto/auto on every family; and Write Zeroes where the operator forbids Format
    # (clear_action=zero), since no family reaches it under auto/auto any more.
    entries = [(name, 'auto') for name in names] + [
        (name, 'zero') for name in names if name == 'write_zeroes_dealloc']
    rows = []
    for name, policy in entries:
        spec = '{"vendor_id": "8086"%s}' % (
            ', "clear_action": "zero"' if policy == 'zero' else '')
        times, sizes = {}, {}
        for label in ('small', 'big'):
            # host-zeroed paths really write the namespace: at most 2 GiB of disk
            sizes[label] = 64 * MiB if label == 'small' else \
                (min(size_gib, 2) if rec['action'] == 'shred' else size_gib) * GiB  # noqa: F821 - the small run's
            size = sizes[label]
            sim, ctrl, driver, dev = _sim_driver(
                os.path.join(directory, f'{name}-{policy}-{label}'), spec=spec,
                preset=name, namespaces=[size], sanitize_seconds=sanitize_seconds)
            try:
                elapsed, rec = _timed_cleanup(driver, dev)
                commands = ctrl.commands()
                refused = [c for c in commands
                           if c['queue'] in ('admin', 'io') and c['status']]
                assert refused == [], refused
            finally:
                sim.close()
            # The controller's own sanitize time (the simulator paces it and, for a
            # crypto erase, really writes random bytes over the media) is the
            # drive's, not Steward's: from the Sanitize command to the last poll of
            # the log that saw it end.
            started = [c['t'] for c in commands if c['queue'] == 'admin'
                       and c['opcode'] == 0x84]
            polls = [c['t'] for c in commands if c['queue'] == 'admin'
                     and c['opcode'] == 0x02 and c['cdw10'] & 0xff == 0x81]
            media = (max(polls) - started[-1]) / 1000 if started else 0.0
            # A Format NVM's erase is the drive's too (the simulator zeroes or, for a
            # crypto erase, writes random bytes over the namespace): the command is
            # logged when it completes; the one before it (nvme-cli's Identify) when
            # it was about to be sent.
            for i, c in enumerate(commands):
                if c['queue'] == 'admin' and c['opcode'] == 0x80 and i:
                    media += (c['t'] - commands[i - 1]['t']) / 1000
            times[label] = elapsed - media
        action = rec['action']
        per_gib = max(times['big'] - times['small'], 0.0) / \
            ((sizes['big'] - sizes['small']) / GiB)
        rows.append((name, policy, action, nvme_policy.ASSURANCE[action], times["small"],
                     per_gib, sizes['big'] // GiB))
    print('Cleanup per controller family (tests/nvme_sim/presets.py) and clear_action; '
          'Steward\'s own time (a sanitize\'s or a Format NVM\'s run on the controller '
          'excluded), per GiB from the difference between a big namespace and a 64 MiB '
          'one:')
    print(f'  {"preset":<23} {"policy":<6} {"path":<16} {"assurance":<22} {"fixed":>7} '
          f'{"per GiB":>10} {"big":>7}')
    for name, policy, action, assurance, fixed, per_gib, big in rows:
        print(f'  {name:<23} {policy:<6} {action:<16} {assurance:<22} {fixed:6.2f}s '
              f'{per_gib * 1000:8.2f}ms {big:5d}GiB')
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--size-mib', type=int, default=2048)
    p.add_argument('--runs', type=int, default=5)
    p.add_argument('--dir', default=None, help='where the backing file goes '
                   '(a disk, not tmpfs; default: a temporary directory under /var/tmp)')
    p.add_argument('--controllers', type=int, default=8)
    p.add_argument('--sanitize-seconds', type=float, default=2.0)
    p.add_argument('--namespace-mib', type=int, default=64)
    p.add_argument('--big-gib', type=int, default=16,
                   help='size of the simulated namespace timed in part 3 (sparse)')
    p.add_argument('--preset', action='append', default=[],
                   help='a tests/nvme_sim/presets.py family (repeatable), or "all": '
                        'only the per-family part runs')
    p.add_argument('--preset-gib', type=int, default=16,
                   help='big namespace of the per-family runs (GiB, sparse; a '
                        'host-zeroed family writes it all, so it gets at most 2)')
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix='steward-bench-cleanup-',
                                     dir=args.dir or '/var/tmp') as tmp:
        if args.preset:
            from oslo_config import cfg
            from steward.conf import CONF
            from tests.nvme_sim import presets
            names = presets.NAMES if 'all' in args.preset else args.preset
            unknown = set(names) - set(presets.NAMES)
            if unknown:
                p.error(f'unknown preset(s) {sorted(unknown)}; known: '
                        f'{", ".join(presets.NAMES)}, all')
            CONF([], project='steward', default_config_files=[])
            try:
                bench_presets(tmp, names, args.preset_gib)
            finally:
                for name, group in (('sysfs_root', None), ('dev_root', None),
                                    ('nvme_cli', 'nvme'), ('device_spec', 'nvme')):
                    cfg.CONF.clear_override(name, group=group)
            return
        mbps = bench_zeroing(tmp, args.size_mib, args.runs)
        bench_sanitizes(tmp, args.controllers, args.sanitize_seconds, args.namespace_mib)
        bench_big_drives(tmp, args.big_gib, mbps['steward'])


if __name__ == '__main__':
    main()
