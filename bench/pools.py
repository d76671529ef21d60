"""Whole accelerator hosts in the real Placement: what ``GET /allocation_candidates``
costs, as Nova 34 sends it, for 1 to 8 GPUs of a host, with a pool of eight
identical GPUs per host against one provider per GPU (issue 52).

Starts the real Placement (steward/placement/embedded.py, 2 gunicorn workers,
Steward's embedded configuration as this tree has it: the options it runs with are
printed from its log) on a throw-away PostgreSQL database, and builds the fleet
through Placement's REST API, untimed, eight client sessions at once: each host is
a compute-node root provider as Nova's resource tracker creates it (a uuid of its
own, VCPU / MEMORY_MB / DISK_GB inventory, COMPUTE_ACCELERATORS, OWNER_NOVA and a
libvirt host's capability traits) and

* pool model (``[pci] device_spec`` tagged ``"pool": true``, doc/drivers/pci.md):
  one child ``<host>_PGPU_numa0_<digest>``, PGPU total = max_unit = 8, OWNER_CYBORG;
* per-device model (an untagged entry): eight children ``<host>_0000:xx:00.0``,
  PGPU total 1 each, OWNER_CYBORG.

Providers and their traits are created one request each (Placement has no bulk
create); the inventories go in ``POST /reshaper`` calls of about 128 providers.

Then, at each fleet size of ``--hosts`` (the same fleet grows between them), it
times the request Nova 34's scheduler sends (nova/scheduler/client/report.py
``get_allocation_candidates``: microversion 1.36, ``ResourceRequest.to_querystring``,
checked against the nova 34.0.0 wheel) for a flavor of 16 vCPUs, 128 GiB and 40 GB
whose ``accel:device_profile`` asks for

* one group of 1, 2, 4 or 8 PGPU (``{"resources:PGPU": "8"}``), and
* eight groups of one PGPU with ``group_policy=none``,

that is ``limit=1000`` ([scheduler] max_placement_results), ``resources=DISK_GB:40,
MEMORY_MB:131072,VCPU:16``, ``resourcesdevice_profile_<N>=PGPU:<k>`` (Nova's
requester id ``device_profile_<N>`` is the group's suffix, as it is), and
``root_required=COMPUTE_ACCELERATORS,OWNER_NOVA,!COMPUTE_STATUS_DISABLED``
(its accelerators, owner and compute-status pre-filters). Nova adds a required
trait to a profile group only for the profile's ``trait:`` keys, and Steward's
profiles name CUSTOM_ traits only: ``--require-owner-cyborg`` adds
``requireddevice_profile_<N>=OWNER_CYBORG`` to every group anyway.

Each request is sent ``--repeat`` times, the five kinds in turn (round-robin, one
of each first as warm-up, untimed), one at a time over a kept-alive connection.
Printed per cell: p50 and p99 of the wall time (client side), the CPU Placement's
processes and PostgreSQL's spent per request on average (/proc; the wall time on
a loaded machine is mostly waiting for a core), the candidates returned; then a
table of every cell side by side, the ratio 8 GPUs / 1 GPU at each fleet size
(target <= 1.5x) and the highest p99 at 1 000 hosts (target <= 500 ms).

Side by side in the same run, once the pools are measured and their Placement
stopped: the per-device model at ``--per-device-hosts`` on a second database, the
same requests, each bounded by ``--per-device-timeout`` (printed "> timeout";
Placement goes on computing an abandoned request, so its Placement is restarted
after one, the workers killed), with the pools' Placement configuration and, where
this tree's embedded Placement reads a configuration file, with Placement 16.0.0's
own defaults (no ``max_allocation_candidates``, depth-first, no
``optimize_for_wide_provider_trees``: how issue 52 measured > 120 s for eight
one-unit groups on one host). A per-device cell stops repeating once it has spent
``--per-device-budget`` seconds; a request that timed out at one size is not sent
at the larger ones.

    .venv/bin/python bench/pools.py [--hosts 1,100,1000,10000] [--repeat 20]
        [--per-device-hosts 1,100,1000] [--per-device-timeout 120]
        [--per-device-budget 30] [--require-owner-cyborg] [--placement-config FILE]
        [--quick] [--keep]

``--quick``: 1 and 10 hosts, 3 repetitions, per-device at 1 host with a 5 s
timeout (tests/functional/test_bench_pools.py). The full run (10 000 hosts) takes
about half an hour on two cores, most of it building the fleet.
"""
import argparse
import concurrent.futures
import inspect
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import load  # noqa: E402
from steward.conductor.report import providers  # noqa: E402
from steward.drivers import pools  # noqa: E402
from tests.multihost import pg  # noqa: E402
from tests.multihost import rabbit  # noqa: E402

# What nova-scheduler sends GET /allocation_candidates at (nova 34.0.0,
# nova/scheduler/client/report.py: version = SAME_SUBTREE_VERSION).
NOVA_MICROVERSION = '1.36'
# [scheduler] max_placement_results, Nova's default: the `limit` it sends.
LIMIT = 1000
# The service role: POST /reshaper needs it (bench/placement_requests.py).
WRITE_HEADERS = {'X-Auth-Token': 'admin', 'X-Roles': 'admin,service',
                 'OpenStack-API-Version': 'placement 1.39'}
READ_HEADERS = {'X-Auth-Token': 'admin',
                'OpenStack-API-Version': 'placement ' + NOVA_MICROVERSION}
RC = 'PGPU'
GPUS = 8                # identical functions per host, on one NUMA node
SESSIONS = 8            # client sessions registering the fleet at once
RESHAPE = 128           # providers per POST /reshaper
# The flavor: the same for every request, so that only the GPUs differ.
FLAVOR = {'VCPU': 16, 'MEMORY_MB': 131072, 'DISK_GB': 40}
# Nova's pre-filters for such a flavor (nova/scheduler/request_filter.py:
# accelerators_filter, owner_nova_filter once every compute is new enough,
# compute_status_filter always).
ROOT_REQUIRED = ['COMPUTE_ACCELERATORS', 'OWNER_NOVA']
ROOT_FORBIDDEN = ['COMPUTE_STATUS_DISABLED']
# A compute node as nova-compute's resource tracker registers an eight-GPU server
# (libvirt driver; reserved_host_memory_mb 512; initial_cpu_allocation_ratio 4.0).
ROOT_INVENTORY = {
    'VCPU': {'total': 192, 'reserved': 0, 'min_unit': 1, 'max_unit': 192,
             'step_size': 1, 'allocation_ratio': 4.0},
    'MEMORY_MB': {'total': 2063360, 'reserved': 512, 'min_unit': 1,
                  'max_unit': 2063360, 'step_size': 1, 'allocation_ratio': 1.0},
    'DISK_GB': {'total': 7000, 'reserved': 0, 'min_unit': 1, 'max_unit': 7000,
                'step_size': 1, 'allocation_ratio': 1.0}}
# Some of the capability traits the libvirt driver reports on its compute node.
ROOT_TRAITS = ROOT_REQUIRED + [
    'COMPUTE_NODE', 'COMPUTE_ARCH_X86_64', 'COMPUTE_DEVICE_TAGGING',
    'COMPUTE_TRUSTED_CERTS', 'COMPUTE_RESCUE_BFV', 'COMPUTE_SAME_HOST_COLD_MIGRATE',
    'COMPUTE_SOCKET_PCI_NUMA_AFFINITY', 'COMPUTE_MANAGED_PCI_DEVICE',
    'COMPUTE_NET_ATTACH_INTERFACE', 'COMPUTE_NET_ATTACH_INTERFACE_WITH_TAG',
    'COMPUTE_NET_VIF_MODEL_VIRTIO', 'COMPUTE_NET_VIRTIO_PACKED',
    'COMPUTE_VOLUME_ATTACH_WITH_TAG', 'COMPUTE_VOLUME_EXTEND',
    'COMPUTE_VOLUME_MULTI_ATTACH', 'COMPUTE_STORAGE_BUS_VIRTIO',
    'COMPUTE_STORAGE_BUS_SCSI', 'COMPUTE_IMAGE_TYPE_RAW', 'COMPUTE_IMAGE_TYPE_QCOW2',
    'COMPUTE_IMAGE_TYPE_ISO', 'COMPUTE_GRAPHICS_MODEL_VGA',
    'COMPUTE_GRAPHICS_MODEL_VIRTIO', 'COMPUTE_FIRMWARE_UEFI',
    'COMPUTE_SECURITY_UEFI_SECURE_BOOT', 'COMPUTE_SECURITY_TPM_2_0',
    'HW_CPU_X86_AVX2', 'HW_CPU_X86_AVX512F', 'HW_CPU_X86_AESNI', 'HW_CPU_X86_SSE42',
    'HW_CPU_X86_FMA3', 'HW_CPU_HYPERTHREADING']
DEVICE_TRAITS = ['OWNER_CYBORG']
# What makes the pool's provider name (doc/drivers/pci.md): the matching keys and
# traits of the entry {"vendor_id": "10de", "product_id": "2330", "pool": true}.
POOL_KEY = [{'product_id': '2330', 'vendor_id': '10de'}, []]


# Placement 16.0.0's own defaults for what bounds a request of allocation
# candidates (the measurements ran with them): no cap, depth-first, no
# pruning of wide trees.
UPSTREAM_DEFAULTS = """[placement]
max_allocation_candidates = -1
allocation_candidates_generation_strategy = depth-first
[workarounds]
optimize_for_wide_provider_trees = false
"""


# -- the requests ---------------------------------------------------------------------
class Request:
    """One kind of GET /allocation_candidates: ``groups`` the PGPU amount of each
    device-profile group."""

    def __init__(self, label, groups, owner_cyborg=False):
        self.label = label
        self.groups = groups
        self.query = nova_query(groups, owner_cyborg)

    def expected(self, hosts, model):
        """Candidates Placement should return (before any cap of its own)."""
        if model == 'pool':
            per_host = 1 if sum(self.groups) <= GPUS else 0
        elif len(self.groups) == 1:
            per_host = GPUS if self.groups[0] == 1 else 0
        else:                   # distinct one-unit providers, in every order
            per_host = 1
            for i in range(len(self.groups)):
                per_host *= GPUS - i
        return min(LIMIT, hosts * per_host)


def nova_query(groups, owner_cyborg=False):
    """The query string nova-scheduler sends (ResourceRequest.to_querystring of
    nova 34.0.0: every parameter sorted, then urlencoded) for FLAVOR and a device
    profile of ``groups``."""
    params = [('limit', LIMIT)]
    if len(groups) > 1:
        # More than one numbered group needs a policy; eight one-unit groups that
        # may share a provider (a pool) is `none`.
        params.append(('group_policy', 'none'))
    params.append(('root_required', ','.join(
        sorted(ROOT_REQUIRED) + ['!' + t for t in sorted(ROOT_FORBIDDEN)])))
    params.append(('resources', ','.join(f'{rc}:{n}' for rc, n in sorted(FLAVOR.items()))))
    for index, amount in enumerate(groups):
        # nova/accelerator/cyborg.py get_device_profile_group_requester_id: the
        # requester id is the Placement suffix.
        suffix = f'device_profile_{index}'
        params.append(('resources' + suffix, f'{RC}:{amount}'))
        if owner_cyborg:
            params.append(('required' + suffix, 'OWNER_CYBORG'))
    return urllib.parse.urlencode(sorted(params))


def requests(owner_cyborg):
    return [Request('1 GPU', [1], owner_cyborg), Request('2 GPUs', [2], owner_cyborg),
            Request('4 GPUs', [4], owner_cyborg), Request('8 GPUs', [8], owner_cyborg),
            Request('8 x 1 GPU', [1] * GPUS, owner_cyborg)]


# -- the fleet ------------------------------------------------------------------------
class Fleet:
    """Hosts registered in one Placement as Nova and Steward register them."""

    def __init__(self, model, url):
        self.model = model
        self.url = url
        self.hosts = 0
        self.providers = 0
        self._local = threading.local()

    def _session(self):
        import httpx
        s = getattr(self._local, 'session', None)
        if s is None:
            s = self._local.session = httpx.Client(
                base_url=self.url, trust_env=False, timeout=300, headers=WRITE_HEADERS)
        return s

    def _call(self, method, path, body, ok=(200, 201, 204)):
        r = self._session().request(method, path, json=body)
        if r.status_code not in ok:
            raise RuntimeError(f'{method} {path}: {r.status_code} {r.text[:500]}')
        return r

    def _devices(self, host):
        """[(name, inventory)] of a host's device providers."""
        if self.model == 'pool':
            return [(pools.pool_name(host, RC, 0, POOL_KEY),
                     {RC: {'total': GPUS, 'reserved': 0, 'min_unit': 1,
                           'max_unit': GPUS, 'step_size': 1, 'allocation_ratio': 1.0}})]
        return [(f'{host}_0000:{0x1b + 0x10 * i:02x}:00.0',
                 {RC: {'total': 1, 'reserved': 0, 'min_unit': 1, 'max_unit': 1,
                       'step_size': 1, 'allocation_ratio': 1.0}})
                for i in range(GPUS)]

    def _create_host(self, host):
        """The host's providers and their traits; [(uuid, inventory)]."""
        root = str(uuid.uuid4())
        self._call('POST', '/resource_providers', {'name': host, 'uuid': root})
        self._call('PUT', f'/resource_providers/{root}/traits',
                   {'resource_provider_generation': 0, 'traits': ROOT_TRAITS})
        out = [(root, ROOT_INVENTORY)]
        for name, inventory in self._devices(host):
            rp = providers.rp_uuid_for(name)
            self._call('POST', '/resource_providers',
                       {'name': name, 'uuid': rp, 'parent_provider_uuid': root})
            self._call('PUT', f'/resource_providers/{rp}/traits',
                       {'resource_provider_generation': 0, 'traits': DEVICE_TRAITS})
            out.append((rp, inventory))
        return out

    def _reshape(self, chunk):
        self._call('POST', '/reshaper', {'allocations': {}, 'inventories': {
            rp: {'resource_provider_generation': 1, 'inventories': inventory}
            for rp, inventory in chunk}})

    def grow(self, hosts):
        """Register hosts up to ``hosts`` in all; returns the seconds it took."""
        started = time.monotonic()
        names = [f'{self.model}-{i:05d}' for i in range(self.hosts, hosts)]
        with concurrent.futures.ThreadPoolExecutor(SESSIONS) as pool:
            created = [p for host in pool.map(self._create_host, names) for p in host]
            chunks = [created[i:i + RESHAPE] for i in range(0, len(created), RESHAPE)]
            list(pool.map(self._reshape, chunks))
        self.hosts = hosts
        self.providers += len(created)
        return time.monotonic() - started


# -- Placement ------------------------------------------------------------------------
def descendants(pid):
    out, todo = [], [pid]
    while todo:
        try:
            with open(f'/proc/{todo[0]}/task/{todo[0]}/children') as f:
                found = [int(p) for p in f.read().split()]
        except OSError:
            found = []
        todo = todo[1:] + found
        out += found
    return out


class Placement:
    """The embedded Placement in a child process on database ``db``, with
    Placement's options from ``config_file`` (None: the tree's defaults)."""

    def __init__(self, srv, db, log_file, config_file=None):
        self.db = db
        with open(os.path.join(srv.datadir, 'postmaster.pid')) as f:
            self.postmaster = int(f.readline())
        self.log_file = log_file
        self.config_file = config_file
        self.port = rabbit.free_port()
        self.proc = None
        self.start()

    def start(self):
        from steward.placement import handle
        kwargs = {'log_file': self.log_file}
        if self.config_file:
            kwargs['config_file'] = self.config_file
        self.proc = handle.start_subprocess(self.db, '127.0.0.1', self.port, **kwargs)
        self.url = self.proc.url

    def stop(self):
        """Stop it, and kill any worker still computing an abandoned request."""
        if self.proc is None:
            return
        workers = descendants(self.proc.pid)
        self.proc.stop()
        self.proc = None
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def restart(self):
        self.stop()
        self.start()

    def cpu(self):
        """(Placement's CPU seconds, PostgreSQL's): its processes', and those of
        the cluster (the benchmark's own, tests/fixtures/pg_fixture.py)."""
        return load.tree_cpu(self.proc.pid), load.tree_cpu(self.postmaster)

    def settings(self):
        """What the embedded Placement logged about its allocation candidates."""
        try:
            with open(self.log_file, errors='replace') as f:
                lines = [line.strip() for line in f if 'max_allocation_candidates' in line]
        except OSError:
            lines = []
        if lines:
            return lines[-1].split('Allocation candidates', 1)[-1].strip(' :')
        return ("none logged (this tree's embedded Placement logs no "
                'max_allocation_candidates: upstream defaults)')


# -- measuring ------------------------------------------------------------------------
class Cell:
    """What one request kind cost at one fleet size."""

    def __init__(self, model, hosts, request):
        self.model, self.hosts, self.request = model, hosts, request
        self.walls, self.cpus, self.db_cpus = [], [], []
        self.candidates = None
        self.timed_out = None           # the timeout, when one request hit it
        self.skipped = None             # why it was not sent

    def p(self, pct, values=None):
        values = self.walls if values is None else values
        return load.pct(values, pct) if values else None

    @property
    def p50(self):
        return self.p(50)

    @property
    def p99(self):
        return self.p(99)

    def short(self):
        """'p50 / p99' for the side-by-side table."""
        if self.skipped:
            return 'not sent'
        if self.timed_out and not self.walls:
            return f'> {self.timed_out:g} s'
        text = f'{fmt(self.p50)} / {fmt(self.p99)}'
        return text + (f' (1 of {len(self.walls) + 1} > {self.timed_out:g} s)'
                       if self.timed_out else '')


def mean(values):
    return sum(values) / len(values)


def thousands(n):
    return f'{n:,}'.replace(',', ' ')


def fmt(seconds):
    if seconds is None:
        return '-'
    if seconds >= 10:
        return f'{seconds:.1f} s'
    if seconds >= 1:
        return f'{seconds:.2f} s'
    return f'{seconds * 1000:.1f} ms'


class Timeout(Exception):
    pass


def send(client, placement, request, timeout):
    """(wall seconds, Placement CPU seconds, candidates) of one request."""
    import httpx
    cpu0 = placement.cpu()
    started = time.perf_counter()
    try:
        r = client.get('/allocation_candidates?' + request.query, timeout=timeout)
    except httpx.TimeoutException:
        raise Timeout() from None
    wall = time.perf_counter() - started
    cpu1 = placement.cpu()
    if r.status_code != 200:
        sys.exit(f'{request.label}: {r.status_code} {r.text[:1000]}')
    body = r.json()
    found = body['allocation_requests']
    for candidate in found[:1]:
        # The mappings Nova reads (rg_rp_map): one key per device-profile group.
        keys = {f'device_profile_{i}' for i in range(len(request.groups))}
        if not keys <= set(candidate['mappings']):
            sys.exit(f'{request.label}: mappings {candidate["mappings"]} lack {keys}')
    return wall, (cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]), len(found)


def read_client(url):
    import httpx
    return httpx.Client(base_url=url, trust_env=False, headers=READ_HEADERS,
                        timeout=600)


def measure_pools(placement, hosts, kinds, repeat):
    """The cells of one fleet size: every kind in turn, ``repeat`` rounds."""
    cells = [Cell('pool', hosts, kind) for kind in kinds]
    with read_client(placement.url) as client:
        for cell in cells:                  # warm-up, untimed
            cell.candidates = send(client, placement, cell.request, 600)[2]
        for _ in range(repeat):
            for cell in cells:
                wall, cpu, _found = send(client, placement, cell.request, 600)
                cell.walls.append(wall)
                cell.cpus.append(cpu[0])
                cell.db_cpus.append(cpu[1])
    return cells


def measure_devices(placement, model, hosts, kinds, repeat, timeout, budget, previous):
    """The per-device cells of one fleet size, each kind ``repeat`` times in a
    row (cheapest first), within ``timeout`` a request and ``budget`` a cell."""
    cells = []
    client = read_client(placement.url)
    try:
        for kind in kinds:
            cell = Cell(model, hosts, kind)
            cells.append(cell)
            before = previous.get(kind.label)
            if before is not None and before.timed_out and not before.walls:
                cell.skipped = f'> {before.timed_out:g} s at {before.hosts} hosts'
                continue
            spent = 0.0
            for _ in range(repeat):
                try:
                    wall, cpu, found = send(client, placement, kind, timeout)
                except Timeout:
                    cell.timed_out = timeout
                    # Placement goes on with it: a fresh one for what follows.
                    client.close()
                    placement.restart()
                    client = read_client(placement.url)
                    break
                cell.walls.append(wall)
                cell.cpus.append(cpu[0])
                cell.db_cpus.append(cpu[1])
                cell.candidates = found
                spent += wall
                if spent > budget:
                    break
    finally:
        client.close()
    return cells


# -- printing -------------------------------------------------------------------------
def print_cells(cells):
    for cell in cells:
        if cell.skipped:
            what = f'not sent ({cell.skipped})'
        elif not cell.walls:
            what = f'> {cell.timed_out:g} s (client timeout; no answer)'
        else:
            what = (f'p50 {fmt(cell.p50)}, p99 {fmt(cell.p99)} over {len(cell.walls)}, '
                    f'CPU on average: Placement {fmt(mean(cell.cpus))}, PostgreSQL '
                    f'{fmt(mean(cell.db_cpus))}; '
                    f'{cell.candidates} candidates')
            expected = cell.request.expected(cell.hosts, cell.model)
            if cell.candidates != expected:
                what += f' (expected {expected})'
            if cell.timed_out:
                what += f'; then one > {cell.timed_out:g} s'
        print(f'  {cell.model:19} {cell.hosts:>6} hosts  {cell.request.label:10} {what}',
              flush=True)


def ratio(cells, pct):
    by = {c.request.label: c for c in cells}
    one, eight = by['1 GPU'].p(pct), by['8 GPUs'].p(pct)
    return eight / one if one and eight is not None else None


def print_table(all_cells, columns, labels, kinds):
    """The side-by-side table: a row per request, a column per (model, hosts)."""
    cells = {(c.model, c.hosts, c.request.label): c for c in all_cells}
    print()
    print('GET /allocation_candidates as Nova 34 sends it (limit=1000), wall time '
          'p50 / p99 (client side, one request at a time):')
    print()
    print('| request | ' + ' | '.join(
        f'{labels[m]}, {thousands(n)} host{"s" if n > 1 else ""}' for m, n in columns)
        + ' |')
    print('|---' * (len(columns) + 1) + '|')
    for kind in kinds:
        row = []
        for m, n in columns:
            cell = cells.get((m, n, kind.label))
            row.append(cell.short() if cell else '')
        print(f'| {kind.label} | ' + ' | '.join(row) + ' |')
    row = []
    for m, n in columns:
        size_cells = [c for c in all_cells if c.model == m and c.hosts == n]
        eight = cells.get((m, n, '8 GPUs'))
        r50, r99 = ratio(size_cells, 50), ratio(size_cells, 99)
        if eight is not None and eight.candidates == 0:
            row.append('- (no candidate for 8)')
        else:
            row.append(f'{r50:.2f}x / {r99:.2f}x' if r50 and r99 else '-')
    print('| 8 GPUs / 1 GPU (p50 / p99) | ' + ' | '.join(row) + ' |')
    row = []
    for m, n in columns:
        found = [cells.get((m, n, k.label)) for k in kinds]
        row.append(' / '.join('-' if c is None or c.candidates is None else
                              str(c.candidates) for c in found))
    print('| candidates (each request) | ' + ' | '.join(row) + ' |')
    sizes = [n for m, n in columns if m == 'pool']
    pool_cells = [c for c in all_cells if c.model == 'pool']
    print()
    for n in sizes:
        size_cells = [c for c in pool_cells if c.hosts == n]
        r = ratio(size_cells, 50)
        print(f'pools, {n} hosts: 8 GPUs cost {r:.2f}x what 1 GPU costs (p50; target '
              f'<= 1.5x: {"met" if r <= 1.5 else "NOT met"})')
    at_1000 = [c for c in pool_cells if c.hosts == 1000]
    if at_1000:
        worst = max(at_1000, key=lambda c: c.p99)
        print(f'pools, 1000 hosts: highest p99 {fmt(worst.p99)} ({worst.request.label}; '
              f'target <= 500 ms: {"met" if worst.p99 <= 0.5 else "NOT met"})')


def git_tree():
    def git(*args):
        out = subprocess.run(['git', *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip()
    commit = git('rev-parse', '--short', 'HEAD') or 'unknown'
    dirty = git('status', '--porcelain', '--', 'steward')
    return commit + (' with uncommitted changes under steward/' if dirty else '')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hosts', default='1,100,1000,10000',
                        help='fleet sizes of the pool model, ascending (the fleet grows)')
    parser.add_argument('--repeat', type=int, default=20,
                        help='timed requests of each kind at each size')
    parser.add_argument('--per-device-hosts', default='1,100,1000',
                        help='fleet sizes of the per-device model (empty: none)')
    parser.add_argument('--per-device-timeout', type=float, default=120,
                        help='client timeout of one per-device request, seconds')
    parser.add_argument('--per-device-budget', type=float, default=30,
                        help='seconds after which a per-device cell stops repeating')
    parser.add_argument('--require-owner-cyborg', action='store_true',
                        help='add requireddevice_profile_<N>=OWNER_CYBORG to each '
                             'group (Nova 34 sends it only for a profile trait)')
    parser.add_argument('--placement-config', metavar='FILE',
                        help="Placement's own options (placement.conf style), where "
                             "this tree's embedded Placement reads them")
    parser.add_argument('--quick', action='store_true',
                        help='1 and 10 hosts, 3 repetitions, per-device at 1 host '
                             'with a 5 s timeout: a check that it runs')
    parser.add_argument('--keep', action='store_true',
                        help="keep Placement's logs and print where")
    args = parser.parse_args()
    if args.quick:
        args.hosts, args.repeat, args.per_device_hosts = '1,10', 3, '1'
        if '--per-device-timeout' not in sys.argv:
            args.per_device_timeout = 5
    sizes = [int(n) for n in args.hosts.split(',') if n.strip()]
    device_sizes = [int(n) for n in args.per_device_hosts.split(',') if n.strip()]
    if sizes != sorted(set(sizes)) or device_sizes != sorted(set(device_sizes)) or \
            min(sizes + device_sizes, default=1) < 1:
        parser.error('fleet sizes are positive and ascending')
    from steward.placement import handle
    if args.placement_config:
        if 'config_file' not in inspect.signature(handle.start_subprocess).parameters:
            parser.error("this tree's embedded Placement reads no configuration file")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    srv = pg.server()
    if srv is None:
        sys.exit('PostgreSQL is not installed (tools/system-packages.sh)')
    kinds = requests(args.require_owner_cyborg)
    tmp = tempfile.mkdtemp(prefix='steward-pools-')
    placement = None
    try:
        print(f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, tree {git_tree()}, '
              f'{os.cpu_count()} cores, load average {load.load_average()}', flush=True)
        placement = Placement(srv, pg.create_database(srv, prefix='placement_pools')[1],
                              os.path.join(tmp, 'pools.log'), args.placement_config)
        print(f'Placement (2 workers, PostgreSQL): {placement.settings()}')
        print(f'requests (microversion {NOVA_MICROVERSION}), flavor '
              f'{", ".join(f"{rc}:{n}" for rc, n in FLAVOR.items())}:')
        for kind in kinds:
            print(f'  {kind.label:10} GET /allocation_candidates?{kind.query}')
        fleet = Fleet('pool', placement.url)
        pool_cells = []
        print(f'pool model: one provider per host, {RC} total {GPUS}, max_unit {GPUS}',
              flush=True)
        for n in sizes:
            seconds = fleet.grow(n)
            print(f' {n} hosts ({fleet.providers} providers; {seconds:.1f} s to register '
                  f'the new ones, untimed), load average {load.load_average()}',
                  flush=True)
            cells = measure_pools(placement, n, kinds, args.repeat)
            print_cells(cells)
            pool_cells += cells
        placement.stop()
        placement = None

        # The per-device model: under the same configuration as the pools and,
        # where this tree's embedded Placement reads one, under Placement 16's
        # own defaults, as the issue measured it.
        configs = [('per-device', args.placement_config)]
        labels = {'pool': 'pool', 'per-device': 'per device'}
        if device_sizes and 'config_file' in inspect.signature(
                handle.start_subprocess).parameters:
            upstream = os.path.join(tmp, 'placement-upstream.conf')
            with open(upstream, 'w') as f:
                f.write(UPSTREAM_DEFAULTS)
            configs.append(('per-device-upstream', upstream))
            labels['per-device-upstream'] = 'per device, Placement 16 defaults'
        device_cells = []
        if device_sizes:
            placement = Placement(srv, pg.create_database(srv, prefix='placement_devices')[1],
                                  os.path.join(tmp, 'devices.log'), configs[0][1])
            fleet = Fleet('device', placement.url)
            print(f'per-device model: {GPUS} providers per host, {RC} total 1 each; '
                  f'client timeout {args.per_device_timeout:g} s', flush=True)
            previous = {model: {} for model, _ in configs}
            for n in device_sizes:
                seconds = fleet.grow(n)
                print(f' {n} hosts ({fleet.providers} providers; {seconds:.1f} s to '
                      f'register, untimed), load average {load.load_average()}',
                      flush=True)
                for model, config in configs:
                    if placement.config_file != config:
                        placement.config_file = config
                        placement.restart()
                    print(f' {labels[model]}: {placement.settings()}', flush=True)
                    cells = measure_devices(placement, model, n, kinds, args.repeat,
                                            args.per_device_timeout,
                                            args.per_device_budget, previous[model])
                    print_cells(cells)
                    # A request that timed out stays unsent at every larger size.
                    previous[model].update(
                        {c.request.label: c for c in cells if not c.skipped})
                    device_cells += cells
        columns = [('pool', n) for n in sizes] + [
            (model, n) for model, _ in configs for n in device_sizes]
        print_table(pool_cells + device_cells, columns, labels, kinds)
        print(f'load average at the end {load.load_average()}')
    finally:
        if placement is not None:
            placement.stop()
        if args.keep:
            print(f'logs kept in {tmp}')
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
