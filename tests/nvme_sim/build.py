"""Compile shim.c into the LD_PRELOAD object and the nvme-sim command, cached.

The cache key is the hash of the preprocessed source (shim.c with every header it
includes expanded), the flags and the compiler version, so an edit to shim.c or an
upgrade of libnvme-dev rebuilds and nothing else does. Artifacts are written under a
temporary name and renamed into place, so parallel test workers never load a half-written
object.
"""
import dataclasses
import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name('shim.c')
# Paths are bounded by Simulation (MAX_ROOT_LEN), so snprintf cannot truncate them.
CFLAGS = ['-O2', '-Wall', '-Wextra', '-Wno-format-truncation']
SHIM_FLAGS = ['-shared', '-fPIC']
SHIM_LIBS = ['-ldl']
TOOL_FLAGS = ['-DNVME_SIM_TOOL', '-Wno-unused-function']
SHIM_NAME = 'nvme-sim-shim.so'
TOOL_NAME = 'nvme-sim'


class BuildError(RuntimeError):
    """The simulator cannot be built on this host; the message says what to install."""


@dataclasses.dataclass(frozen=True)
class Artifacts:
    shim: Path          # the LD_PRELOAD object
    tool: Path          # nvme-sim rescan|resume CONTROLLER
    compiler_output: str    # warnings of a fresh build; '' when taken from the cache


def default_cache_dir():
    if os.environ.get('NVME_SIM_CACHE'):
        return Path(os.environ['NVME_SIM_CACHE'])
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return Path(base) / 'steward' / 'nvme-sim'


def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise BuildError(f'cannot run {cmd[0]}: {e}') from None


def _explain(stderr):
    if 'nvme/' in stderr and 'No such file' in stderr:
        return ('the libnvme headers (nvme/types.h, nvme/ioctl.h) are missing; install '
                'them (Debian: apt-get install libnvme-dev)\n' + stderr)
    return stderr


def _key(gcc):
    pre = _run([gcc, '-E', *CFLAGS, str(SOURCE)])
    if pre.returncode:
        raise BuildError(f'preprocessing {SOURCE} failed: {_explain(pre.stderr)}')
    version = _run([gcc, '--version']).stdout.splitlines()[:1]
    h = hashlib.sha256()
    for part in (pre.stdout, ' '.join(CFLAGS + SHIM_FLAGS + SHIM_LIBS + TOOL_FLAGS), *version):
        h.update(part.encode())
        h.update(b'\0')
    return h.hexdigest()[:20]


def _compile(gcc, out, extra, libs):
    tmp = out.with_name(f'.{out.name}.{os.getpid()}.tmp')
    result = _run([gcc, *CFLAGS, *extra, '-o', str(tmp), str(SOURCE), *libs])
    if result.returncode:
        tmp.unlink(missing_ok=True)
        raise BuildError(f'compiling {SOURCE} failed: {_explain(result.stderr)}')
    os.replace(tmp, out)
    return result.stderr


@functools.lru_cache(maxsize=None)
def build(cache_dir=None):
    """The shim and tool for the current shim.c, compiled on first use."""
    gcc = shutil.which(os.environ.get('CC') or 'gcc')
    if gcc is None:
        raise BuildError('gcc not found on PATH; the NVMe simulator is compiled from C '
                         '(Debian: apt-get install gcc libnvme-dev)')
    out = Path(cache_dir or default_cache_dir()) / _key(gcc)
    shim, tool = out / SHIM_NAME, out / TOOL_NAME
    if shim.exists() and tool.exists():
        return Artifacts(shim, tool, '')
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BuildError(f'cannot create the build cache {out}: {e}') from None
    log = _compile(gcc, shim, SHIM_FLAGS, SHIM_LIBS)
    log += _compile(gcc, tool, TOOL_FLAGS, [])
    return Artifacts(shim, tool, log)
