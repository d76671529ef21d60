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
