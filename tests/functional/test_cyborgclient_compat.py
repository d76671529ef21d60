"""The `openstack accelerator ...` commands of python-openstackclient (built in since
10.x) and of python-cyborgclient 3.0.0 as real `openstack` subprocesses against a real
single-host stack (`steward serve`, fake driver, embedded Placement), for every
resource: device profiles, ARQs (create, list, show, bind, unbind, delete), devices,
deployables. `--debug` shows the request bodies each client builds; the test checks
them, so a client change that sends something new shows up here.

OSC 10.x registers the same command names as python-cyborgclient and lists
`cyborgclient.osc.v2` in its IGNORED_MODULES: the plain `openstack` command runs
OSC's built-in commands (checked below). python-cyborgclient's own commands, which
OSC 9.x runs, are run by the same OSC shell with that one list swapped
(CYBORGCLIENT_OSC below): OSC's built-in accelerator commands ignored instead.
"""
import json
import os
import re
import subprocess
import sys
import uuid

import cyborgclient  # noqa: F401 - a test extra (pyproject.toml); fail, not skip
import httpx
import pytest

from tests.fixtures.stack import ROOT, running_stack

pytestmark = pytest.mark.slow
BIN = os.path.dirname(sys.executable)
HOST = 'bench-host'
CYBORGCLIENT_OSC = (
    'import sys\n'
    'from openstackclient import shell\n'
    'shell.IGNORED_MODULES = tuple(m for m in shell.IGNORED_MODULES\n'
    '    if not m.startswith("cyborgclient")) + ("openstackclient.accelerator.v2",)\n'
    'sys.exit(shell.main())\n')
IMPLS = ('openstackclient', 'cyborgclient')
_BODY = re.compile(r"^REQ: curl -g -i -X (\w+) (\S+) .*? -d '(.*)'$", re.M)


@pytest.fixture(scope='module')
def stack():
    with running_stack() as st:
        yield st


@pytest.fixture(scope='module')
def api(stack):
    with httpx.Client(base_url=stack.url + '/v2', timeout=30, headers={
            'OpenStack-API-Version': 'accelerator latest'}) as c:
        yield c


def env(stack):
    """A fresh shell's environment with the single-host stack's noauth settings."""
    e = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    e.update(OS_AUTH_TYPE='none', OS_ENDPOINT=stack.url + '/v2',
             PATH=BIN + os.pathsep + e.get('PATH', ''))
    return e


def osc(stack, impl, *args, expect=0):
    """Run `openstack --debug ARGS` with OSC's or python-cyborgclient's commands;
    returns (stdout, [(method, url, body sent)])."""
    head = [os.path.join(BIN, 'openstack')] if impl == 'openstackclient' else \
        [sys.executable, '-c', CYBORGCLIENT_OSC]
    out = subprocess.run(head + ['--debug'] + list(args), capture_output=True,
                         text=True, timeout=120, env=env(stack), cwd=ROOT)
    assert out.returncode == expect, (impl, args, out.returncode, out.stdout,
                                      out.stderr[-4000:])
    sent = [(m, url, json.loads(body)) for m, url, body in _BODY.findall(out.stderr)]
    module = re.search(r'^command: .*? -> (\S+)', out.stderr, re.M)
    if module and impl == 'cyborgclient':
        assert module.group(1).startswith('cyborgclient.'), module.group(1)
    elif module:
        assert module.group(1).startswith('openstackclient.accelerator.'), \
            module.group(1)
    return out.stdout, sent, out.stderr


def osc_json(stack, impl, *args):
    stdout, sent, _ = osc(stack, impl, *args, '-f', 'json')
    return json.loads(stdout), sent


def test_plain_openstack_runs_the_builtin_commands(stack):
    _, _, err = osc(stack, 'openstackclient', 'accelerator', 'device', 'list')
    assert re.search(r'^command: accelerator device list -> '
                     r'openstackclient\.accelerator\.v2\.device\.ListDevice', err, re.M)


@pytest.mark.parametrize('impl', IMPLS)
def test_every_resource(stack, api, impl):
    name = f'compat-{impl}'
    # --- device profile create / list / show -------------------------------------
    if impl == 'openstackclient':
        dp, sent = osc_json(stack, impl, 'accelerator', 'device', 'profile', 'create',
                            name, '--group',
                            'resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=required')
        assert sent[-1][2] == [{'name': name, 'description': None, 'groups': [
            {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]}]
    else:
        dp, sent = osc_json(stack, impl, 'accelerator', 'device', 'profile', 'create',
                            name, '[{"resources:FPGA": 1, '
                                  '"trait:CUSTOM_FAKE_DEVICE": "required"}]',
                            '--description', 'one fake FPGA')
        assert sent[-1][2] == [{'name': name, 'description': 'one fake FPGA', 'groups': [
            {'resources:FPGA': 1, 'trait:CUSTOM_FAKE_DEVICE': 'required'}]}]
    assert sent[-1][0] == 'POST' and sent[-1][1].endswith('/v2/device_profiles')
    assert dp['name'] == name
    listed, _ = osc_json(stack, impl, 'accelerator', 'device', 'profile', 'list')
    assert name in [p['name'] for p in listed]
    shown, _ = osc_json(stack, impl, 'accelerator', 'device', 'profile', 'show',
                        dp['uuid'])
    assert shown['name'] == name and shown['uuid'] == dp['uuid']

    # --- arq create / list / show -------------------------------------------------
    arq, sent = osc_json(stack, impl, 'accelerator', 'arq', 'create', name)
    body = sent[-1][2]
    if impl == 'cyborgclient':
        # What used to be answered 400 "Additional properties are not allowed".
        assert body == {'device_profile_name': name, 'device_profile_group_id': None}
    else:
        assert body == {'device_profile_name': name}
    assert arq['state'] == 'Initial' and arq['device_profile_name'] == name
    listed, _ = osc_json(stack, impl, 'accelerator', 'arq', 'list')
    assert arq['uuid'] in [a['uuid'] for a in listed]
    shown, _ = osc_json(stack, impl, 'accelerator', 'arq', 'show', arq['uuid'])
    assert shown['uuid'] == arq['uuid'] and shown['state'] == 'Initial'

    # --- arq bind (python-cyborgclient; OSC's looks the server up in Nova) / unbind --
    rp_uuid = api.get('/deployables').json()['deployables'][0]['rp_uuid']
    if impl == 'cyborgclient':
        instance = str(uuid.uuid4())
        bound, sent = osc_json(stack, impl, 'accelerator', 'arq', 'bind', arq['uuid'],
                               HOST, instance, rp_uuid, 'project-ignored')
        assert sent[-1][0] == 'PATCH' and sent[-1][1].endswith(
            f'/v2/accelerator_requests/{arq["uuid"]}')
        assert sent[-1][2] == {arq['uuid']: [
            {'op': 'add', 'path': '/hostname', 'value': HOST},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid}]}
        assert bound['state'] == 'Bound' and bound['instance_uuid'] == instance
    else:
        bind = {arq['uuid']: [
            {'op': 'add', 'path': '/hostname', 'value': HOST},
            {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid}]}
        assert api.patch('/accelerator_requests', json=bind).status_code == 202
    unbound, sent = osc_json(stack, impl, 'accelerator', 'arq', 'unbind', arq['uuid'])
    assert sent[-1][0] == 'PATCH'
    assert sorted(sent[-1][2][arq['uuid']], key=lambda op: op['path']) == [
        {'op': 'remove', 'path': '/device_rp_uuid'},
        {'op': 'remove', 'path': '/hostname'},
        {'op': 'remove', 'path': '/instance_uuid'}]
    assert unbound['state'] in ('Unbound', 'Initial') and not unbound['instance_uuid']

    # --- arq delete -----------------------------------------------------------------
    osc(stack, impl, 'accelerator', 'arq', 'delete', arq['uuid'])
    assert api.get(f'/accelerator_requests/{arq["uuid"]}').status_code == 404

    # --- devices and deployables ------------------------------------------------------
    devices, _ = osc_json(stack, impl, 'accelerator', 'device', 'list')
    dev = next(d for d in devices if d['hostname'] == HOST)
    assert dev['type'] == 'FPGA'
    shown, _ = osc_json(stack, impl, 'accelerator', 'device', 'show', dev['uuid'])
    assert shown['uuid'] == dev['uuid'] and shown['vendor'] == '0xABCD'
    deployables, _ = osc_json(stack, impl, 'accelerator', 'deployable', 'list')
    assert rp_uuid in [d.get('rp_uuid') for d in deployables] or deployables
    one = api.get('/deployables').json()['deployables'][0]
    shown, _ = osc_json(stack, impl, 'accelerator', 'deployable', 'show', one['uuid'])
    assert shown['name'] == one['name']

    # --- device profile delete ----------------------------------------------------------
    osc(stack, impl, 'accelerator', 'device', 'profile', 'delete', dp['uuid'])
    assert api.get(f'/device_profiles/{dp["uuid"]}').status_code == 404


def test_cyborgclient_group_id_value_is_refused_not_ignored(stack, api):
    """`arq create --group-id N` sends the string; upstream ignored it silently,
    Steward says no (nothing is created)."""
    assert api.post('/device_profiles', json=[{'name': 'compat-gid', 'groups': [
        {'resources:FPGA': '1'}]}]).status_code == 201
    before = len(api.get('/accelerator_requests').json()['arqs'])
    _, sent, err = osc(stack, 'cyborgclient', 'accelerator', 'arq', 'create',
                       'compat-gid', '--group-id', '0', expect=1)
    assert sent[-1][2] == {'device_profile_name': 'compat-gid',
                           'device_profile_group_id': '0'}
    assert 'device_profile_group_id' in err
    assert len(api.get('/accelerator_requests').json()['arqs']) == before


@pytest.mark.parametrize('body', [
    {'device_profile_name': 'x', 'device_profile_group_id': None, 'extra': 1},
    {'device_profile_name': 'x', 'image_uuid': None},
    {'device_profile_group_id': None},
])
def test_schema_stays_strict(api, body):
    r = api.post('/accelerator_requests', json=body)
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.request.schema', r.text
