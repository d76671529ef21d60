"""The real Nova 34 (two computes) against Steward's multi-host deployment.

``NovaCloud`` is tests/multihost's ``Cluster`` (RabbitMQ, PostgreSQL, the real
Placement, ``steward db sync``, a conductor, ``steward api``, one ``steward agent``
per compute host, each in its own network namespace when run as root) with Nova in
it: right after Placement is up, ``tests/nova/nova_cloud.py`` starts inside
.venv-nova (Nova's API, conductor, scheduler and two nova-compute on the fake virt
driver, all Nova's own code; patched with contrib/nova when ``patched``). Nova's
computes create their compute-node providers, as in a real cloud; Steward's
conductors run with ``[placement] create_compute_node = false``, so each agent's
devices land under Nova's provider named after the host (a report before Nova made
it is refused and retried on the next discovery cycle). Steward's ``[nova]`` points
at Nova's API, served on a real port: events and the orphan check reach real Nova.

Each compute host has two PCI functions (tests/fixtures/sysfs_tree.py): ``LM_ADDRESS``
(product ``LM_PRODUCT``, tagged ``live_migratable`` in ``[pci] device_spec`` when
this Steward knows the tag) and ``FIXED_ADDRESS`` (``FIXED_PRODUCT``, not tagged).
A host named in ``pooled`` (issue 52) is an eight-GPU server instead: the
``POOL_ADDRESSES`` (``POOL_PRODUCT`` on vfio-pci, all on NUMA node
``POOL_NUMA_NODE``) under one ``[pci] device_spec`` entry tagged ``pool`` with
``resource_class: POOL_RC``, which Steward offers as ONE provider of total 8.
"""
import json
import os
import pathlib
import subprocess
import time

import httpx

from steward.api import microversion
from steward.drivers.pci import driver as pci_driver
from tests.multihost import cluster as cluster_mod
from tests.multihost import rabbit
from tests.nova import series
from tests.fixtures.sysfs_tree import make_pci

HOSTS = ('nova-c1', 'nova-c2')
VENDOR = '10de'
FIXED_PRODUCT, LM_PRODUCT = '1eb8', '2330'
FIXED_ADDRESS, LM_ADDRESS = '0000:81:00.0', '0000:c1:00.0'
FIXED_RC = f'CUSTOM_PCI_{VENDOR.upper()}_{FIXED_PRODUCT.upper()}'
LM_RC = f'CUSTOM_PCI_{VENDOR.upper()}_{LM_PRODUCT.upper()}'
FIXED_PROFILE, LM_PROFILE = 'nova-pci', 'nova-pci-lm'
COMPUTE_VERSION = 'compute 2.96'
# A pooled host (``NovaCloud(pooled=...)``): eight identical functions, one pool.
POOL_PRODUCT, POOL_RC, POOL_NUMA_NODE = '2330', 'PGPU', 0
POOL_ADDRESSES = tuple(f'0000:{0x18 + i:02x}:00.0' for i in range(8))
POOL_SPEC = {'vendor_id': VENDOR, 'product_id': POOL_PRODUCT, 'resource_class': POOL_RC,
             'pool': True}
NOVA_START_TIMEOUT = 180


def steward_says_how_arqs_move():
    """This Steward has microversion 2.7 (ARQ_MOVE) and the ``live_migratable`` tag."""
    return (microversion.MAX_VERSION >= microversion.Version(2, 7)
            and 'live_migratable' in pci_driver.KNOWN_KEYS)


def nova_supports(what):
    """Does the patched Nova lift ``block_accelerators`` for ``what`` (RESIZE,
    LIVE_MIGRATION, SUSPEND)? Read from the tree that runs (contrib/nova applied)."""
    with open(os.path.join(series.PATCHED, 'nova', 'compute', 'api.py')) as f:
        return f'SUPPORT_ACCELERATOR_SERVICE_FOR_{what} =' in f.read()


class NovaProcess:
    """tests/nova/nova_cloud.py in .venv-nova, until ``stop()``."""

    def __init__(self, base, request, patched=True, record_accel_info=False):
        self.base = pathlib.Path(base)
        self.ready_path = self.base / 'nova-ready.json'
        self.stop_path = self.base / 'nova-stop'
        self.log_path = self.base / 'nova.log'
        self.service_log_path = self.base / 'nova-services.log'
        self.fail_path = self.base / 'nova-fail-live-migration'
        request = dict(request, ready=str(self.ready_path), stop=str(self.stop_path),
                       log=str(self.service_log_path),
                       fail_live_migration=str(self.fail_path))
        # What the fake virt driver is given (its spawn's accel_info), one JSON
        # line per call, when asked (tests/nova/nova_cloud.py).
        self.accel_info_path = self.base / 'nova-accel-info.jsonl'
        if record_accel_info:
            request['accel_info'] = str(self.accel_info_path)
        (self.base / 'nova-in.json').write_text(json.dumps(request))
        # Nova's functional fixtures import the placement package (never started
        # here): Steward's own copy, alone on the path.
        import placement
        shim = self.base / 'placement-pkg'
        shim.mkdir(exist_ok=True)
        os.symlink(os.path.dirname(placement.__file__), shim / 'placement')
        path = ([series.PATCHED] if patched else []) + [str(shim), series.CONSUMER_DIR]
        env = dict(os.environ, STEWARD_NOVA_IN=str(self.base / 'nova-in.json'),
                   PYTHONPATH=os.pathsep.join(path))
        env.pop('OS_CLOUD', None)
        log = open(self.log_path, 'ab')
        self.proc = subprocess.Popen(
            [series.PYTHON, '-m', 'testtools.run', 'nova_cloud.NovaCloudTestCase.test_serve'],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=str(self.base), env=env, start_new_session=True)
        log.close()
        self.ready = None

    def log(self):
        """The test runner's output, then Nova's services' log."""
        out = self.log_path.read_text(errors='replace')
        if self.service_log_path.exists():
            out += '\n--- nova services\n' + self.service_log_path.read_text(
                errors='replace')
        return out

    def alive(self):
        return self.proc.poll() is None

    def accel_info(self):
        """[{call, host, instance, arqs}] of each spawn (a boot, a resize's
        finish_migration) and finish_revert_migration of the fake driver, in
        order: the bound ARQs Nova's compute handed its virt driver."""
        if not self.accel_info_path.exists():
            return []
        return [json.loads(line) for line in
                self.accel_info_path.read_text().splitlines() if line.strip()]

    def poll_ready(self):
        """Nova's ready document once it has written it; raises if Nova died."""
        if self.ready is None and self.ready_path.exists():
            self.ready = json.loads(self.ready_path.read_text())
        if self.ready is None and not self.alive():
            raise RuntimeError(f'Nova exited (rc {self.proc.returncode}):\n'
                               f'{self.log()[-6000:]}')
        return self.ready

    def fail_live_migrations(self, fail):
        """While ``fail``, the fake hypervisor's live migration fails and Nova
        rolls it back (tests/nova/nova_cloud.py)."""
        if fail:
            self.fail_path.touch()
        else:
            self.fail_path.unlink(missing_ok=True)

    def request_stop(self):
        if self.proc.poll() is None and not self.stop_path.exists():
            self.stop_path.touch()

    def stop(self):
        """Stopped (the stop file, or the removal of its directory, ends it)."""
        if self.stop_path.parent.exists():
            self.request_stop()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


class NovaCloud(cluster_mod.Cluster):
    """The multi-host deployment with Nova's computes in place of the pre-made
    compute-node providers."""

    netns_tag = 'n'

    def __init__(self, patched=True, hosts=HOSTS, pooled=()):
        """``pooled``: the hosts that are eight-GPU servers (module doc); the
        fake virt driver's accel_info is recorded when there is one."""
        super().__init__(hosts=hosts, conductors=1, api_workers=1)
        self.patched = patched
        self.pooled = frozenset(pooled)
        self.nova_port = rabbit.free_port()
        self.nova_url = f'http://127.0.0.1:{self.nova_port}/v2.1'
        self.nova = None
        self.tagged = steward_says_how_arqs_move()

    # -- configuration ----------------------------------------------------------
    def common_conf(self, name, host, broker_host=None):
        conf = super().common_conf(name, host, broker_host)
        # Events and the orphan check go to the real Nova API (nova_cloud.py gives
        # an unauthenticated request the service user's identity).
        conf['nova'] = {'endpoint_override': self.nova_url}
        return conf

    def agent_conf(self, host, rp_name=None, drivers='pci'):
        name = f'agent-{host}'
        root = self.sysfs_for(host)
        if not root.exists() and host in self.pooled:
            for bdf in POOL_ADDRESSES:
                make_pci(root, bdf, f'0x{VENDOR}', f'0x{POOL_PRODUCT}', cls='0x030200',
                         driver='vfio-pci', numa_node=POOL_NUMA_NODE)
        elif not root.exists():
            for bdf, product in ((FIXED_ADDRESS, FIXED_PRODUCT), (LM_ADDRESS, LM_PRODUCT)):
                make_pci(root, bdf, f'0x{VENDOR}', f'0x{product}', cls='0x030200')
        ns = self.netns.get(host)
        conf = self.common_conf(name, host, broker_host=ns.outer if ns else None)
        del conf['database'], conf['nova']
        # The agent's calls wait 15 s, as tests/multihost's agents do (its
        # agent_conf says why: one that expires under load delays, never fails).
        conf['DEFAULT'].update({'rpc_response_timeout': 15, 'sysfs_root': str(root)})
        conf['agent'] = {'enabled_drivers': 'pci',
                         'discovery_interval': cluster_mod.DISCOVERY_INTERVAL}
        lm = {'vendor_id': VENDOR, 'product_id': LM_PRODUCT}
        if self.tagged:
            lm['live_migratable'] = True
        conf['pci'] = {'device_spec': [
            json.dumps({'vendor_id': VENDOR, 'product_id': FIXED_PRODUCT}), json.dumps(lm)]}
        if host in self.pooled:
            conf['pci'] = {'device_spec': json.dumps(POOL_SPEC)}
        return name, self.write_conf(name, conf)

    def add_agent(self, host, rp_name=None, drivers='pci'):
        return super().add_agent(host, rp_name=rp_name, drivers=drivers)

    # -- Nova ---------------------------------------------------------------------
    def create_compute_node(self, name):
        """Nova's compute makes the provider: start Nova (once, as soon as Placement
        answers) and learn the uuid when it is there (``host_registered``)."""
        if self.nova is None:
            self.nova = NovaProcess(self.base, {
                'placement': self.placement_url, 'accelerator': f'{self.api_url}/v2',
                'api_port': self.nova_port, 'hosts': self.hosts}, patched=self.patched,
                record_accel_info=bool(self.pooled))
        return None

    def nova_ready(self):
        ready = self.nova.poll_ready()
        if ready:
            self.compute_rps.update(ready['computes'])
        return ready is not None

    def host_registered(self, host):
        if not self.nova_ready():
            return False
        deps = self.deployables(host)
        if len(deps) != (len(POOL_ADDRESSES) if host in self.pooled else 2):
            return False
        with self.placement_client() as p:
            tree = p.get('/resource_providers', params={
                'in_tree': self.compute_rps[host]}).json()['resource_providers']
        return {d['rp_uuid'] for d in deps} <= {rp['uuid'] for rp in tree}

    def wait_ready(self, timeout=NOVA_START_TIMEOUT, settle=True):
        super().wait_ready(timeout=timeout, settle=settle)

    def stop(self):
        # Nova winds down (a few seconds) while Steward's services stop.
        if self.nova is not None:
            self.nova.request_stop()
        super().stop()
        if self.nova is not None:
            self.nova.stop()

    def logs_tail(self, n=2500):
        nova = self.nova.log()[-n:] if self.nova is not None else ''
        return super().logs_tail(n) + f'\n--- nova\n{nova}'

    # -- views --------------------------------------------------------------------
    def device_rp(self, host, address):
        return next(d['rp_uuid'] for d in self.deployables(host)
                    if d['name'] == f'{host}_{address}')

    def pool_rp(self, host):
        """The one provider of a pooled host's eight functions."""
        (rp,) = {d['rp_uuid'] for d in self.deployables(host)}
        return rp

    def nova_client(self):
        return httpx.Client(base_url=self.nova_url, timeout=120, trust_env=False,
                            headers={'OpenStack-API-Version': COMPUTE_VERSION})


def create_flavor(cloud, name, profile, vcpus=1, ram=512, disk=1):
    """A Nova flavor asking for ``profile``'s accelerators through
    ``accel:device_profile``; its id."""
    with cloud.nova_client() as nova:
        r = nova.post('/flavors', json={'flavor': {
            'name': name, 'vcpus': vcpus, 'ram': ram, 'disk': disk}})
        assert r.status_code == 200, r.text
        flavor_id = r.json()['flavor']['id']
        r = nova.post(f'/flavors/{flavor_id}/os-extra_specs', json={
            'extra_specs': {'accel:device_profile': profile}})
        assert r.status_code == 200, r.text
    return flavor_id


def server(cloud, sid):
    with cloud.nova_client() as nova:
        r = nova.get(f'/servers/{sid}')
    assert r.status_code == 200, r.text
    return r.json()['server']


def wait_server(cloud, sid, status, task_state=None, timeout=120):
    """The server in ``status`` with no task running; an ERROR on the way fails with
    Nova's fault."""
    def settled(s):
        assert s['status'] != 'ERROR' or status == 'ERROR', (s.get('fault'),
                                                             cloud.logs_tail())
        return s['status'] == status and s['OS-EXT-STS:task_state'] == task_state
    return wait_until(lambda: server(cloud, sid), settled, f'server {sid} {status}',
                      timeout=timeout)


def arqs(cloud, instance=None):
    """The ARQs (of ``instance``) as Steward's API lists them at its latest."""
    with cloud.api_client() as api:
        params = {'instance': instance} if instance else {}
        r = api.get('/v2/accelerator_requests', params=params,
                    headers={'OpenStack-API-Version': 'accelerator latest'})
    assert r.status_code == 200, r.text
    return r.json()['arqs']


def allocations(cloud, consumer):
    """{provider: resources} of ``consumer`` in Placement."""
    with cloud.placement_client() as p:
        r = p.get(f'/allocations/{consumer}')
    assert r.status_code == 200, r.text
    return {rp: a['resources'] for rp, a in r.json()['allocations'].items()}


def wait_until(fetch, done, what, timeout=120):
    """``fetch()`` until ``done(value)``; returns the value, fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        assert time.monotonic() < deadline, f'timed out waiting for {what}: {value}'
        time.sleep(0.2)
