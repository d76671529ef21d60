"""Side virtualenvs for upstream OpenStack software the tests run for real (Keystone,
tempest with cyborg-tempest-plugin, upstream Cyborg's policy): each pins its own
oslo.* versions, so each gets a venv of its own at the repository root
(git-ignored), built from the package index on first use and reused after.

    python -m tests.side_venv keystone tempest cyborg    # build ahead of the tests

A venv is complete when its stamp file names exactly the packages asked for; a
half-built one (pip interrupted) is rebuilt.
"""
import fcntl
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (directory, packages, executables that must exist afterwards)
VENVS = {
    'keystone': ('.venv-keystone', ('keystone==30.0.0', 'uwsgi'),
                 ('keystone-manage', 'uwsgi')),
    'tempest': ('.venv-tempest', ('tempest==47.0.0', 'cyborg-tempest-plugin==2.8.0'),
                ('tempest', 'stestr')),
    # The venv tests/cyborg_upstream.py runs upstream Cyborg from (bench and tests).
    # psycopg2 and PyMySQL: Cyborg on PostgreSQL and on MariaDB, as deployed
    # (tests/functional/test_cyborg_import.py).
    'cyborg': ('.venv-cyborg', ('openstack-cyborg==17.0.0', 'gunicorn', 'psycopg2-binary',
                                'PyMySQL'),
               ('cyborg-agent', 'gunicorn', 'oslopolicy-sample-generator')),
}


class BuildError(RuntimeError):
    pass


def path(name):
    return os.path.join(ROOT, VENVS[name][0])


def bin_path(name, executable):
    return os.path.join(path(name), 'bin', executable)


def _complete(name):
    directory, packages, executables = VENVS[name]
    stamp = os.path.join(ROOT, directory, '.steward-packages')
    try:
        with open(stamp) as f:
            if f.read().split() != list(packages):
                return False
    except FileNotFoundError:
        return False
    return all(os.path.exists(bin_path(name, e)) for e in executables)


def ensure(name):
    """The venv's directory, built first if needed; BuildError when pip fails (no
    network, no index)."""
    directory, packages, executables = VENVS[name]
    venv = os.path.join(ROOT, directory)
    if _complete(name):
        return venv
    # pytest-xdist workers may ask at once: one builds, the other waits.
    with open(os.path.join(ROOT, f'.{directory.lstrip(".")}.lock'), 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(name):
            return venv
        python = os.path.join(venv, 'bin', 'python')
        if not os.path.exists(python):
            subprocess.run([sys.executable, '-m', 'venv', venv], check=True)
        pip = subprocess.run([python, '-m', 'pip', 'install', '-q', *packages],
                             capture_output=True, text=True)
        missing = [e for e in executables if not os.path.exists(bin_path(name, e))]
        if pip.returncode != 0 or missing:
            raise BuildError(f'pip install {" ".join(packages)} into {venv} failed '
                             f'({pip.returncode}, missing {missing}):\n'
                             f'{pip.stderr[-3000:]}')
        with open(os.path.join(venv, '.steward-packages'), 'w') as f:
            f.write('\n'.join(packages) + '\n')
    return venv


if __name__ == '__main__':
    for venv_name in sys.argv[1:] or list(VENVS):
        print(ensure(venv_name), flush=True)
