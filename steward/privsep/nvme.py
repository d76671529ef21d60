"""nvme-cli in the ``nvme_admin`` daemon (CAP_SYS_ADMIN: the admin passthrough).

The caller names a command of COMMANDS, a node and integer options; the daemon
builds the argv, runs the binary of its own ``[nvme] nvme_cli`` and hands back
what it printed. The environment is the daemon's own (inherited when it started).
"""
import subprocess

from oslo_config import cfg

from steward import privsep
from steward.privsep import paths

U32, U64 = 0xffffffff, 2 ** 64 - 1


def _opt(opts, name, low, high):
    return str(paths.integer('nvme', name, opts.get(name), low, high))


def _nsid(opts):
    return ['-n', _opt(opts, 'nsid', 1, U32)]


def _sanact(opts):
    sanact = paths.integer('nvme', 'sanact', opts.get('sanact'), 1, 4)
    if sanact == 3:
        # Overwrite: no cleanup action issues it (and it wears the drive out).
        raise paths.refuse('nvme', 'sanact 3 (overwrite) is not allowed')
    return ['-a', str(sanact)]


def _ses(opts):
    ses = paths.integer('nvme', 'ses', opts.get('ses'), 0, 7)
    if ses not in (1, 2):
        # SES 0 erases nothing (the FOG and scout regressions): never a cleanup.
        raise paths.refuse('nvme', f'ses {ses} is not allowed: 1 (user data erase) or '
                                   f'2 (cryptographic erase)')
    return [f'--ses={ses}']


def _format(opts):
    # -l always: for NSID FFFFFFFFh nvme-cli 2.3 reads no namespace and would send
    # LBA format 0, reformatting a 4 KiB namespace to 512 B.
    return _nsid(opts) + ['-l', _opt(opts, 'lbaf', 0, 63)] + _ses(opts) + [
        '-t', _opt(opts, 'timeout_ms', 1000, 3600 * 1000), '--force']


# command -> (options accepted, argv after ``nvme <command> <node>``)
COMMANDS = {
    'id-ctrl': ((), lambda o: ['-o', 'json']),
    'id-ns': (('nsid',), lambda o: _nsid(o) + ['-o', 'json']),
    'list-ns': (('allocated',), lambda o: ['-o', 'json'] + (
        ['-a'] if paths.integer('nvme', 'allocated', o.get('allocated', 0), 0, 1)
        else [])),
    'sanitize-log': ((), lambda o: ['-o', 'json']),
    # SMART / Health Information (Get Log Page 02h), controller-wide (issue 38).
    'smart-log': ((), lambda o: ['-o', 'json']),
    'sanitize': (('sanact',), lambda o: _sanact(o)),
    'write-zeroes': (('nsid', 'start_block', 'blocks'), lambda o: _nsid(o) + [
        '-s', _opt(o, 'start_block', 0, U64),
        # NLB is zero-based.
        '-c', str(int(_opt(o, 'blocks', 1, 65536)) - 1)]),
    'create-ns': (('blocks', 'flbas'), lambda o: [
        '-s', _opt(o, 'blocks', 1, U64), '-c', _opt(o, 'blocks', 1, U64),
        '-f', _opt(o, 'flbas', 0, 0x7f)]),
    'attach-ns': (('nsid', 'cntlid'), lambda o: _nsid(o) + ['-c', _opt(o, 'cntlid', 0,
                                                                          0xffff)]),
    'detach-ns': (('nsid', 'cntlid'), lambda o: _nsid(o) + ['-c', _opt(o, 'cntlid', 0,
                                                                          0xffff)]),
    'delete-ns': (('nsid',), lambda o: _nsid(o)),
    'ns-rescan': ((), lambda o: []),
    'format': (('nsid', 'lbaf', 'ses', 'timeout_ms'), _format),
}


def argv(binary, command, device, options):
    """The argv for a call, or PrivsepRefused: the whole of what is checked."""
    if binary != cfg.CONF.nvme.nvme_cli:
        raise paths.refuse('nvme', f'binary {binary!r} is not [nvme] nvme_cli '
                                   f'({cfg.CONF.nvme.nvme_cli!r})')
    if command == 'version':
        if device is not None or options:
            raise paths.refuse('nvme', 'version takes no device or options')
        return [binary, 'version']
    if command not in COMMANDS:
        raise paths.refuse('nvme', f'command {command!r} is not one of '
                                   f'{", ".join(sorted(COMMANDS))}')
    accepted, build = COMMANDS[command]
    if not isinstance(options, dict) or set(options) - set(accepted):
        raise paths.refuse('nvme', f'{command} takes only {", ".join(accepted) or "no"} '
                                   f'option(s), not {options!r}')
    return [binary, command, paths.nvme_node('nvme', device), *build(options)]


@privsep.nvme_admin.entrypoint
def run(binary, command, device=None, options=None, timeout=60):
    """{'rc', 'stdout', 'stderr'}, or {'missing': True} / {'timeout': True}."""
    args = argv(binary, command, device, options or {})
    timeout = paths.integer('nvme', 'timeout', timeout, 1, 3600)
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (FileNotFoundError, PermissionError):
        return {'missing': True}
    except subprocess.TimeoutExpired:
        return {'timeout': True}
    return {'rc': proc.returncode, 'stdout': proc.stdout, 'stderr': proc.stderr}
