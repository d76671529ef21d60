"""Child processes die with their parent (Linux PR_SET_PDEATHSIG), whatever kills
the parent: SIGKILL included, which no handler of the parent can turn into a stop
of its children. A child that outlives its parent keeps its port and the next
start of the service fails."""
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def _resolve_prctl():
    if not sys.platform.startswith('linux'):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Resolved at import, in the parent: a dlopen in the forked child of a threaded
# parent can deadlock on a loader lock another thread held at fork time.
_PRCTL = _resolve_prctl()


def die_with_parent(parent_pid, sig=signal.SIGTERM):
    """In the child: get ``sig`` when the parent exits; exit at once if it already
    has (it died before the prctl took effect). The signal follows the parent
    *thread* that forked: fork from a thread that lives as long as the process."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def preexec_die_with_parent(sig=signal.SIGTERM):
    """``preexec_fn`` for subprocess.Popen: die_with_parent of the caller."""
    parent = os.getpid()
    return lambda: die_with_parent(parent, sig)
