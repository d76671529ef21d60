"""Sample configuration files as oslo-config-generator writes them: generated for
real (Steward's from its venv, upstream Cyborg 17.0.0's from .venv-cyborg, with the
namespaces of Cyborg's tools/config/cyborg-config-generator.conf), read back as
the options they list, and edited the way an operator fills one in."""
import os
import re
import subprocess
import sys

from tests import side_venv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CYBORG_NAMESPACES = ('cyborg', 'oslo.db', 'oslo.messaging', 'oslo.middleware.cors',
                     'oslo.policy', 'oslo.log', 'oslo.service.service',
                     'oslo.service.periodic_task', 'oslo.service.sslutils',
                     'keystonemiddleware.auth_token')


def cyborg_sample(path):
    """Upstream Cyborg 17.0.0's cyborg.conf.sample, from the real package."""
    subprocess.run([side_venv.bin_path('cyborg', 'oslo-config-generator'),
                    *(a for ns in CYBORG_NAMESPACES for a in ('--namespace', ns)),
                    '--output-file', str(path)], check=True, capture_output=True)
    return path


def steward_sample(path):
    subprocess.run([os.path.join(os.path.dirname(sys.executable), 'oslo-config-generator'),
                    '--config-file', os.path.join(ROOT, 'etc/steward-config-generator.conf'),
                    '--output-file', str(path)], check=True, capture_output=True, cwd=ROOT)
    return path


def options(text):
    """({(group, name)} the sample lists, {(group, name)} it lists as another
    option's deprecated group/name)."""
    group, listed, aliases = None, set(), set()
    for line in text.splitlines():
        if m := re.match(r'^\[(.+)\]$', line):
            group = m.group(1)
        elif m := re.match(r'^#([a-z0-9_]+) =', line):
            listed.add((group, m.group(1)))
        elif m := re.match(r'^# Deprecated group/name - \[(.+)\]/(\S+)$', line):
            aliases.add((m.group(1), m.group(2)))
    return listed, aliases


def set_option(text, group, name, value):
    """``text`` with ``#name = <default>`` of section ``[group]`` replaced by
    ``name = value``; the section is added when the sample has none."""
    lines = text.split('\n')
    try:
        start = lines.index(f'[{group}]')
    except ValueError:
        return text + f'\n[{group}]\n{name} = {value}\n'
    for i in range(start + 1, len(lines)):
        if lines[i].startswith('['):
            break
        if re.match(rf'^#{name} =', lines[i]):
            lines[i] = f'{name} = {value}'
            return '\n'.join(lines)
    raise KeyError(f'[{group}] {name} is not in the sample')
