"""The agent's privileged work in real oslo.privsep daemons (steward/privsep,
doc/privileges.md): what the entrypoints refuse, the capabilities a daemon keeps,
and a whole NVMe cleanup by a `steward serve` that runs as nobody while only its
daemons, its children, hold privileges."""
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

import httpx
import pytest

from oslo_privsep import capabilities as caps

from steward.common import exception
from steward.drivers.nvme import cli as nvme_cli
from steward import privsep
from steward.privsep import blockdev
from steward.privsep import nvme as privsep_nvme
from tests.fixtures import requirements
from tests.fixtures import stack
from tests.nvme_sim import Simulation

MiB = 2 ** 20
CAP_SYS_ADMIN = caps.CAPS_BYNAME['CAP_SYS_ADMIN']
CAP_DAC_OVERRIDE = caps.CAPS_BYNAME['CAP_DAC_OVERRIDE']
DECLARED = {'nvme_admin': (1 << CAP_SYS_ADMIN) | (1 << CAP_DAC_OVERRIDE),
            'block_io': 1 << CAP_DAC_OVERRIDE}
TENANT = b'PRIVSEP-TENANT-SECRET-0123456789' * 32


def status(pid):
    """/proc/<pid>/status as {field: value}."""
    with open(f'/proc/{pid}/status') as f:
        return dict(line.rstrip('\n').split(':\t', 1) for line in f if ':\t' in line)


def children(pid):
    found = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open(f'/proc/{entry}/stat') as f:
                    if int(f.read().rsplit(')', 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def cmdline(pid):
    try:
        with open(f'/proc/{pid}/cmdline') as f:
            return f.read()
    except OSError:
        return ''


def alive(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


@pytest.fixture
def sim(tmp_path, conf, monkeypatch):
    s = Simulation(tmp_path / 'sim')
    for key, value in s.env.items():
        monkeypatch.setenv(key, value)
    conf.set_override('dev_root', s.dev_root)
    conf.set_override('sysfs_root', s.sysfs_root)
    conf.set_override('nvme_cli', s.nvme_cli, group='nvme')
    yield s
    s.close()


# --- what the daemons refuse ----------------------------------------------------
def test_nvme_refuses_a_device_outside_dev_root(sim):
    ctrl = sim.add_controller()
    cli = nvme_cli.NvmeCli(sim.nvme_cli)
    assert cli.id_ctrl(ctrl.char_path).serial       # the daemon works
    for path in ('/dev/nvme0', os.path.join(sim.dev_root, '..', 'nvme0'),
                 os.path.join(sim.dev_root, 'nvme0n1p1'),
                 os.path.join(sim.dev_root, 'sda'), sim.nvme_cli):
        with pytest.raises(exception.PrivsepRefused, match='not an NVMe node') as err:
            cli.id_ctrl(path)
        assert err.value.code == 'cyb.privsep.refused'
    assert os.getpid() in [int(status(privsep.nvme_admin.pid)['PPid'])]


def test_nvme_refuses_commands_and_options_outside_the_allow_list(sim):
    ctrl = sim.add_controller()
    cli = nvme_cli.NvmeCli(sim.nvme_cli)
    refused = [
        (('fw-download', ctrl.char_path), {}, 'not one of'),
        # Format NVM: only a secure erase (SES 0 erases nothing), LBA format explicit
        (('format', ctrl.char_path), {'nsid': 1, 'lbaf': 0, 'ses': 0,
                                      'timeout_ms': 60000}, 'ses 0 is not allowed'),
        (('format', ctrl.char_path), {'nsid': 1, 'lbaf': 0, 'ses': 3,
                                      'timeout_ms': 60000}, 'ses 3 is not allowed'),
        (('format', ctrl.char_path), {'nsid': 1, 'ses': 1, 'timeout_ms': 60000},
         'lbaf None is not an integer'),
        (('format', ctrl.char_path), {'nsid': 1, 'lbaf': 0, 'ses': 1, 'timeout_ms': 1,
                                      'force': 1}, 'takes only'),
        (('admin-passthru', ctrl.char_path), {}, 'not one of'),
        (('id-ctrl', ctrl.char_path), {'nsid': 1}, 'takes only no option'),
        (('delete-ns', ctrl.char_path), {'nsid': '1 --force'}, 'not an integer'),
        (('delete-ns', ctrl.char_path), {'nsid': 0}, 'not an integer'),
        (('sanitize', ctrl.char_path), {'sanact': 3}, 'overwrite'),
        (('write-zeroes', ctrl.char_path), {'nsid': 1, 'start_block': 0,
                                            'blocks': 65537}, 'not an integer'),
    ]
    for (command, dev), options, reason in refused:
        with pytest.raises(exception.PrivsepRefused, match=reason):
            cli.run(command, dev, **options)
    with pytest.raises(exception.PrivsepRefused, match=r'is not \[nvme\] nvme_cli'):
        privsep_nvme.run('/bin/sh', 'version')
    with pytest.raises(exception.PrivsepRefused, match='no device or options'):
        privsep_nvme.run(sim.nvme_cli, 'version', '/etc/shadow')
    # Nothing reached the controller but the one identify allowed last: every
    # refusal happened in the daemon, before nvme-cli.
    cli.id_ctrl(ctrl.char_path)
    assert [c['opcode'] for c in ctrl.commands() if c.get('queue') == 'admin'] == [0x06]


def test_block_io_refuses_paths_and_ranges_outside_the_namespace(sim, tmp_path):
    ctrl = sim.add_controller(namespaces=[8 * MiB])
    node = ctrl.namespace_paths()[0]
    outside = tmp_path / 'nvme0n1'
    outside.write_bytes(b'x' * 8192)
    for call in (lambda: blockdev.size(str(outside)),
                 lambda: blockdev.write_marks(ctrl.char_path),     # controller node
                 lambda: blockdev.zero_range(node, 8 * MiB, 4096),
                 lambda: blockdev.zero_range(node, 512, 4096),
                 lambda: blockdev.zeroout_range(node, 0, 8 * MiB + 1),
                 lambda: blockdev.nonzero_blocks(node, [8 * MiB]),
                 lambda: blockdev.check_marks(node, [[0, b'raw bytes']], False)):
        with pytest.raises(exception.PrivsepRefused):
            call()
    assert outside.read_bytes() == b'x' * 8192
    ctrl.write(0, TENANT)
    marks = blockdev.write_marks(node)
    assert marks and all(len(digest) == 64 for _, digest in marks)
    assert len(blockdev.check_marks(node, marks, False)) == len(marks)
    assert blockdev.zero_range(node, 0, 8 * MiB) == 8 * MiB
    assert list(blockdev.check_marks(node, marks, True)) == []
    assert ctrl.find_on_media(TENANT[:64]) == []


def test_daemons_keep_only_their_declared_capabilities(sim):
    sim.add_controller()
    nvme_cli.NvmeCli(sim.nvme_cli).version()
    blockdev.nonzero_blocks(sim.controllers[0].namespace_paths()[0], [0])
    for ctx in (privsep.nvme_admin, privsep.block_io):
        st = status(ctx.pid)
        assert int(st['PPid']) == os.getpid()
        for field in ('CapEff', 'CapPrm', 'CapBnd', 'CapAmb'):
            assert int(st[field], 16) == DECLARED[ctx.name], (ctx.name, field, st[field])


def test_daemon_started_by_helper_command_is_fenced_in_the_same_way(sim, conf):
    """The sudo route: the agent runs [privsep_<ctx>] helper_command, which
    starts steward-privsep-helper (here without sudo: this test runs as root)."""
    ctrl = sim.add_controller()
    helper = os.path.join(os.path.dirname(sys.executable), 'steward-privsep-helper')
    assert privsep.nvme_admin.helper_command('/s')[:2] == [
        'sudo', 'steward-privsep-helper']
    # Its configuration comes from --config-file: the simulator's dev_root and
    # nvme-cli must be in it, as in a deployment's steward.conf.
    conf_file = os.path.join(os.path.dirname(sim.dev_root), 'helper.conf')
    with open(conf_file, 'w') as f:
        f.write(f'[DEFAULT]\ndev_root = {sim.dev_root}\n'
                f'[nvme]\nnvme_cli = {sim.nvme_cli}\n')
    conf.set_override('helper_command', f'{helper} --config-file {conf_file}',
                      group='privsep_nvme_admin')
    privsep.nvme_admin.start(method=privsep.priv_context.Method.ROOTWRAP)
    assert privsep.nvme_admin.pid is None           # not forked by this process
    assert nvme_cli.NvmeCli(sim.nvme_cli).id_ctrl(ctrl.char_path).serial == 'SIMSN0001'
    with pytest.raises(exception.PrivsepRefused, match='not one of'):
        nvme_cli.NvmeCli(sim.nvme_cli).run('fw-download', ctrl.char_path)
    daemons = [p for p in map(int, filter(str.isdigit, os.listdir('/proc')))
               if alive(p) and conf_file in cmdline(p)]
    assert len(daemons) == 1, daemons
    st = status(daemons[0])
    for field in ('CapEff', 'CapPrm', 'CapBnd', 'CapAmb'):
        assert int(st[field], 16) == DECLARED['nvme_admin'], (field, st[field])
    assert st['NoNewPrivs'] == '1'
    privsep.nvme_admin.stop()
    stack.wait_for(lambda: not alive(daemons[0]),
                   'the helper daemon to die with its channel')


def test_a_daemon_dies_with_its_agent_killed(tmp_path):
    """SIGKILL of the process that forked them: no daemon survives."""
    script = tmp_path / 'agent.py'
    script.write_text(
        'import sys, time\n'
        'from steward.conf import CONF\n'
        "CONF(['--config-file', sys.argv[1]], project='steward')\n"
        'from steward.agent import privileges\n'
        'ctxs = privileges.start(CONF)\n'
        "print(' '.join(str(c.pid) for c in ctxs), flush=True)\n"
        'time.sleep(600)\n')
    conf = tmp_path / 'steward.conf'
    conf.write_text('[agent]\nenabled_drivers = nvme\n')
    proc = subprocess.Popen([sys.executable, str(script), str(conf)],
                            stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    assert sorted(children(proc.pid)) == sorted(pids)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)]


def test_agent_given_ambient_capabilities_keeps_none_itself(tmp_path):
    """The systemd unit's way (etc/systemd/steward-agent.service): an unprivileged
    user with CAP_SYS_ADMIN and CAP_DAC_OVERRIDE as ambient capabilities. The
    daemons fork with them; the agent then holds none."""
    if os.geteuid() != 0:
        requirements.need('root', 'starts a process with ambient capabilities')
    nobody = pwd.getpwnam('nobody')
    base = tempfile.mkdtemp(prefix='steward-privsep-')
    try:
        os.chmod(base, 0o755)
        script = os.path.join(base, 'agent.py')
        with open(script, 'w') as f:
            f.write('import json, os, sys\n'
                    'from steward.conf import CONF\n'
                    "CONF(['--config-file', sys.argv[1]], project='steward')\n"
                    'from steward.agent import privileges\n'
                    'ctxs = privileges.start(CONF)\n'
                    'from steward.drivers.nvme import cli as nvme_cli\n'
                    "nvme_cli.NvmeCli('nvme').version()\n"
                    'print(json.dumps({c.name: c.pid for c in ctxs}), flush=True)\n'
                    'sys.stdin.read()\n')
        conf = os.path.join(base, 'steward.conf')
        with open(conf, 'w') as f:
            f.write('[agent]\nenabled_drivers = nvme\n')
        prefix = _opened_for_nobody(base, _closed_to(nobody, [sys.base_prefix,
                                                                sys.prefix]))
        ambient = '+sys_admin,+dac_override'
        proc = subprocess.Popen(prefix + [
            'setpriv', '--reuid', 'nobody', '--regid', 'nogroup', '--clear-groups',
            '--inh-caps', ambient, '--ambient-caps', ambient,
            '--bounding-set', '-all,' + ambient, sys.executable, script, conf],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=base)
        try:
            pids = json.loads(proc.stdout.readline())
            agent = status(proc.pid)
            assert agent['Uid'].split()[0] == str(nobody.pw_uid)
            assert [int(agent[f], 16) for f in ('CapEff', 'CapPrm', 'CapInh', 'CapAmb')] \
                == [0, 0, 0, 0]
            for name, pid in pids.items():
                st = status(pid)
                assert int(st['PPid']) == proc.pid and st['Uid'].split()[0] == str(
                    nobody.pw_uid)
                assert int(st['CapEff'], 16) == int(st['CapAmb'], 16) == DECLARED[name]
        finally:
            proc.kill()
            proc.wait()
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- a real `steward serve` as nobody -------------------------------------------
def _closed_to(user, paths):
    """The directories on the way to ``paths`` that ``user`` cannot traverse."""
    closed = []
    for path in paths:
        parts = os.path.abspath(path).split(os.sep)
        for i in range(2, len(parts)):
            d = os.sep.join(parts[:i])
            st = os.stat(d)
            if not (st.st_mode & 0o001 or st.st_uid == user.pw_uid and st.st_mode & 0o100
                    or st.st_gid == user.pw_gid and st.st_mode & 0o010):
                if d not in closed:
                    closed.append(d)
                break
    return closed


def _opened_for_nobody(base, closed):
    """A command prefix running the rest in a private mount namespace where each
    of ``closed`` (here: /root, home of this host's Python and of the simulator's
    build cache) is traversable: a 0755 tmpfs over it with its entries bound back.
    A production install has its interpreter where the service user can read it;
    the host's own mounts are not touched."""
    if not closed:
        return []
    lines = ['set -e']
    for i, d in enumerate(closed):
        orig = os.path.join(base, f'closed{i}')
        os.mkdir(orig, 0o700)
        lines += [f'mount --bind {d} {orig}', f'mount -t tmpfs -o mode=0755 tmpfs {d}',
                  f'for e in {orig}/* {orig}/.[!.]*; do [ -e "$e" ] || continue; '
                  f'n=$(basename "$e"); if [ -d "$e" ]; then mkdir "{d}/$n"; '
                  f'else touch "{d}/$n"; fi; mount --bind "$e" "{d}/$n"; done']
    lines.append('exec "$@"')
    return ['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c',
            '\n'.join(lines), 'sh']


def test_serve_as_nobody_cleans_an_nvme_device_through_its_privsep_daemons():
    if os.geteuid() != 0:
        requirements.need('root', 'starts steward serve as root to see it drop to nobody')
    nobody = pwd.getpwnam('nobody')
    # Not under pytest's tmp_path: its parents are root's 0700; nobody must reach
    # the sysfs tree and the device nodes (the daemons reach everything anyway).
    base = tempfile.mkdtemp(prefix='steward-privsep-')
    os.chmod(base, 0o755)
    sim = proc = None
    try:
        sim = Simulation(os.path.join(base, 'sim'))
        ctrl = sim.add_controller(namespaces=[16 * MiB], ces=True, sanitize_seconds=0.3)
        ctrl.write(MiB, TENANT)
        state = os.path.join(base, 'state')
        os.mkdir(state)
        os.chown(state, nobody.pw_uid, nobody.pw_gid)
        api_port, placement_port = stack.free_port(), stack.free_port()
        conf = os.path.join(base, 'steward.conf')
        with open(conf, 'w') as f:
            f.write(f'[DEFAULT]\nstate_path = {state}\nhost = privsep-host\n'
                    f'sysfs_root = {sim.sysfs_root}\ndev_root = {sim.dev_root}\n'
                    f'[api]\nport = {api_port}\nmetrics_listen = 127.0.0.1:{stack.free_port()}\n'
                    f'[placement]\nembedded_port = {placement_port}\n'
                    f'[agent]\nenabled_drivers = nvme\ndiscovery_interval = 3600\n'
                    f'run_as_user = nobody\nrun_as_group = nogroup\n'
                    f'[nvme]\nnvme_cli = {sim.nvme_cli}\n'
                    f'device_spec = {{"vendor_id": "8086"}}\ncleanup_timeout = 60\n')
        log_path = os.path.join(base, 'steward.log')
        steward = os.path.join(os.path.dirname(sys.executable), 'steward')
        prefix = _opened_for_nobody(base, _closed_to(nobody, [
            sys.base_prefix, sys.prefix, sim.env['LD_PRELOAD']]))
        # Started from a directory nobody may not enter, as from a 0700 checkout or
        # root's home: the agent must not depend on its working directory.
        closed = os.path.join(base, 'closed')
        os.mkdir(closed, 0o700)
        with open(log_path, 'w') as log:
            proc = subprocess.Popen(prefix + [steward, 'serve', '--config-file', conf],
                                    stdout=log, stderr=subprocess.STDOUT,
                                    env=sim.environ(), cwd=closed)
        url = f'http://127.0.0.1:{api_port}'
        placement_url = f'http://127.0.0.1:{placement_port}'

        def ready():
            assert proc.poll() is None, open(log_path).read()[-3000:]
            try:
                return stack._offered(url, placement_url)
            except (httpx.HTTPError, ValueError):
                return False
        stack.wait_for(ready, 'steward serve to offer the device', timeout=90)

        # The agent process: nobody, no capability at all, and no way back.
        st = status(proc.pid)
        assert st['Uid'].split() == [str(nobody.pw_uid)] * 4
        for field in ('CapEff', 'CapPrm', 'CapInh', 'CapAmb'):
            assert int(st[field], 16) == 0, (field, st[field])
        assert st['NoNewPrivs'] == '1'
        # Its privileged children: the two daemons, root with their declared set.
        daemons = {}
        for pid in children(proc.pid):
            cst = status(pid)
            if cst['Uid'].split()[0] == '0':
                daemons[int(cst['CapEff'], 16)] = cst
        assert set(daemons) == set(DECLARED.values()), daemons.keys()
        for mask, cst in daemons.items():
            assert int(cst['CapBnd'], 16) == int(cst['CapPrm'], 16) == mask

        rc = 'CUSTOM_NVME_8086_0A54'
        r = httpx.post(f'{url}/v2/device_profiles', timeout=30, json=[
            {'name': 'nvme', 'groups': [{f'resources:{rc}': '1'}]}])
        assert r.status_code == 201, r.text
        inst = stack.bind_instance(url, placement_url, 'nvme', rc, 'privsep-host')
        stack.release_instance(url, placement_url, inst)
        with httpx.Client(base_url=url, timeout=30, headers={
                'OpenStack-API-Version': 'accelerator 2.5'}) as api:
            [dev] = api.get('/v2/devices').json()['devices']

            def cleaned():
                d = api.get(f'/v2/devices/{dev["uuid"]}').json()
                assert d['device_state'] != 'error', api.get(
                    f'/v2/devices/{dev["uuid"]}/erase_records').json()
                return d['device_state'] == 'available' and api.get(
                    f'/v2/devices/{dev["uuid"]}/erase_records').json()['erase_records']
            [rec] = stack.wait_for(cleaned, 'the device to be cleaned', timeout=60)
        assert (rec['status'], rec['action'], rec['verification']) == \
            ('succeeded', 'sanitize_crypto', 'passed'), rec
        assert ctrl.sanitize_state()['status'] == 'success'
        assert ctrl.find_on_media(TENANT[:64]) == []

        # SIGKILL the agent: its daemons go with it.
        proc.kill()
        proc.wait()
        pids = [int(c['Pid']) for c in daemons.values()]
        stack.wait_for(lambda: not any(alive(p) for p in pids),
                       'the privsep daemons to die with the agent')
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if sim is not None:
            sim.close()
        shutil.rmtree(base, ignore_errors=True)
