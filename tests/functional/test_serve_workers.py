"""`steward serve` with [api] workers > 1: API worker processes beside the serve
process, each with its own conductor, on one SQLite database (steward/serve_workers.py).
Real `steward serve` subprocesses; the NVMe test runs the real nvme-cli over the
simulated controller."""
import concurrent.futures
import os
import re
import signal
import time
import uuid

import httpx
import pytest

from tests import stack

LINE_PID = re.compile(r'^\S+ \S+ (\d+) ')


helpers_of = stack.api_workers


def serving_helpers(st, count):
    """The pids of the ``count`` API worker processes of ``st``, once each serves."""
    def ready():
        helpers = helpers_of(st.proc.pid)
        serving = pids_logging(st.log(), 'serving beside steward serve')
        return len(helpers) == count and set(helpers) <= serving and helpers
    return stack.wait_for(ready, f'{count} API worker processes never served')


def pids_logging(log, text):
    """The pids of the processes that logged a line containing ``text``."""
    return {int(m.group(1)) for line in log.splitlines() if text in line
            for m in [LINE_PID.match(line)] if m}


def test_binds_spread_over_the_workers_without_a_double_allocation():
    with stack.running_stack('[api]\nworkers = 3\n') as st:
        helpers = serving_helpers(st, 2)
        with httpx.Client(base_url=st.url, timeout=30) as api:
            [dep] = api.get('/v2/deployables').json()['deployables']
            handles = dep['num_accelerators']
            assert api.post('/v2/device_profiles', json=[{
                'name': 'fpga', 'groups': [{'resources:FPGA': '1'}]}]).status_code == 201
            arqs = [api.post('/v2/accelerator_requests',
                             json={'device_profile_name': 'fpga'}).json()['arqs'][0]['uuid']
                    for _ in range(2 * handles)]

        def bind(arq):
            # A connection of its own each: the kernel hands each to whichever
            # process accepts first, so the binds land on all of them.
            with httpx.Client(base_url=st.url, timeout=30) as api:
                return api.patch('/v2/accelerator_requests', json={arq: [
                    {'op': 'add', 'path': '/hostname', 'value': 'bench-host'},
                    {'op': 'add', 'path': '/device_rp_uuid', 'value': dep['rp_uuid']},
                    {'op': 'add', 'path': '/instance_uuid',
                     'value': str(uuid.uuid4())}]}).status_code

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            codes = list(pool.map(bind, arqs))
        assert codes.count(202) == handles and codes.count(409) == handles, codes
        with httpx.Client(base_url=st.url, timeout=30) as api:
            listed = api.get('/v2/accelerator_requests').json()['arqs']
        bound = [a for a in listed if a['state'] == 'Bound']
        assert len(bound) == handles
        assert len({str(a['attach_handle_info']) for a in bound}) == handles

        # Binds were done by more than one process, the workers among them.
        binders = pids_logging(st.log(), 'BindStarted -> Bound')
        assert len(binders) >= 2 and binders & set(helpers), (binders, helpers)
        # And the metrics the serve process exports count every one of them.
        text = httpx.get(st.metrics_url, timeout=10).text
        counted = re.search(r'^steward_arq_bind_seconds_count\{outcome="bound"\} (\S+)$',
                            text, re.M)
        assert counted and float(counted.group(1)) == handles, text[:2000]


def test_a_worker_that_dies_is_replaced():
    with stack.running_stack('[api]\nworkers = 2\n') as st:
        [helper] = serving_helpers(st, 1)
        os.kill(helper, signal.SIGKILL)
        [new] = stack.wait_for(lambda: [p for p in serving_helpers(st, 1) if p != helper],
                         'no API worker replaced the one killed')
        assert f'API worker process {helper} exited' in st.log()
        for _ in range(20):
            with httpx.Client(base_url=st.url, timeout=10) as api:
                assert api.get('/v2/deployables').status_code == 200
        assert new in helpers_of(st.proc.pid)


def test_a_worker_reaches_the_agent_to_clean_an_nvme_device(tmp_path, monkeypatch):
    """A delete served by an API worker casts cleanup_device to the agent, which
    lives in the serve process, through the relay; the device is cleaned."""
    from tests.nvme_sim import simulation_for_test
    sim = simulation_for_test(tmp_path / 'sim')
    try:
        ctrl = sim.add_controller(namespaces=[16 * 2 ** 20], ces=True,
                                  sanitize_seconds=0.1)
        for key, value in sim.env.items():
            monkeypatch.setenv(key, value)
        conf = (f'[DEFAULT]\nsysfs_root = {sim.sysfs_root}\ndev_root = {sim.dev_root}\n'
                f'[api]\nworkers = 3\n'
                f'[agent]\nenabled_drivers = nvme\n'
                f'[nvme]\nnvme_cli = {sim.nvme_cli}\n'
                f'device_spec = {{"vendor_id": "8086"}}\ncleanup_timeout = 60\n')
        with stack.running_stack(conf) as st:
            helpers = set(serving_helpers(st, 2))
            headers = {'OpenStack-API-Version': 'accelerator 2.5'}
            with httpx.Client(base_url=st.url, timeout=30, headers=headers) as api:
                assert api.post('/v2/device_profiles', json=[{
                    'name': 'nvme',
                    'groups': [{'resources:CUSTOM_NVME_8086_0A54': '1'}]}]).status_code == 201
                [dev] = api.get('/v2/devices').json()['devices']
            # Each cycle's delete goes out on a new connection, which any of the
            # three processes may accept: cycle until a worker has sent a cast.
            for cycle in range(12):
                ctrl.write(2 ** 20, b'TENANT-%d' % cycle * 100)
                inst = stack.bind_instance(st.url, st.placement_url, 'nvme',
                                           'CUSTOM_NVME_8086_0A54', 'bench-host')
                stack.release_instance(st.url, st.placement_url, inst)
                with httpx.Client(base_url=st.url, timeout=30, headers=headers) as api:
                    stack.wait_for(lambda: api.get(f'/v2/devices/{dev["uuid"]}').json()
                             ['device_state'] == 'available', 'never cleaned', timeout=60)
                    records = api.get(f'/v2/devices/{dev["uuid"]}/erase_records').json()
                assert records['erase_records'][0]['status'] == 'succeeded', records
                assert ctrl.find_on_media(b'TENANT-%d' % cycle) == []
                if pids_logging(st.log(), 'cleanup_device cast to the agent') & helpers:
                    break
            else:
                pytest.fail('no API worker ever sent a cleanup (12 deletes)')
    finally:
        sim.close()


def test_workers_refuse_an_in_memory_database(tmp_path):
    """Each worker process would get a database of its own: refused at start."""
    import subprocess
    import sys
    conf = tmp_path / 'steward.conf'
    conf.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = sqlite://\n'
                    f'[api]\nport = {stack.free_port()}\nworkers = 2\n')
    steward = os.path.join(os.path.dirname(sys.executable), 'steward')
    out = subprocess.run([steward, 'serve', '--config-file', str(conf)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out
    assert 'in-memory SQLite' in out.stderr and '[api] workers = 1' in out.stderr
    assert 'Traceback' not in out.stderr
