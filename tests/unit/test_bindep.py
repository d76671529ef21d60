"""bindep.txt lists what tools/system-packages.sh installs, no more, no less."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_bindep_matches_system_packages():
    """The test profile is the script's whole list, the mysql profile its
    ``mysql`` list (what mysqlclient is built with)."""
    script = (ROOT / 'tools/system-packages.sh').read_text()
    installed = re.search(r'^pkgs=\((.*)\)$', script, re.M).group(1).split()
    for_mysql = re.search(r'^mysql_pkgs=\((.*)\)$', script, re.M).group(1).split()
    lines = [line for line in (ROOT / 'bindep.txt').read_text().splitlines()
             if line.strip() and not line.startswith('#')]
    assert all(re.fullmatch(r'\S+ \[platform:dpkg test( mysql)?\]', line) for line in lines)
    assert sorted(line.split()[0] for line in lines) == sorted(installed)
    assert sorted(line.split()[0] for line in lines if 'mysql' in line) == sorted(for_mysql)


def _bindep(cwd, *args):
    import subprocess
    import sys
    bindep = pathlib.Path(sys.executable).parent / 'bindep'
    return subprocess.run([str(bindep), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_bindep_itself_reads_the_file_and_finds_what_is_missing(tmp_path):
    """The real bindep (the test extra's) on the real file: what .ci/run and
    `tox -e bindep` run; and on a copy naming a package no machine has, it names
    that one and fails."""
    listed = _bindep(ROOT, '-b', 'test')
    assert listed.returncode in (0, 1), listed.stderr
    (tmp_path / 'bindep.txt').write_text(
        (ROOT / 'bindep.txt').read_text() + 'steward-no-such-package [platform:dpkg test]\n')
    out = _bindep(tmp_path, '-b', 'test')
    assert out.returncode == 1
    missing = out.stdout.split()
    assert 'steward-no-such-package' in missing
    assert set(missing) - {'steward-no-such-package'} == set(listed.stdout.split())
