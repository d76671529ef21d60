"""doc/multihost.md is executable: its configuration blocks, copied as printed with
the placeholders filled in, parse and start the services as its section 5 starts
them; the blocks that need a Keystone parse with every value valid for its type.

The guide's services join the test deployment's broker, database and Placement (a
fourth compute node, a third conductor, a second API), on the PostgreSQL deployment
and on the MariaDB one."""
import os
import re
import subprocess

import httpx
from keystoneauth1 import loading as ks_loading
from keystonemiddleware import auth_token
from oslo_config import cfg
import pytest

from steward.conf import (agent, api, compute, conductor, database, default, mdev,
                          nova, nvidia, nvme, pci, placement, upgrade_levels)
from tests.multihost import cluster as cluster_mod
from tests.multihost import rabbit
from tests.fixtures.sysfs_tree import make_pci

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUIDE = os.path.join(ROOT, 'doc', 'multihost.md')
HOST = 'guide-compute'


def _guide():
    with open(GUIDE) as f:
        return f.read()


def ini_blocks():
    return re.findall(r'```ini\n(.*?)```', _guide(), re.S)


def _block(text_pattern):
    found = [b for b in ini_blocks() if re.search(text_pattern, b)]
    assert len(found) == 1, (text_pattern, len(found))
    return found[0]


def start_commands():
    section = _guide().split('## 5. Start, in this order', 1)[1]
    script = re.search(r'```bash\n(.*?)```', section, re.S).group(1)
    return [line.split() for line in script.splitlines()
            if line.strip() and not line.lstrip().startswith('#')]


def _values(path):
    """{(section, key): [raw values]} as oslo.config's own parser reads the file."""
    sections = {}
    cfg.ConfigParser(str(path), sections).parse()
    return {(s, k): v for s, keys in sections.items() for k, v in keys.items()}


def _fresh_conf(path):
    conf = cfg.ConfigOpts()
    # Registered the way steward.conf registers them on the service's CONF.
    for mod in (default, api, database, agent, placement, nova, compute, pci, mdev,
                nvidia, nvme, conductor, upgrade_levels):
        mod.register_opts(conf)
    for group, options in auth_token.list_opts():
        conf.register_opts(options, group=group)
    conf(['--config-file', path], project='steward', default_config_files=[])
    return conf


def test_every_block_parses_with_valid_values(tmp_path):
    """Every option of every block is known, converts to its type, and holds no
    '#' (oslo.config keeps a trailing comment in the value)."""
    blocks = ini_blocks()
    assert len(blocks) >= 5
    for i, text in enumerate(blocks):
        path = tmp_path / f'block{i}.conf'
        path.write_text(text)
        values = _values(path)
        assert values, text
        for (section, key), raw in values.items():
            for value in raw:
                assert '#' not in value, (i, section, key, value)
        conf = _fresh_conf(str(path))
        for section, key in values:
            group = None if section == 'DEFAULT' else section
            try:
                (conf[group] if group else conf)[key]
            except cfg.NoSuchOptError:
                if group == 'oslo_messaging_rabbit':
                    _messaging_conf(path)[group][key]
                    continue
                assert group in ('placement', 'nova', 'keystone_authtoken'), (i, section, key)
                _auth_plugin_conf(path, group)[group][key]


def _messaging_conf(path):
    """oslo.messaging's options (registered by the transport when a service
    builds it), on a ConfigOpts of their own."""
    from oslo_messaging import opts as messaging_opts
    conf = cfg.ConfigOpts()
    for group, opts in messaging_opts.list_opts():
        conf.register_opts(opts, group=group)
    conf([], default_config_files=[path])
    return conf


def _auth_plugin_conf(path, group):
    """keystoneauth's options of ``group`` with its auth plugin's, as a service
    loads them. On a ConfigOpts (and OptGroup) of its own: oslo.config shares a
    registered group's options between the ConfigOpts it is registered on."""
    conf = cfg.ConfigOpts()
    ks_loading.register_session_conf_options(conf, group)
    ks_loading.register_auth_conf_options(conf, group)
    ks_loading.register_adapter_conf_options(conf, group, include_deprecated=False)
    conf(['--config-file', str(path)], project='steward', default_config_files=[])
    ks_loading.load_auth_from_conf_options(conf, group)
    return conf


def _fill(text, cluster, api_port):
    text = (text.replace('RABBIT_PASS', cluster.rabbit.password)
            .replace('CONTROLLER:5672', f'127.0.0.1:{cluster.rabbit.port}')
            .replace('http://CONTROLLER:8778', cluster.placement_url)
            .replace('CONDUCTOR_HOST', 'guide-conductor')
            .replace('API_HOST', 'guide-api')
            .replace('COMPUTE_HOST', HOST)
            .replace('port = 6666', f'port = {api_port}')
            .replace('CONTROLLER:6666', f'127.0.0.1:{api_port}')
            .replace('KEYSTONE', '127.0.0.1')
            .replace('STEWARD_PASS', 'unused-without-keystone'))
    text = re.sub(r'(?m)^connection = .*$', f'connection = {cluster.db_url}', text)
    assert not re.search(r'\b[A-Z]{3,}_(?:PASS|HOST)\b|CONTROLLER', text), text
    return text


@pytest.fixture
def guide_services(healthy_on, tmp_path):
    cluster = healthy_on
    api_port, metrics_port = rabbit.free_port(), rabbit.free_port()
    sysfs = tmp_path / 'sys'
    make_pci(sysfs, '0000:83:00.0', '0x10de', '0x1eb8', cls='0x030200')
    extra = {
        # Where a test puts what a real host has at the default paths.
        'conductor': f'\n[DEFAULT]\nstate_path = {tmp_path}/c\n',
        'api': f'\n[DEFAULT]\nstate_path = {tmp_path}/a\n'
               f'[api]\nmetrics_listen = 127.0.0.1:{metrics_port}\n',
        'agent': f'\n[DEFAULT]\nstate_path = {tmp_path}/g\nsysfs_root = {sysfs}\n'
                 f'[agent]\ndiscovery_interval = 1\n',
    }
    files = {
        'conductor': _block(r'host = CONDUCTOR_HOST'),
        'api': _block(r'host = API_HOST'),
        'agent': _block(r'host = COMPUTE_HOST'),
    }
    etc = tmp_path / 'etc'
    etc.mkdir()
    for role, text in files.items():
        (etc / f'{role}.conf').write_text(_fill(text, cluster, api_port) + extra[role])
    # The guide's conductor runs with create_compute_node = false: Nova's provider.
    cluster.create_compute_node(HOST)
    procs = []
    try:
        for argv in start_commands():
            argv = [a.replace('/etc/steward/', f'{etc}/') for a in argv]
            argv[0] = os.path.join(cluster_mod.BIN, argv[0])
            log = open(tmp_path / f'{argv[1]}.log', 'ab')
            if argv[1:3] == ['db', 'sync']:
                out = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT)
                assert out.returncode == 0, (tmp_path / 'db.log').read_text()
                continue
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        yield cluster, f'http://127.0.0.1:{api_port}', procs, tmp_path
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
                proc.wait(30)


def test_guide_blocks_start_as_printed(guide_services):
    cluster, api_url, procs, logs = guide_services
    assert [p.poll() for p in procs] == [None, None, None], \
        [f.read_text()[-2000:] for f in logs.glob('*.log')]
    # The API as printed: every address, tokens checked with Keystone.
    cluster.wait_for(lambda: httpx.get(f'{api_url}/v2', timeout=5).status_code == 200,
                     'the guide API answering')
    r = httpx.get(f'{api_url}/v2/devices', timeout=30)   # one answer, not a poll
    assert r.status_code == 401 and r.json()['error_code'] == 'cyb.auth.unauthenticated'
    # The guide agent's device, registered by a conductor, is offered in Placement.
    def offered():
        with cluster.placement_client() as p:
            names = [rp['name'] for rp in p.get('/resource_providers').json()[
                'resource_providers']]
        return f'{HOST}_0000:83:00.0' in names
    cluster.wait_for(offered, "the guide agent's device in Placement", timeout=90)
    with cluster.api_client() as api:
        devices = api.get('/v2/devices', params={'hostname': HOST}).json()['devices']
    assert [d['std_board_info'] for d in devices if d['hostname'] == HOST]


def test_install_step_installs_the_database_driver_of_the_urls():
    guide = _guide()
    assert 'tools/bootstrap.sh postgres' in guide
    assert 'postgresql+psycopg://' in guide
    with open(os.path.join(ROOT, 'pyproject.toml')) as f:
        pyproject = f.read()
    extra = re.search(r'(?m)^postgres = \[(.*)\]$', pyproject)
    assert extra and 'psycopg[binary]' in extra.group(1)
    # MariaDB/MySQL: the mysql extra carries the driver of mysql+mysqldb:// URLs
    # (mysqlclient, built against what `tools/system-packages.sh mysql` installs
    # first), and PyMySQL's of earlier configurations.
    assert 'tools/bootstrap.sh mysql' in guide
    assert 'mysql+mysqldb://' in guide and '?charset=utf8mb4' in guide
    assert 'mysql+pymysql://' not in guide.replace('`mysql+pymysql://` URLs of earlier', '')
    extra = re.search(r'(?m)^mysql = \[(.*)\]$', pyproject)
    assert extra and 'mysqlclient' in extra.group(1) and 'PyMySQL' in extra.group(1)
    with open(os.path.join(ROOT, 'tools', 'bootstrap.sh')) as f:
        script = f.read()
    assert 'pip install' in script          # installs the extra it is given
    assert '*,mysql,*) bash tools/system-packages.sh mysql' in script
