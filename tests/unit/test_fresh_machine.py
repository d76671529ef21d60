"""Every entry point works on a machine that never ran the project (issue 37): the
system packages (tools/system-packages.sh) come before any pip that installs the
test extra, whose libvirt-python pip builds against libvirt-dev.

The scripts run for real, in a copy of tools/ and .ci/ (so that a broken order
cannot start real installs in the checkout); what is doubled is the machine: a
``dpkg-query`` that knows no package, ``id``, ``apt-get`` and the Python that
would make the venv, each writing what it was asked to a log. The log's order is
what is checked.
"""
import configparser
import pathlib
import re
import shutil
import stat
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENTRY_POINTS = {
    '.ci/run': ['.ci/run'],
    'tools/lint.sh': ['tools/lint.sh'],
    'tools/test.sh': ['tools/test.sh'],
    'tools/test.sh --fast': ['tools/test.sh', '--fast'],
    'tools/bootstrap.sh test': ['tools/bootstrap.sh', 'test'],
}


def _script(path, body):
    path.write_text('#!/bin/sh\n' + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def fresh_machine(tmp_path):
    """run(args, root) -> (CompletedProcess, [logged calls]) on a copy of the
    scripts, with no Debian package installed."""
    tree, bin_dir, log = tmp_path / 'tree', tmp_path / 'bin', tmp_path / 'calls.log'
    shutil.copytree(ROOT / 'tools', tree / 'tools',
                    ignore=shutil.ignore_patterns('nova-series.sh', '__pycache__'))
    shutil.copytree(ROOT / '.ci', tree / '.ci')
    shutil.copy(ROOT / 'pyproject.toml', tree / 'pyproject.toml')
    shutil.copy(ROOT / 'upper-constraints.txt', tree / 'upper-constraints.txt')
    bin_dir.mkdir()
    _script(bin_dir / 'dpkg-query', 'exit 1\n')
    _script(bin_dir / 'apt-get', f'echo "apt-get $*" >> {log}\n')
    # The venv the bootstrap makes: its python and pip log what they install.
    _script(bin_dir / 'python-double', f'''
case "$1" in
  -c) exit 0 ;;
  -m) [ "$2" = venv ] || {{ echo "python $*" >> {log}; exit 1; }}
      echo "venv $3" >> {log}; mkdir -p "$3/bin"
      printf '#!/bin/sh\\necho "pip $*" >> {log}\\n' > "$3/bin/pip"
      cp "$3/bin/pip" "$3/bin/python"; chmod +x "$3/bin/pip" "$3/bin/python" ;;
  *) echo "python $*" >> {log}; exit 1 ;;
esac
''')

    def run(args, root):
        _script(bin_dir / 'id', f'echo {0 if root else 1000}\n')
        env = {'PATH': f'{bin_dir}:/usr/bin:/bin', 'HOME': str(tmp_path),
               'PYTHON': str(bin_dir / 'python-double'),
               'STEWARD_VENV': str(tmp_path / 'venv')}
        out = subprocess.run(['bash', *args], cwd=tree, env=env, capture_output=True,
                             text=True, timeout=120)
        calls = log.read_text().splitlines() if log.exists() else []
        return out, calls
    return run


@pytest.mark.parametrize('entry', sorted(ENTRY_POINTS))
def test_without_root_the_missing_packages_stop_it_before_any_pip(fresh_machine, entry):
    out, calls = fresh_machine(ENTRY_POINTS[entry], root=False)
    assert out.returncode != 0
    assert 'missing Debian packages: ' in out.stderr and 'libvirt-dev' in out.stderr
    assert calls == [], calls        # no venv made, no pip run, nothing installed


@pytest.mark.parametrize('entry', ['tools/bootstrap.sh test', 'tools/lint.sh',
                                   'tools/test.sh --fast', 'tools/test.sh'])
def test_as_root_apt_get_installs_them_before_the_first_pip(fresh_machine, entry):
    out, calls = fresh_machine(ENTRY_POINTS[entry], root=True)
    assert [c.split()[:2] for c in calls[:2]] == [['apt-get', 'update'],
                                                 ['apt-get', 'install']], calls
    assert 'libvirt-dev' in calls[1].split() and 'pkg-config' in calls[1].split()
    assert calls[2].startswith('venv ')
    installs = [c for c in calls if c.startswith('pip install') and '-e' in c.split()]
    assert installs == ['pip install -q -c upper-constraints.txt -e .[test]'], (calls, out.stderr)
    assert calls.index(installs[0]) > 1


def test_the_runtime_install_needs_no_system_package(fresh_machine):
    """tools/bootstrap.sh without the test extra (a compute node, tools/serve.sh)
    asks for no Debian package: nothing of the runtime builds against one."""
    out, calls = fresh_machine(['tools/bootstrap.sh'], root=False)
    assert out.returncode == 0, out.stderr
    assert [c for c in calls if c.startswith('apt-get')] == []
    assert 'pip install -q -c upper-constraints.txt -e .' in calls


def test_only_bootstrap_pip_installs_the_project():
    """So bootstrap.sh's ordering holds for every script: no other one installs
    Steward (``pip install -e .`` or ``.[extra]``) on its own."""
    scripts = [p for p in (ROOT / 'tools').glob('*.sh')] + [ROOT / '.ci' / 'run']
    own = re.compile(r'pip install\b[^\n]*\s["\']?\.(?![\w/.])')   # `.`, `.[x]`
    assert [p.name for p in scripts if own.search(p.read_text())] == ['bootstrap.sh']


def test_tox_envs_with_the_test_extra_install_the_system_packages_first():
    """tox runs install_command for the package and its extras (checked with tox
    4.67: ``tox -e py3 --notest`` on a machine without the packages stops in
    system-packages.sh before pip)."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / 'tox.ini')
    base = tox['testenv']
    envs = [s.split(':', 1)[1] for s in tox.sections() if s.startswith('testenv:')]
    assert envs
    for env in envs:
        section = tox[f'testenv:{env}']
        extras = section.get('extras', base.get('extras', '')).split()
        if section.get('skip_install', 'false') == 'true' or 'test' not in extras:
            continue
        install = section.get('install_command', base.get('install_command', ''))
        assert re.search(r'tools/system-packages\.sh\s*&&.*pip install', install), env


def test_the_mysql_extra_installs_what_mysqlclient_is_built_with_first(fresh_machine):
    """tools/bootstrap.sh mysql (an API or conductor host on MariaDB): pip builds
    mysqlclient, the extra's driver, against libmariadb-dev, so those packages, and
    only those, are installed before the first pip."""
    out, calls = fresh_machine(['tools/bootstrap.sh', 'mysql'], root=True)
    assert out.returncode == 0, out.stderr
    assert [c.split()[:2] for c in calls[:2]] == [['apt-get', 'update'],
                                                 ['apt-get', 'install']], calls
    wanted = calls[1].split()
    assert {'libmariadb-dev', 'pkg-config', 'gcc'} <= set(wanted), wanted
    assert 'libvirt-dev' not in wanted and 'postgresql' not in wanted, wanted
    assert calls.index('pip install -q -c upper-constraints.txt -e .[mysql]') > 2, calls


def test_without_root_the_mysql_extra_stops_before_any_pip(fresh_machine):
    out, calls = fresh_machine(['tools/bootstrap.sh', 'mysql'], root=False)
    assert out.returncode != 0
    assert 'missing Debian packages: ' in out.stderr and 'libmariadb-dev' in out.stderr
    assert calls == [], calls


def test_every_install_path_takes_the_upper_constraints():
    """A dependency's new release reaches no install of Steward until
    upper-constraints.txt is refreshed on purpose (issue 54: cryptography 51.0.1
    broke a fresh clone's CI). tools/bootstrap.sh serves serve.sh, test.sh, lint.sh
    and .ci/run; tox's envs each have an install_command; the previous release's
    venv installs from tests/fixtures/previous_release.py."""
    pins = [line for line in (ROOT / 'upper-constraints.txt').read_text().splitlines()
            if line and not line.startswith('#')]
    assert pins and all(re.fullmatch(r'[A-Za-z0-9_.\-]+==[\w.+\-]+', p) for p in pins), pins
    names = {p.split('==')[0].lower().replace('_', '-') for p in pins}
    assert {'sqlalchemy', 'cryptography', 'oslo.messaging', 'openstack-placement'} <= names
    assert 'steward' not in names
    assert re.search(r'pip install -q -c "\$constraints" -e',
                     (ROOT / 'tools' / 'bootstrap.sh').read_text())
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / 'tox.ini')
    for section in tox.sections():
        install = tox[section].get('install_command')
        if install:
            assert 'upper-constraints.txt' in install, section
    previous = (ROOT / 'tests' / 'fixtures' / 'previous_release.py').read_text()
    assert "'-c'" in previous and "'upper-constraints.txt'" in previous
