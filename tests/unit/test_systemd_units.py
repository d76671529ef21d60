"""The systemd units of doc/deployment-systemd.md (etc/systemd/*.service).

``systemd-analyze verify`` (systemd, from tools/system-packages.sh) loads each unit
as systemd would and warns about every unknown directive, bad value or missing
binary: the test accepts no line of output but the ones WHITELIST explains.
``systemd-analyze security --offline=yes`` scores the hardening. Neither needs a
running systemd. Both check that ExecStart's binary exists, so they read a copy
of each unit whose ExecStart names this checkout's steward instead of
/opt/steward/bin/steward, and nothing else changed.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNITS = os.path.join(ROOT, 'etc', 'systemd')
SERVICES = ('api', 'conductor', 'agent')
INSTALLED = '/opt/steward/bin/steward'
CONFIG = '/etc/steward/steward.conf'
HERE = os.path.join(os.path.dirname(sys.executable), 'steward')

# (regex, reason) of output lines of `systemd-analyze verify` that are not about
# our units. None so far: on Debian 12, even in a container without systemd as
# PID 1, verify prints nothing for a correct unit (an unknown User= is not checked).
WHITELIST = ()

# Highest `systemd-analyze security` exposure accepted (0 best, 10 worst; systemd
# calls 1.0-4.9 "OK"). api and conductor score 1.1 on systemd 252, the agent
# (User=steward with its privsep contexts' capabilities) 2.1: the margin is for
# another systemd's weights, not for dropping a directive.
MAX_EXPOSURE = {'api': 2.0, 'conductor': 2.0, 'agent': 3.0}


def _systemd_analyze():
    path = shutil.which('systemd-analyze')
    if path is None:
        pytest.fail('systemd-analyze not found: it comes from Debian\'s "systemd" '
                    'package, installed by tools/system-packages.sh')
    return path


def _env():
    # Warnings are at "warning" level: never let the caller's environment hide them.
    env = dict(os.environ, SYSTEMD_LOG_LEVEL='info', SYSTEMD_LOG_COLOR='0',
               SYSTEMD_PAGER='', SYSTEMD_COLORS='0')
    env.pop('SYSTEMD_LOG_TARGET', None)
    return env


def _path(service):
    return os.path.join(UNITS, f'steward-{service}.service')


def _read(service):
    with open(_path(service)) as f:
        return f.read()


def _values(text):
    """{Section.Key: [value, ...]} in file order, repeats kept."""
    found, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(('#', ';')):
            continue
        if line.startswith('['):
            section = line.strip('[]')
            continue
        key, _, value = line.partition('=')
        found.setdefault(f'{section}.{key.strip()}', []).append(value.strip())
    return found


def _one(values, key):
    assert len(values.get(key, ())) == 1, f'{key}: {values.get(key)}'
    return values[key][0]


@pytest.fixture
def testable(tmp_path):
    """Copies of the units that systemd-analyze can load here."""
    if not os.access(HERE, os.X_OK):
        pytest.fail(f'{HERE} is missing: install Steward into the venv first')
    paths = {}
    for service in SERVICES:
        text = _read(service)
        copy = text.replace(INSTALLED, HERE)
        changed = [(a, b) for a, b in zip(text.splitlines(), copy.splitlines()) if a != b]
        assert [a.split('=', 1)[0] for a, _ in changed] == ['ExecStart'], changed
        paths[service] = tmp_path / f'steward-{service}.service'
        paths[service].write_text(copy)
    return paths


def _verify(path):
    out = subprocess.run([_systemd_analyze(), 'verify', '--man=no', str(path)],
                         capture_output=True, text=True, timeout=120, env=_env())
    lines = [line for line in (out.stdout + out.stderr).splitlines()
             if line.strip() and not any(re.search(w, line) for w, _ in WHITELIST)]
    return out.returncode, lines


@pytest.mark.parametrize('service', SERVICES)
def test_systemd_analyze_verify_is_silent(testable, service):
    rc, lines = _verify(testable[service])
    assert rc == 0 and not lines, '\n'.join(lines)


def test_verify_would_report_a_mistake(testable, tmp_path):
    # The silence above means something: a misspelt directive and a bad value are
    # reported (as warnings, with exit code 0, hence the check of the output).
    wrong = tmp_path / 'steward-wrong.service'
    wrong.write_text(testable['api'].read_text().replace(
        'ProtectClock=yes', 'ProtectClok=yes').replace(
        'Restart=on-failure', 'Restart=sometimes'))
    rc, lines = _verify(wrong)
    text = '\n'.join(lines)
    assert "Unknown key 'ProtectClok'" in text, text
    assert 'sometimes' in text, text


@pytest.mark.parametrize('service', SERVICES)
def test_security_exposure(testable, service):
    out = subprocess.run([_systemd_analyze(), 'security', '--offline=yes', '--man=no',
                          '--no-pager', str(testable[service])],
                         capture_output=True, text=True, timeout=120, env=_env())
    match = re.search(r'Overall exposure level for \S+: (\d+\.\d+) (\w+)', out.stdout)
    assert match, out.stdout + out.stderr
    score = float(match.group(1))
    print(f'steward-{service}.service: exposure {score} {match.group(2)}')
    assert score <= MAX_EXPOSURE[service], out.stdout


@pytest.mark.parametrize('service', SERVICES)
def test_how_each_service_runs(service):
    values = _values(_read(service))
    assert _one(values, 'Service.ExecStart') == f'{INSTALLED} {service} --config-file {CONFIG}'
    # "notify" only once Steward calls sd_notify, which it does not.
    assert _one(values, 'Service.Type') == 'simple'
    assert _one(values, 'Service.Restart') == 'on-failure'
    # systemctl reload: SIGHUP to the main process, which reloads and stays
    # (steward/process.py Lifecycle; tests/functional/test_reload*.py). Without
    # it systemd has no reload, and SIGHUP's default action would end the
    # service, a death Restart=on-failure counts as clean.
    assert _one(values, 'Service.ExecReload') == '/bin/kill -HUP $MAINPID'
    assert _one(values, 'Install.WantedBy') == 'multi-user.target'
    assert _one(values, 'Service.StateDirectory') == 'steward'
    # state_path ($XDG_STATE_HOME/steward) is then the StateDirectory.
    assert _one(values, 'Service.Environment') == 'XDG_STATE_HOME=/var/lib'
    for key in ('NoNewPrivileges', 'PrivateTmp', 'ProtectHome', 'ProtectKernelTunables',
                'ProtectKernelModules', 'ProtectControlGroups'):
        assert _one(values, f'Service.{key}') == 'yes', key
    assert _one(values, 'Service.ProtectSystem') == 'strict'
    # The agent's ambient set is its privsep contexts' (below); none elsewhere.
    assert _one(values, 'Service.AmbientCapabilities') == (
        ' '.join(_privsep_caps()) if service == 'agent' else '')
    assert set(_one(values, 'Service.RestrictAddressFamilies').split()) <= \
        {'AF_UNIX', 'AF_INET', 'AF_INET6'}


def test_steward_does_not_notify_systemd():
    # Type=simple above rests on this; a service that starts calling sd_notify
    # should switch its unit to Type=notify.
    for dirpath, _, files in os.walk(os.path.join(ROOT, 'steward')):
        for name in files:
            if name.endswith('.py'):
                with open(os.path.join(dirpath, name)) as f:
                    text = f.read()
                assert 'NOTIFY_SOCKET' not in text and 'sd_notify' not in text, name


@pytest.mark.parametrize('service', ['api', 'conductor'])
def test_api_and_conductor_have_no_privilege(service):
    values = _values(_read(service))
    assert _one(values, 'Service.User') == 'steward'
    assert _one(values, 'Service.Group') == 'steward'
    assert _one(values, 'Service.CapabilityBoundingSet') == ''
    assert _one(values, 'Service.PrivateDevices') == 'yes'
    assert 'Service.ReadWritePaths' not in values


def _privsep_caps():
    """Every capability of the agent's privsep contexts (steward/privsep), in the
    order the unit lists them."""
    from oslo_privsep import capabilities
    from steward import privsep
    wanted = set()
    for ctx in privsep.CONTEXTS.values():
        wanted |= {capabilities.CAPS_BYVALUE[c] for c in ctx.capabilities}
    return sorted(wanted, key=lambda c: c != 'CAP_SYS_ADMIN')


def test_agent_keeps_only_what_its_privileged_work_needs():
    text = _read('agent')
    values = _values(text)
    # Unprivileged; its privsep daemons get the capabilities, the agent drops them.
    assert _one(values, 'Service.User') == 'steward'
    assert _one(values, 'Service.Group') == 'steward'
    caps = _one(values, 'Service.CapabilityBoundingSet').split()
    assert caps == _privsep_caps() == ['CAP_SYS_ADMIN', 'CAP_DAC_OVERRIDE']
    comments = '\n'.join(line for line in text.splitlines() if line.startswith('#'))
    for cap in caps + ['CAP_DAC_READ_SEARCH', 'CAP_SYS_RAWIO', 'CAP_FOWNER',
                       'CAP_SETUID', 'CAP_SETPCAP']:
        assert cap in comments, f'{cap}: kept or dropped, the unit must say why'
    assert 'privsep' in comments
    # capset stays allowed: the agent drops its capabilities with it.
    assert not any('@privileged' in f or 'capset' in f
                   for f in values['Service.SystemCallFilter'][1:])
    assert _one(values, 'Service.PrivateDevices') == 'no'
    assert _one(values, 'Service.DevicePolicy') == 'closed'
    assert values['Service.DeviceAllow'] == ['char-nvme rw', 'block-blkext rw']


def _slug(heading):
    # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens.
    return re.sub(r'[^\w\- ]', '', heading.strip()).lower().replace(' ', '-')


def links_resolve(page):
    """Problems with the relative links of doc/PAGE: missing files or anchors."""
    doc = os.path.join(ROOT, 'doc')
    with open(os.path.join(doc, page)) as f:
        text = f.read()
    problems = []
    for target, anchor in re.findall(r'\]\(([^)#\s]*)(?:#([^)\s]+))?\)', text):
        if target.startswith(('http:', 'https:')):
            continue
        path = os.path.normpath(os.path.join(doc, target or page))
        if not os.path.exists(path):
            problems.append(f'{target}: no such file')
        elif anchor:
            with open(path) as f:
                slugs = {_slug(h) for h in re.findall(r'^#+ (.+)$', f.read(), re.M)}
            if anchor not in slugs:
                problems.append(f'{target}#{anchor}: no such heading')
    return problems


def test_deployment_page_links_resolve():
    assert not links_resolve('deployment-systemd.md')


def test_every_service_command_reloads_on_sighup():
    """ExecReload above rests on this: each command the units start goes through
    the one Lifecycle (steward/process.py), which catches SIGHUP, and steward api's
    gunicorn arbiter reloads through it too."""
    import inspect
    from steward.cmd import main
    for service in SERVICES + ('serve',):
        source = inspect.getsource(main.COMMANDS[service])
        assert 'root.lifecycle.catch_reload()' in source, service
    assert 'on_reload=root.lifecycle.reload' in inspect.getsource(main.cmd_api)
