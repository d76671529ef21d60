"""The operator CLI (`steward deployable|profile|arq ...`, the device listing
actions) as real subprocesses against a real single-host stack (`steward serve`,
embedded Placement), plus the progress helper with a fake getter, and the
examples of doc/cli.md run as written."""
import hashlib
import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid

import httpx
import pytest
import yaml

from steward import client as cli
from steward.client import progress
from tests.stack import ROOT, free_port, running_stack

pytestmark = pytest.mark.slow
BIN = os.path.dirname(sys.executable)
STEWARD = os.path.join(BIN, 'steward')
HOST = 'bench-host'
DEVICE_ACTIONS = ('list', 'show', 'enable', 'disable')
NO_SUCH = '00000000-0000-0000-0000-000000000000'
DOC = os.path.join(ROOT, 'doc', 'cli.md')


# --- fixtures and helpers -----------------------------------------------------------
@pytest.fixture(scope='module')
def stack():
    with running_stack() as st:
        yield st


@pytest.fixture(scope='module')
def api(stack):
    with httpx.Client(base_url=stack.url + '/v2', timeout=30, headers={
            'OpenStack-API-Version': 'accelerator latest'}) as c:
        yield c


def base_env(stack=None, **extra):
    """The environment of a fresh shell: no OS_* variables but ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    env['PATH'] = BIN + os.pathsep + env.get('PATH', '')
    if stack is not None:
        env['OS_ENDPOINT'] = stack.url + '/v2'
    env.update(extra)
    return env


def command(args):
    # `steward device list|show|enable|disable` is dispatched to device_listing by
    # steward/cmd/device.py once wired (test_steward_device_dispatches...); the
    # module is exercised directly so these tests do not depend on that.
    if args[:1] == ['device'] and args[1:2] and args[1] in DEVICE_ACTIONS:
        return [sys.executable, '-m', 'steward.cmd.device_listing'] + args[1:]
    return [STEWARD] + args


def steward(stack, *args, expect=0, env=None, timeout=60):
    out = subprocess.run(command(list(args)), capture_output=True, text=True,
                         timeout=timeout, env=env or base_env(stack), cwd=ROOT)
    assert 'Traceback' not in out.stderr, out.stderr
    assert out.returncode == expect, (args, out.returncode, out.stdout, out.stderr)
    return out


def as_json(stack, *args, **kw):
    return json.loads(steward(stack, *args, '-f', 'json', **kw).stdout)


def table_rows(text):
    """Cells of an ASCII table (the non-terminal rendering)."""
    rows = []
    for line in text.splitlines():
        if line.startswith('|'):
            rows.append([c.strip() for c in line.strip('|').split('|')])
    return rows


@pytest.fixture(scope='module')
def device(api):
    return api.get('/devices').json()['devices'][0]


@pytest.fixture(scope='module')
def deployable(api):
    return api.get('/deployables').json()['deployables'][0]


def make_profile(api, name, groups=None):
    resp = api.post('/device_profiles', json=[{'name': name, 'groups': groups or [
        {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]}])
    assert resp.status_code == 201, resp.text
    return resp.json()


def bind(api, arq_uuid, rp_uuid, instance):
    patch = {arq_uuid: [{'op': 'add', 'path': '/hostname', 'value': HOST},
                        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
                        {'op': 'add', 'path': '/instance_uuid', 'value': instance}]}
    assert api.patch('/accelerator_requests', json=patch).status_code == 202


@pytest.fixture(scope='module')
def arqs(api, deployable):
    """What Nova leaves behind: a profile, a bound ARQ of an instance and a
    fresh (Initial) one."""
    make_profile(api, 'cli-arq-dp')

    def create():
        resp = api.post('/accelerator_requests', json={'device_profile_name': 'cli-arq-dp'})
        assert resp.status_code == 201, resp.text
        return resp.json()['arqs'][0]

    bound, initial = create(), create()
    instance = str(uuid.uuid4())
    bind(api, bound['uuid'], deployable['rp_uuid'], instance)
    deadline = time.monotonic() + 20
    while api.get('/accelerator_requests', params={
            'instance': instance, 'bind_state': 'resolved'}).status_code == 423:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return {'bound': bound['uuid'], 'initial': initial['uuid'], 'instance': instance}


# --- usage ------------------------------------------------------------------------------
def test_help_and_usage_errors(stack):
    out = steward(stack, 'profile', 'create', '--help')
    assert '--group KEY=VALUE[,KEY=VALUE...]' in out.stdout
    assert 'connection options' in out.stdout and '--os-endpoint' in out.stdout
    usage = out.stdout.split('\n\n')[0]
    assert '--os-' not in usage      # connection options stay out of the usage line
    steward(stack, 'deployable', expect=cli.EXIT_USAGE)
    steward(stack, 'deployable', 'frob', expect=cli.EXIT_USAGE)
    out = steward(stack, 'deployable', 'show', 'not-a-uuid', expect=cli.EXIT_USAGE)
    assert "'not-a-uuid' is not a UUID" in out.stderr
    out = steward(stack, 'arq', 'show', NO_SUCH, '--wait-timeout', '3', expect=cli.EXIT_USAGE)
    assert '--wait-timeout goes with --wait' in out.stderr
    help_text = subprocess.run([STEWARD, '--help'], capture_output=True, text=True).stdout
    for cmd in ('deployable list|show', 'profile create|list|show|delete', 'arq list|show'):
        assert cmd in help_text


# --- deployables and output formats -------------------------------------------------------
def test_deployable_list_in_every_format(stack, deployable):
    rows = table_rows(steward(stack, 'deployable', 'list').stdout)
    assert rows[0] == ['uuid', 'name', 'num_accelerators', 'device_id', 'driver_name',
                       'rp_uuid']
    assert rows[1] == [deployable['uuid'], f'{HOST}_FakeDevice', '16',
                       str(deployable['device_id']), 'fake', deployable['rp_uuid']]
    # json and yaml: the API's whole objects
    assert as_json(stack, 'deployable', 'list') == [deployable]
    assert yaml.safe_load(steward(stack, 'deployable', 'list', '-f', 'yaml').stdout) == \
        [deployable]
    # -c, repeated or comma-separated, any case
    assert as_json(stack, 'deployable', 'list', '-c', 'name', '-c', 'RP_UUID') == \
        [{'name': deployable['name'], 'rp_uuid': deployable['rp_uuid']}]
    value = steward(stack, 'deployable', 'list', '-f', 'value', '-c', 'uuid,num_accelerators')
    assert value.stdout == f"{deployable['uuid']} 16\n"
    table = table_rows(steward(stack, 'deployable', 'list', '-c', 'attributes_list').stdout)
    assert table == [['attributes_list'], [deployable['attributes_list']]]
    out = steward(stack, 'deployable', 'list', '-c', 'nope', expect=cli.EXIT_USAGE)
    assert 'unknown column(s) nope; choose from uuid, parent_id' in out.stderr


def test_deployable_filters_and_show(stack, deployable):
    assert [d['uuid'] for d in as_json(stack, 'deployable', 'list', '--driver', 'fake')] == \
        [deployable['uuid']]
    assert as_json(stack, 'deployable', 'list', '--driver', 'nvme') == []
    assert as_json(stack, 'deployable', 'list', '--name', deployable['name'], '--device-id',
                   str(deployable['device_id']), '--rp-uuid', deployable['rp_uuid']) != []
    # an empty table still names its columns
    assert table_rows(steward(stack, 'deployable', 'list', '--driver', 'nvme').stdout) == \
        [['uuid', 'name', 'num_accelerators', 'device_id', 'driver_name', 'rp_uuid']]
    assert as_json(stack, 'deployable', 'show', deployable['uuid']) == deployable
    rows = dict(table_rows(steward(stack, 'deployable', 'show', deployable['uuid']).stdout))
    assert rows['name'] == deployable['name'] and rows['bitstream_id'] == 'None'
    assert 'links' not in rows and rows['Field'] == 'Value'
    out = steward(stack, 'deployable', 'show', deployable['uuid'], '-f', 'value',
                  '-c', 'num_accelerators', '-c', 'driver_name')
    assert out.stdout == '16\nfake\n'


def test_not_found_is_exit_3_with_the_api_error(stack):
    out = steward(stack, 'deployable', 'show', NO_SUCH, expect=cli.EXIT_NOT_FOUND)
    line = out.stderr.strip()
    assert line.startswith(f'steward: error: Deployable not found with uuid={NO_SUCH} ')
    assert re.search(r'error_code=cyb\.deployable\.not_found, HTTP 404, '
                     r'request_id=req-[0-9a-f-]{36}\)$', line), line
    assert out.stdout == ''


# --- devices -------------------------------------------------------------------------------
def test_device_list_and_show(stack, api, device):
    rows = table_rows(steward(stack, 'device', 'list').stdout)
    state = api.get(f"/devices/{device['uuid']}").json()['device_state']
    assert rows == [['uuid', 'type', 'vendor', 'model', 'hostname', 'status',
                     'device_state', 'missing'],
                    [device['uuid'], 'FPGA', '0xABCD', device['model'], HOST, 'enabled',
                     state, 'False']]
    assert as_json(stack, 'device', 'list', '--type', 'FPGA', '--hostname', HOST) == [device]
    assert as_json(stack, 'device', 'list', '--type', 'GPU') == []
    assert as_json(stack, 'device', 'list', '--status', 'maintaining') == []
    shown = as_json(stack, 'device', 'show', device['uuid'])
    assert {k: v for k, v in shown.items() if k != 'updated_at'} == \
        {k: v for k, v in device.items() if k != 'updated_at'}
    # std_board_info is a JSON string in the API: shown as it is
    out = steward(stack, 'device', 'show', device['uuid'], '-f', 'value', '-c',
                  'std_board_info,status')
    assert out.stdout == f"{device['std_board_info']}\nenabled\n"
    steward(stack, 'device', 'list', '--status', 'broken', expect=cli.EXIT_USAGE)
    out = steward(stack, 'device', 'show', NO_SUCH, expect=cli.EXIT_NOT_FOUND)
    assert 'error_code=cyb.device.not_found' in out.stderr


def test_device_show_has_state_last_error_missing_and_history(stack, api, device, arqs):
    # The arqs fixture bound the device: its history has the bind.
    out = steward(stack, 'device', 'show', device['uuid']).stdout
    fields, history = out.split(f"history of device {device['uuid']} (oldest first):")
    shown = dict(table_rows(fields))
    assert (shown['device_state'], shown['last_error'], shown['missing'],
            shown['missing_since']) == ('allocated', 'None', 'False', 'None')
    rows = table_rows(history)
    assert rows[0] == ['created_at', 'event', 'source_state', 'target_state', 'actor',
                       'reason', 'request_id']
    assert [r[1:4] for r in rows[1:]][:1] == [['bind', 'available', 'allocated']]
    assert rows[1][4] == 'conductor bench-host' and rows[1][6].startswith('req-')
    # Scripts get the API's object, nothing added.
    assert 'history' not in as_json(stack, 'device', 'show', device['uuid'])
    old = steward(stack, 'device', 'show', device['uuid'],
                  '--os-accelerator-api-version', '2.5').stdout
    assert 'history of device' not in old and 'missing' not in old


def test_device_disable_enable(stack, api, device):
    def status():
        return api.get(f"/devices/{device['uuid']}").json()['status']

    out = steward(stack, 'device', 'disable', device['uuid'])
    assert out.stdout == f"device {device['uuid']}: maintaining\n"
    assert status() == 'maintaining'
    listed = steward(stack, 'device', 'list', '--status', 'maintaining', '-f', 'value',
                     '-c', 'uuid')
    assert listed.stdout == device['uuid'] + '\n'
    # several devices: a missing one is reported, the others are still done
    out = steward(stack, 'device', 'enable', NO_SUCH, device['uuid'],
                  expect=cli.EXIT_NOT_FOUND)
    assert out.stdout == f"device {device['uuid']}: enabled\n"
    assert 'cyb.device.not_found' in out.stderr and '1 of 2 devices (enable) failed' in out.stderr
    assert status() == 'enabled'


def test_steward_device_dispatches_to_device_listing(stack, device):
    wired = subprocess.run([STEWARD, 'device', 'list', '--help'], capture_output=True,
                           text=True, env=base_env(stack))
    assert wired.returncode == 0, wired.stderr
    out = subprocess.run([STEWARD, 'device', 'list', '-f', 'value', '-c', 'uuid'],
                         capture_output=True, text=True, env=base_env(stack))
    assert (out.returncode, out.stdout) == (0, device['uuid'] + '\n'), out.stderr


# --- profiles ----------------------------------------------------------------------------
def test_profile_create_group_semantics(stack, api):
    one = as_json(stack, 'profile', 'create', 'cli-one-group', '--group',
                  'resources:FPGA=1, trait:CUSTOM_FAKE_DEVICE=required',
                  '--description', 'one group, two keys')
    assert one['groups'] == [{'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]
    assert one['description'] == 'one group, two keys'
    two = as_json(stack, 'profile', 'create', 'cli-two-groups',
                  '--group', 'resources:FPGA=1', '--group', 'resources:FPGA=2,accel:x=y')
    assert two['groups'] == [{'resources:FPGA': '1'},
                             {'resources:FPGA': '2', 'accel:x': 'y'}]
    stored = api.get('/device_profiles/cli-two-groups').json()['device_profile']
    assert stored == two
    # the table of a created profile lists each group on its own line
    out = steward(stack, 'profile', 'create', 'cli-table', '--group', 'resources:FPGA=1')
    assert dict(table_rows(out.stdout))['groups'] == '{"resources:FPGA": "1"}'
    steward(stack, 'profile', 'delete', 'cli-one-group', 'cli-two-groups', 'cli-table')


def test_profile_create_bad_input(stack, api):
    before = api.get('/device_profiles').json()['device_profiles']
    for group in ('resources:FPGA', 'resources:FPGA=1,', '=1', 'a=1,a=2'):
        out = steward(stack, 'profile', 'create', 'cli-bad', '--group', group,
                      expect=cli.EXIT_USAGE)
        assert 'argument --group' in out.stderr
    steward(stack, 'profile', 'create', 'cli-bad', expect=cli.EXIT_USAGE)   # no --group
    # an unknown column is refused before the profile is created
    steward(stack, 'profile', 'create', 'cli-bad', '--group', 'resources:FPGA=1', '-c', 'nope',
            expect=cli.EXIT_USAGE)
    # the API's own checks: exit 1 with its message and code
    out = steward(stack, 'profile', 'create', 'cli-bad', '--group',
                  'resources:FPGA=1,trait:FAKE=required', expect=cli.EXIT_API_ERROR)
    assert "unsupported trait name 'FAKE'" in out.stderr
    assert 'error_code=cyb.device_profile.invalid, HTTP 400' in out.stderr
    assert api.get('/device_profiles').json()['device_profiles'] == before
    make_profile(api, 'cli-dup')
    out = steward(stack, 'profile', 'create', 'cli-dup', '--group', 'resources:FPGA=1',
                  expect=cli.EXIT_API_ERROR)
    assert 'error_code=cyb.device_profile.duplicate_name, HTTP 409' in out.stderr
    steward(stack, 'profile', 'delete', 'cli-dup')


def test_profile_list_show_by_name_and_uuid(stack, api):
    made = make_profile(api, 'cli-show')
    listed = as_json(stack, 'profile', 'list', '--name', 'cli-show')
    assert listed == [made]
    rows = table_rows(steward(stack, 'profile', 'list', '--name', 'cli-show').stdout)
    assert rows[0] == ['uuid', 'name', 'groups', 'description']
    assert as_json(stack, 'profile', 'show', 'cli-show') == made
    assert as_json(stack, 'profile', 'show', made['uuid']) == made
    # below 2.2 the API looks profiles up by UUID only: the CLI finds the name itself
    assert as_json(stack, 'profile', 'show', 'cli-show',
                   '--os-accelerator-api-version', '2.0') == made
    out = steward(stack, 'profile', 'show', 'cli-nope', '--os-accelerator-api-version',
                  '2.0', expect=cli.EXIT_NOT_FOUND)
    assert "no device profile is called 'cli-nope'" in out.stderr
    out = steward(stack, 'profile', 'show', 'cli-nope', expect=cli.EXIT_NOT_FOUND)
    assert 'cyb.device_profile.not_found' in out.stderr
    steward(stack, 'profile', 'show', 'a,b', expect=cli.EXIT_USAGE)
    steward(stack, 'profile', 'delete', made['uuid'])


def test_profile_delete_several_partial_failure_and_in_use(stack, api, arqs):
    make_profile(api, 'cli-del-a')
    b = make_profile(api, 'cli-del-b')
    out = steward(stack, 'profile', 'delete', 'cli-del-a', 'cli-del-missing', b['uuid'],
                  expect=cli.EXIT_NOT_FOUND)
    assert out.stderr.count('steward: error:') == 2
    assert '1 of 3 device profiles (delete) failed' in out.stderr
    names = {p['name'] for p in api.get('/device_profiles').json()['device_profiles']}
    assert not names & {'cli-del-a', 'cli-del-b'}
    out = steward(stack, 'profile', 'delete', 'cli-arq-dp', expect=cli.EXIT_API_ERROR)
    assert 'cyb.device_profile.in_use' in out.stderr and 'HTTP 409' in out.stderr


# --- ARQs ---------------------------------------------------------------------------------
def test_arq_list_and_show(stack, api, arqs, deployable):
    listed = as_json(stack, 'arq', 'list')
    assert {a['uuid'] for a in listed} >= {arqs['bound'], arqs['initial']}
    mine = as_json(stack, 'arq', 'list', '--instance', arqs['instance'])
    assert [(a['uuid'], a['state'], a['device_rp_uuid']) for a in mine] == \
        [(arqs['bound'], 'Bound', deployable['rp_uuid'])]
    rows = table_rows(steward(stack, 'arq', 'list', '--instance', arqs['instance']).stdout)
    assert rows == [['uuid', 'state', 'device_profile_name', 'hostname', 'instance_uuid',
                     'attach_handle_type'],
                    [arqs['bound'], 'Bound', 'cli-arq-dp', HOST, arqs['instance'],
                     mine[0]['attach_handle_type']]]
    shown = as_json(stack, 'arq', 'show', arqs['bound'])
    assert shown == api.get(f"/accelerator_requests/{arqs['bound']}").json()
    out = steward(stack, 'arq', 'show', arqs['initial'], '-f', 'value', '-c', 'state',
                  '-c', 'instance_uuid')
    assert out.stdout == 'Initial\nNone\n'
    steward(stack, 'arq', 'show', NO_SUCH, expect=cli.EXIT_NOT_FOUND)
    steward(stack, 'arq', 'list', '--instance', 'nope', expect=cli.EXIT_USAGE)


def test_arq_show_wait_on_a_bound_arq_returns_at_once(stack, arqs):
    out = steward(stack, 'arq', 'show', arqs['bound'], '--wait', '-f', 'value', '-c', 'state')
    assert out.stdout == 'Bound\n'
    assert out.stderr.startswith('[0:00:00] Bound instance ')


def _wait_for_line(proc, pattern, timeout=20):
    """The first stderr line matching ``pattern`` (the process keeps running)."""
    deadline = time.monotonic() + timeout
    seen = ''
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.2)
        if ready:
            line = proc.stderr.readline()
            seen += line
            if re.search(pattern, line):
                return line
        if proc.poll() is not None:
            break
    raise AssertionError(f'no {pattern!r} on stderr: {seen!r}')


def test_arq_wait_follows_the_binding(stack, api, arqs, deployable):
    arq = api.post('/accelerator_requests',
                   json={'device_profile_name': 'cli-arq-dp'}).json()['arqs'][0]['uuid']
    proc = subprocess.Popen(command(['arq', 'show', arq, '--wait', '-f', 'json']),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=base_env(stack))
    try:
        _wait_for_line(proc, r'^\[0:00:\d\d\] Initial not bound to an instance yet$')
        instance = str(uuid.uuid4())
        bind(api, arq, deployable['rp_uuid'], instance)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)['state'] == 'Bound'
    assert f'Bound instance {instance}' in stderr and 'Traceback' not in stderr


def test_arq_wait_ctrl_c_stops_waiting_not_the_work(stack, api, arqs):
    proc = subprocess.Popen(command(['arq', 'show', arqs['initial'], '--wait']),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=base_env(stack))
    try:
        _wait_for_line(proc, r'Initial')
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == cli.EXIT_INTERRUPTED
    assert stdout == '' and 'Traceback' not in stderr
    assert re.search(r"steward: stopped waiting: after 0:00:\d\d at 'Initial' \(Ctrl-C\); "
                     rf"the binding of ARQ {arqs['initial']} goes on on the server\. "
                     rf"Watch it again with: steward arq show {arqs['initial']} --wait",
                     stderr), stderr
    assert api.get(f"/accelerator_requests/{arqs['initial']}").json()['state'] == 'Initial'


def test_arq_wait_timeout_is_exit_6(stack, arqs):
    started = time.monotonic()
    out = steward(stack, 'arq', 'show', arqs['initial'], '--wait', '--wait-timeout', '1',
                  expect=cli.EXIT_TIMEOUT)
    assert time.monotonic() - started < 30
    assert 'gave up after 0:00:01 (--wait-timeout)' in out.stderr
    assert f"steward arq show {arqs['initial']} --wait" in out.stderr


def test_client_resolved_states_are_the_state_machines():
    from steward.cmd import arq
    from steward.common import states
    assert set(arq.RESOLVED) == set(states.ARQ_RESOLVED)
    assert arq.SUCCESS == states.ARQ_BOUND


# --- connection, authentication, microversions --------------------------------------------
def test_unreachable_api_is_exit_5(stack):
    dead = f'http://127.0.0.1:{free_port()}/v2'
    out = steward(stack, 'deployable', 'list', '--os-endpoint', dead,
                  expect=cli.EXIT_UNREACHABLE)
    assert out.stderr == f'steward: error: cannot reach {dead}: [Errno 111] Connection ' \
                         f'refused\n'


def test_an_endpoint_that_is_not_the_accelerator_api_is_exit_5(stack):
    out = steward(stack, 'arq', 'list', '--os-endpoint', stack.placement_url,
                  expect=cli.EXIT_UNREACHABLE)
    assert out.stderr.startswith(f'steward: error: no accelerator API at '
                                 f'{stack.placement_url}/v2: GET answered ')
    assert 'Unauthorized (HTTP 401' in out.stderr      # Placement wants a token


def test_endpoint_options_and_environment(stack):
    dead = f'http://127.0.0.1:{free_port()}/v2'
    live = stack.url + '/v2'

    def names(*args, **env):
        return steward(stack, 'deployable', 'list', '-f', 'value', '-c', 'name', *args,
                       env=base_env(**env)).stdout

    expected = f'{HOST}_FakeDevice\n'
    assert names(OS_ENDPOINT=live) == expected
    assert names(OS_ACCELERATOR_ENDPOINT_OVERRIDE=live, OS_ENDPOINT=dead) == expected
    assert names('--os-endpoint', live, OS_ACCELERATOR_ENDPOINT_OVERRIDE=dead,
                 OS_ENDPOINT=dead) == expected
    assert names('--os-endpoint', stack.url) == expected          # /v2 added
    assert names('--os-endpoint', stack.url + '/v2/') == expected
    # options go anywhere after the command name
    out = subprocess.run([STEWARD, 'deployable', '--os-endpoint', live, 'list', '-c', 'name',
                          '-f', 'value'], capture_output=True, text=True, env=base_env())
    assert (out.returncode, out.stdout) == (0, expected), out.stderr


def test_auth_types(stack):
    live = stack.url + '/v2'

    def debug(*args, expect=0, **env):
        return steward(stack, 'deployable', 'list', '--debug', '-f', 'value', '-c', 'name',
                       *args, expect=expect, env=base_env(**env))

    # keystoneauth's --debug log shows the token sent, hashed
    sent = 'X-Auth-Token: {SHA256}' + hashlib.sha256(b's3cret').hexdigest()
    assert sent not in debug(OS_ENDPOINT=live).stderr
    token = debug('--os-auth-type', 'admin_token', '--os-token', 's3cret', OS_ENDPOINT=live)
    assert sent in token.stderr and 's3cret' not in token.stderr
    # OS_TOKEN alone means admin_token, as for the openstack client
    assert sent in debug(OS_ENDPOINT=live, OS_TOKEN='s3cret').stderr
    assert sent in debug(OS_ENDPOINT=live, OS_AUTH_TYPE='admin_token',
                         OS_TOKEN='s3cret').stderr

    # clouds.yaml is not read: OS_CLOUD alone is refused, not replaced by noauth
    out = steward(stack, 'deployable', 'list', expect=cli.EXIT_USAGE,
                  env=base_env(OS_CLOUD='prod'))
    assert 'clouds.yaml is not read (OS_CLOUD=prod)' in out.stderr
    steward(stack, 'deployable', 'list', env=base_env(stack, OS_CLOUD='prod'))

    out = steward(stack, 'deployable', 'list', '--os-auth-type', 'admin_token',
                  expect=cli.EXIT_USAGE)
    assert 'admin_token needs --os-token' in out.stderr
    out = steward(stack, 'deployable', 'list', '--os-auth-type', 'magic',
                  expect=cli.EXIT_USAGE)
    assert "unknown --os-auth-type 'magic'" in out.stderr
    out = steward(stack, 'deployable', 'list', '--os-auth-type', 'password',
                  expect=cli.EXIT_USAGE, env=base_env())
    assert 'authentication needs --os-auth-url' in out.stderr
    # OS_AUTH_URL set: password authentication, against Keystone (here: nobody)
    keystone = f'http://127.0.0.1:{free_port()}/identity'
    out = steward(stack, 'deployable', 'list', expect=cli.EXIT_UNREACHABLE,
                  env=base_env(OS_AUTH_URL=keystone, OS_USERNAME='admin',
                               OS_PASSWORD='pw', OS_PROJECT_NAME='admin',
                               OS_USER_DOMAIN_ID='default',
                               OS_PROJECT_DOMAIN_ID='default'))
    assert 'cannot reach' in out.stderr and 'Connection refused' in out.stderr
    # ... and an endpoint override does not skip authentication
    out = steward(stack, 'deployable', 'list', '--os-auth-type', 'password',
                  '--os-auth-url', keystone, '--os-username', 'u', '--os-password', 'p',
                  '--os-project-name', 'p', '--os-user-domain-id', 'default',
                  '--os-project-domain-id', 'default', expect=cli.EXIT_UNREACHABLE)
    assert 'Connection refused' in out.stderr


def test_microversion_negotiation(stack, api, device):
    doc = api.get('/').json()
    newest = doc['max_version']
    out = steward(stack, 'device', 'show', device['uuid'], '--debug', '-f', 'json')
    assert f'OpenStack-API-Version: accelerator {newest}' in out.stderr
    assert 'status' in json.loads(out.stdout)
    old = as_json(stack, 'device', 'show', device['uuid'], '--os-accelerator-api-version',
                  '2.0')
    assert 'status' not in old
    env = base_env(stack, OS_ACCELERATOR_API_VERSION='2.3')
    assert 'status' in as_json(stack, 'device', 'show', device['uuid'], env=env)
    assert as_json(stack, 'device', 'show', device['uuid'],
                   '--os-accelerator-api-version', 'latest')['uuid'] == device['uuid']
    out = steward(stack, 'device', 'list', '--os-accelerator-api-version', '2.99',
                  expect=cli.EXIT_USAGE)
    assert f'serves microversions {doc["min_version"]} to {newest}, not 2.99' in out.stderr
    out = steward(stack, 'device', 'list', '--os-accelerator-api-version', 'two',
                  expect=cli.EXIT_USAGE)
    assert "'two' is not a version like 2.3" in out.stderr


def test_policy_refusal_is_exit_4(tmp_path, device):
    """403 needs a caller the policy refuses; under noauth the CLI is always an
    admin, so this stack's policy file refuses the action to everybody."""
    policy = tmp_path / 'policy.yaml'
    policy.write_text('"cyborg:device:disable": "!"\n"cyborg:device_profile:create": "!"\n')
    with running_stack(extra_conf=f'[oslo_policy]\npolicy_file = {policy}\n') as st:
        uuid_ = httpx.get(st.url + '/v2/devices').json()['devices'][0]['uuid']
        out = steward(st, 'device', 'disable', uuid_, expect=cli.EXIT_NOT_ALLOWED)
        assert 'error_code=cyb.auth.forbidden, HTTP 403' in out.stderr
        assert 'cyborg:device:disable' in out.stderr
        steward(st, 'profile', 'create', 'p', '--group', 'resources:FPGA=1',
                expect=cli.EXIT_NOT_ALLOWED)
        steward(st, 'device', 'list')           # reads are still allowed


# --- the progress helper (fake getter, fake clock) ------------------------------------------
class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def _states(*items):
    """A getter returning ``items`` in turn; an exception item is raised."""
    items = list(items)

    def get():
        item = items.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item
    return get


def _describe(obj):
    return progress.Progress(obj['phase'], obj.get('pct'))


def _wait(get, out, clock, **kw):
    return progress.wait_for(get, lambda o: o['phase'] == 'done', _describe,
                             what='the cleaning of device D', resume='steward watch D',
                             interval=5, out=out, clock=clock, sleep=clock.sleep, **kw)


def test_progress_polls_until_done_and_prints_changes_only():
    clock, out = FakeClock(), io.StringIO()
    get = _states({'phase': 'sanitize', 'pct': 0.0}, {'phase': 'sanitize', 'pct': 0.4},
                  {'phase': 'sanitize', 'pct': 41.7}, {'phase': 'verify'},
                  {'phase': 'done', 'x': 1})
    assert _wait(get, out, clock) == {'phase': 'done', 'x': 1}
    assert clock.sleeps == [5, 5, 5, 5]
    assert out.getvalue().splitlines() == [
        '[0:00:00] sanitize 0%', '[0:00:10] sanitize 42%', '[0:00:15] verify',
        '[0:00:20] done']


def test_progress_ctrl_c_stops_waiting_with_exit_130():
    for where in ('get', 'sleep'):
        clock, out = FakeClock(), io.StringIO()
        if where == 'get':
            get = _states({'phase': 'sanitize', 'pct': 10}, KeyboardInterrupt())
        else:
            get = _states({'phase': 'sanitize', 'pct': 10})
            clock.sleep = lambda s: (_ for _ in ()).throw(KeyboardInterrupt())
        with pytest.raises(progress.WaitInterrupted) as caught:
            _wait(get, out, clock)
        err = caught.value
        assert err.exit_code == cli.EXIT_INTERRUPTED == 130
        assert str(err).endswith("at 'sanitize' (Ctrl-C); the cleaning of device D goes on "
                                 "on the server. Watch it again with: steward watch D")


def test_progress_timeout_is_exit_6():
    clock, out = FakeClock(), io.StringIO()
    get = _states(*[{'phase': 'sanitize', 'pct': p} for p in range(10)])
    with pytest.raises(progress.WaitTimedOut) as caught:
        _wait(get, out, clock, timeout=12)
    assert caught.value.exit_code == cli.EXIT_TIMEOUT
    assert clock.sleeps == [5, 5, 2]
    assert str(caught.value).startswith('gave up after 0:00:12 (--wait-timeout)')


def test_progress_retries_while_the_api_is_away_and_stops_on_real_errors():
    clock, out = FakeClock(), io.StringIO()
    away = cli.CliError('cannot reach http://x/v2: [Errno 111] Connection refused',
                        exit_code=cli.EXIT_UNREACHABLE)
    proxy = cli.CliError('Bad Gateway', status=502)
    get = _states({'phase': 'sanitize', 'pct': 5}, away, proxy, {'phase': 'done'})
    assert _wait(get, out, clock) == {'phase': 'done'}
    lines = out.getvalue().splitlines()
    assert lines[1] == '[0:00:05] sanitize 5% retrying: cannot reach http://x/v2: ' \
                       '[Errno 111] Connection refused'
    assert lines[2] == '[0:00:10] sanitize 5% retrying: Bad Gateway'
    gone = cli.CliError('Device not found', exit_code=cli.EXIT_NOT_FOUND, status=404)
    with pytest.raises(cli.CliError) as caught:
        _wait(_states({'phase': 'sanitize'}, gone), io.StringIO(), FakeClock())
    assert caught.value is gone


def test_progress_on_a_terminal_draws_a_live_line():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    clock, out = FakeClock(), Terminal()
    get = _states({'phase': 'sanitize', 'pct': 50}, {'phase': 'done', 'pct': 100})
    _wait(get, out, clock)
    drawn = out.getvalue()
    assert '\r' in drawn and '\x1b[' in drawn      # redrawn in place, with colours
    text = re.sub(r'\x1b\[[0-9;?]*[a-zA-Z]', '', drawn)
    assert 'sanitize' in text and '50%' in text
    assert re.search(r'done ━+ 100% elapsed 0:00:0\d', text), text


# --- doc/cli.md, run as written ------------------------------------------------------------
def doc_sections():
    """{section title: its ```bash blocks joined}, for every section with some."""
    sections, title = {}, None
    for match in re.finditer(r'^## ([^\n]+)$|^```bash\n(.*?)^```$', open(DOC).read(),
                             re.MULTILINE | re.DOTALL):
        if match.group(1):
            title = match.group(1).strip()
        else:
            sections[title] = sections.get(title, '') + match.group(2)
    return sections


def test_doc_documents_every_action_and_the_exit_codes():
    scripts = '\n'.join(doc_sections().values())
    from steward.cmd import arq, deployable, device_listing, profile
    for resource, module in (('device', device_listing), ('deployable', deployable),
                             ('profile', profile), ('arq', arq)):
        sub = next(a for a in module.build_parser([])._actions
                   if a.__class__.__name__ == '_SubParsersAction')
        for action in sub.choices:
            assert re.search(rf'^steward {resource} {action}\b|\$\(steward {resource} '
                             rf'{action}\b', scripts, re.MULTILINE), (resource, action)
    table = dict(re.findall(r'^\| (\d+) \| (.+) \|$', open(DOC).read(), re.MULTILINE))
    codes = {getattr(cli, n) for n in dir(cli) if n.startswith('EXIT_')}
    assert set(map(int, table)) == codes


@pytest.mark.parametrize('section', sorted(doc_sections()))
def test_doc_examples_work_as_written(stack, api, arqs, section):
    script = doc_sections()[section]
    # The doc is written for the single-host default address; this stack has its own.
    script = script.replace('http://127.0.0.1:6666', stack.url)
    out = subprocess.run(['bash', '-euo', 'pipefail', '-c', script], capture_output=True,
                         text=True, timeout=300, env=base_env(stack), cwd=ROOT)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert 'Traceback' not in out.stderr
    # "# exit code N" comments say what the `|| echo "exit code $?"` lines print
    expected = re.findall(r'^# (exit code \d+)$', script, re.MULTILINE)
    assert re.findall(r'^exit code \d+$', out.stdout, re.MULTILINE) == expected
    assert api.get('/devices').json()['devices'][0]['status'] == 'enabled'
