"""bindep.txt lists what tools/system-packages.sh installs, no more, no less."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_bindep_matches_system_packages():
    script = (ROOT / 'tools/system-packages.sh').read_text()
    installed = re.search(r'^pkgs=\((.*)\)$', script, re.M).group(1).split()
    listed = [line.split()[0] for line in (ROOT / 'bindep.txt').read_text().splitlines()
              if line.strip() and not line.startswith('#')]
    assert sorted(listed) == sorted(installed)
    assert all('[platform:dpkg test]' in line
               for line in (ROOT / 'bindep.txt').read_text().splitlines()
               if line.strip() and not line.startswith('#'))
