"""The agent's privileged work, in oslo.privsep daemons (doc/privileges.md).

One context per capability set; each runs in its own daemon process and exports
only the entrypoints of its module:

* ``nvme_admin`` (steward/privsep/nvme.py): nvme-cli, whose admin passthrough the
  kernel allows only with CAP_SYS_ADMIN; CAP_DAC_OVERRIDE opens the root-owned
  controller nodes when the daemon is not uid 0 (systemd ``User=``).
* ``block_io`` (steward/privsep/blockdev.py): watermarks, zeroing and read-back on
  the namespaces' block devices, CAP_DAC_OVERRIDE alone.

The unprivileged side passes narrow arguments (a node name under ``dev_root``, an
nvme-cli command from an allow-list with integer options); the binary, the
directories and everything else come from the daemon's own configuration.

How a daemon starts (``Context.start``): forked from the agent when the agent holds
the context's capabilities (started as root, or with them as ambient capabilities),
else through ``[privsep_<context>] helper_command`` (``sudo privsep-helper``, the
oslo.privsep default). A forked daemon keeps exactly its capabilities, in its
bounding set too and as ambient ones for the programs it runs, and dies with the
agent (its channel closes; PR_SET_PDEATHSIG as well when the main thread forked it).
"""
import ctypes
import os
import signal
import socket
import sys
import threading

from oslo_config import cfg
from oslo_privsep import capabilities as caps
from oslo_privsep import comm
from oslo_privsep import daemon
from oslo_privsep import priv_context

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE = 47, 2
# The daemons' work is I/O (nvme-cli runs, zeroing pieces): one thread per
# parallel cleanup, not per core.
THREAD_POOL_SIZE = 32

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option, arg2=0, arg3=0):
    if _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(arg3),
                   ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f'prctl({option}): {os.strerror(err)}')


def _last_cap():
    try:
        with open('/proc/sys/kernel/cap_last_cap') as f:
            return int(f.read())
    except (OSError, ValueError):
        return max(caps.CAPS_BYVALUE)


def effective_caps():
    return set(caps.get_caps()[0])


class _Daemon(daemon.Daemon):
    """oslo.privsep's daemon, with the capabilities fenced in for good: the
    bounding set shrinks to the declared ones (so nothing it executes as uid 0
    regains more) and they become ambient (so nvme-cli run by a non-root daemon
    gets them)."""

    def __init__(self, channel, context, pdeathsig):
        super().__init__(channel, context)
        self.pdeathsig = pdeathsig
        # SIGHUP reloads the agent and keeps its daemons: one sent to the agent's
        # whole process group (kill -HUP -PGID, a closed terminal) must not end
        # them by its default action either.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def _drop_privs(self):
        if caps.CAPS_BYNAME['CAP_SETPCAP'] in effective_caps():
            for cap in range(_last_cap() + 1):
                if cap not in self.caps:
                    _prctl(PR_CAPBSET_DROP, cap)
        super()._drop_privs()
        caps.drop_all_caps_except(self.caps, self.caps, self.caps)
        for cap in self.caps:
            _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap)
        # What it runs may keep these, never gain more (set-uid, file capabilities).
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        # After the credential changes, which clear it.
        if self.pdeathsig is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != self.pdeathsig:
                os._exit(0)


class _ForkingChannel(daemon._ClientChannel):
    """oslo.privsep's ForkingClientChannel, starting _Daemon and remembering the
    child so stop() reaps it."""

    def __init__(self, context):
        sock_a, sock_b = socket.socketpair()
        for s in (sock_a, sock_b):
            s.setblocking(True)
            daemon.set_cloexec(s)
        for f in (sys.stdout, sys.stderr):
            f.flush()
        # PR_SET_PDEATHSIG fires when the forking *thread* ends: only the main
        # thread lives as long as the agent.
        main = threading.current_thread() is threading.main_thread()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                sock_a.close()
                # Other daemons' channels must not be kept open by this one, or
                # they would not see the agent go.
                for other in CONTEXTS.values():
                    if isinstance(other.channel, _ForkingChannel):
                        other.channel.sock.close()
                channel = comm.ServerChannel(sock_b)
                daemon.replace_logging(
                    daemon.PrivsepLogHandler(channel, processName=str(context)))
                _Daemon(channel, context, parent if main else None).run()
                status = 0
            finally:
                os._exit(status)
        sock_b.close()
        self.sock, self.pid = sock_a, pid
        super().__init__(sock_a, context)

    def close(self):
        super().close()
        self.sock.close()
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


class Context(priv_context.PrivContext):
    def __init__(self, name, capabilities):
        self.name = name
        super().__init__('steward.privsep', cfg_section=f'privsep_{name}',
                         pypath=f'steward.privsep.{name}',
                         capabilities=[caps.CAPS_BYNAME[c] for c in capabilities])
        cfg.CONF.set_default('thread_pool_size', THREAD_POOL_SIZE,
                             group=f'privsep_{name}')

    def helper_command(self, sockpath):
        """oslo.privsep's default (``sudo privsep-helper --config-file ...``) with
        steward's helper, whose daemon fences its capabilities in."""
        cmd = super().helper_command(sockpath)
        if not self.conf.helper_command:
            cmd[cmd.index('privsep-helper')] = 'steward-privsep-helper'
        return cmd

    @property
    def capabilities(self):
        return set(self.conf.capabilities)

    def can_fork(self):
        return self.capabilities <= effective_caps()

    def start(self, method=None):
        """Fork the daemon when this process has what it needs, else run
        ``helper_command``. Called on the first entrypoint call if nobody did."""
        if method is None:
            method = (priv_context.Method.FORK if self.can_fork()
                      else priv_context.Method.ROOTWRAP)
        if method is not priv_context.Method.FORK:
            return super().start(method)
        with self.start_lock:
            if self.channel is None:
                self.channel = _ForkingChannel(self)

    @property
    def pid(self):
        """The forked daemon's pid, None when not forked by this process."""
        return getattr(self.channel, 'pid', None)


nvme_admin = Context('nvme_admin', ['CAP_SYS_ADMIN', 'CAP_DAC_OVERRIDE'])
block_io = Context('block_io', ['CAP_DAC_OVERRIDE'])
CONTEXTS = {c.name: c for c in (nvme_admin, block_io)}


def stop_all():
    """Close every daemon's channel (it exits) and reap the forked ones."""
    for ctx in CONTEXTS.values():
        ctx.stop()
