"""The agent's privileges: start the privsep daemons its drivers need, then give
up its own (doc/privileges.md).

Called from the main thread of ``steward agent`` and ``steward serve`` right after
the configuration is read, before any other thread exists: a daemon forked there
inherits the environment and configuration of that moment, and is killed by the
kernel if the agent dies (PR_SET_PDEATHSIG follows the forking thread).
"""
import ctypes
import grp
import logging
import os
import pwd

from oslo_privsep import capabilities as caps

from steward.agent import drivers as driver_loader
from steward.common import exception
from steward import privsep

LOG = logging.getLogger(__name__)

PR_SET_NO_NEW_PRIVS = 38
# Which privsep contexts each driver's work needs. The others (fake, pci, mdev,
# nvidia_gpu) only read sysfs: they need none.
DRIVER_CONTEXTS = {'nvme': ('nvme_admin', 'block_io')}


def contexts_for(enabled_drivers):
    names = []
    for raw in enabled_drivers:
        for name in DRIVER_CONTEXTS.get(driver_loader.ALIASES.get(raw, raw), ()):
            if name not in names:
                names.append(name)
    return [privsep.CONTEXTS[n] for n in names]


def _ids(user, group):
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except (KeyError, ValueError):
        raise exception.InvalidConfiguration(
            reason=f'[agent] run_as_user: no user {user!r} on this host')
    gid = entry.pw_gid
    if group:
        try:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
        except KeyError:
            raise exception.InvalidConfiguration(
                reason=f'[agent] run_as_group: no group {group!r} on this host')
    return entry.pw_uid, gid


def _no_capabilities_left():
    """Give up every capability (ambient ones too) and the means to get one back
    by executing a set-uid or file-capability binary."""
    caps.drop_all_caps_except([], [], [])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f'PR_SET_NO_NEW_PRIVS: {os.strerror(err)}')
    left = caps.get_caps()
    if any(left):
        raise exception.InvalidConfiguration(
            reason=f'the agent still holds capabilities {left} after dropping them')


def switch_user(user, group=None):
    uid, gid = _ids(user, group)
    if os.geteuid() != 0 and os.getuid() != uid:
        raise exception.InvalidConfiguration(
            reason=f'[agent] run_as_user = {user!r} needs the agent started as root '
                   f'(it runs as uid {os.getuid()})')
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)      # root -> uid: the kernel clears every capability
    if not os.access('.', os.R_OK | os.X_OK):
        # Started by root from a directory the new user may not enter (a 0700
        # checkout, /root): every relative stat then fails with EACCES instead of
        # ENOENT, which stevedore's entry-point cache does not survive.
        LOG.info('working directory %s is closed to uid %d; moving to /', os.getcwd(),
                 uid)
        os.chdir('/')
    _no_capabilities_left()


def start(conf, service='agent'):
    """Start the daemons of ``conf.agent.enabled_drivers``: forked when this
    process has their capabilities, else through their ``helper_command`` (sudo).
    Then: switch to ``[agent] run_as_user`` if set; for ``steward agent`` without
    it, drop the capabilities a non-root agent was given (systemd's ambient set),
    which only the daemons need. ``steward serve`` keeps its user otherwise.
    Returns the contexts started."""
    contexts = contexts_for(conf.agent.enabled_drivers)
    for ctx in contexts:
        ctx.start()
        how = f'daemon pid {ctx.pid} forked' if ctx.pid else 'started by helper_command'
        LOG.info('privsep %s: %s, capabilities %s', ctx.name, how,
                 ', '.join(sorted(caps.CAPS_BYVALUE[c] for c in ctx.capabilities)))
    user = (conf.agent.run_as_user or '').strip()
    if user:
        switch_user(user, (conf.agent.run_as_group or '').strip() or None)
        LOG.info('%s now runs as uid %d gid %d without capabilities', service,
                 os.getuid(), os.getgid())
    elif service == 'agent' and os.geteuid() != 0 and any(caps.get_caps()):
        _no_capabilities_left()
        LOG.info('agent dropped its own capabilities; the privsep daemons keep theirs')
    elif service == 'agent' and os.geteuid() == 0:
        LOG.warning('the agent runs as root: set [agent] run_as_user (e.g. steward) so '
                    'that only its privsep daemons keep privileges (doc/privileges.md)')
    return contexts
