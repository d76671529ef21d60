"""Inventory listings at scale, and how fast `steward serve` starts.

Prints, with the machine's size and the date:

* ``GET /v2/devices`` and ``GET /v2/deployables`` p50 with 1, 1 000 and 10 000
  devices (one deployable and two attributes each), through the HTTP API of a
  running `steward serve`, at the default microversion (what Nova and most clients
  send: none) and at ``latest``. The fake driver reports the first device; the
  others are written straight into the stack's database, as other hosts' devices,
  through steward.db's models;
* `steward serve` start to the first ``200`` on ``/v2`` (embedded Placement
  included: serve starts it before the API), median of a few cold starts.

    .venv/bin/python bench/api_scale.py [--sizes 1,1000,10000] [--starts 3]
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.fixtures.stack import free_port  # noqa: E402
from tests.fixtures.stack import running_stack  # noqa: E402

LISTS = ('/v2/devices', '/v2/deployables')
VERSIONS = (('default', {}), ('latest', {'OpenStack-API-Version': 'accelerator latest'}))


def add_devices(state_path, count, start):
    """``count`` more devices (with a deployable and two attributes each) in the
    stack's database, on hosts of their own so the stack's agent leaves them be."""
    import sqlalchemy as sa
    from steward.common import states
    from steward.db import models as m
    engine = sa.create_engine(f'sqlite:///{state_path}/steward.sqlite')
    now = datetime.datetime.utcnow()
    with engine.begin() as conn:
        conn.exec_driver_sql('PRAGMA busy_timeout=30000')
        def next_id(model):
            return conn.execute(sa.select(sa.func.coalesce(sa.func.max(model.id), 0))
                                ).scalar() + 1
        first_device, first_deployable = next_id(m.Device), next_id(m.Deployable)
        devices, deployables, attributes = [], [], []
        for i in range(count):
            n = start + i
            did, dep_id = first_device + i, first_deployable + i
            devices.append({
                'id': did, 'uuid': str(uuid.uuid4()), 'type': 'FPGA', 'vendor': '0x8086',
                'model': 'bench', 'std_board_info': '{"device_id": "0x09c4"}',
                'vendor_board_info': '{}', 'hostname': f'scale-{n // 64}',
                'status': states.DEVICE_STATUS_ENABLED,
                'device_state': states.DEV_AVAILABLE, 'created_at': now})
            deployables.append({
                'id': dep_id, 'uuid': str(uuid.uuid4()),
                'name': f'scale-{n // 64}_fpga_{n}', 'num_accelerators': 4,
                'device_id': did, 'rp_uuid': str(uuid.uuid4()), 'driver_name': 'fake',
                'created_at': now})
            for key, value in (('rc', 'FPGA'), ('trait0', 'CUSTOM_FAKE_DEVICE')):
                attributes.append({'uuid': str(uuid.uuid4()),
                                   'deployable_id': dep_id, 'key': key,
                                   'value': value, 'created_at': now})
        conn.execute(sa.insert(m.Device.__table__), devices)
        conn.execute(sa.insert(m.Deployable.__table__), deployables)
        conn.execute(sa.insert(m.Attribute.__table__), attributes)
    engine.dispose()


def p50(c, path, headers, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = c.get(path, headers=headers)
        times.append(time.perf_counter() - t0)
        r.raise_for_status()
    return statistics.median(times), r.json()


def start_to_first_200():
    """Seconds from spawning `steward serve` (fresh state) to a 200 on /v2."""
    steward = os.path.join(os.path.dirname(sys.executable), 'steward')
    with tempfile.TemporaryDirectory(prefix='steward-start-') as tmp:
        port = free_port()
        conf = os.path.join(tmp, 'steward.conf')
        with open(conf, 'w') as f:
            f.write(f'[DEFAULT]\nstate_path = {tmp}\nhost = start-host\n'
                    f'[api]\nport = {port}\nmetrics_listen = 127.0.0.1:{free_port()}\n'
                    f'[placement]\nembedded_port = {free_port()}\n')
        with open(os.path.join(tmp, 'serve.log'), 'w') as log:
            t0 = time.perf_counter()
            proc = subprocess.Popen([steward, 'serve', '--config-file', conf],
                                    stdout=log, stderr=subprocess.STDOUT)
            try:
                while True:
                    if proc.poll() is not None:
                        raise RuntimeError('steward serve exited; see ' + log.name)
                    try:
                        if httpx.get(f'http://127.0.0.1:{port}/v2',
                                     timeout=1).status_code == 200:
                            return time.perf_counter() - t0
                    except httpx.HTTPError:
                        pass
                    if time.perf_counter() - t0 > 60:
                        raise RuntimeError('steward serve never answered on /v2')
                    time.sleep(0.01)
            finally:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--sizes', default='1,1000,10000')
    ap.add_argument('--starts', type=int, default=3)
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(','))
    rows = []
    with running_stack() as stack, httpx.Client(base_url=stack.url, timeout=60) as c:
        have = len(c.get('/v2/devices').json()['devices'])
        for size in sizes:
            if size > have:
                add_devices(stack.state_path, size - have, have)
                have = size
            # Fewer rounds for the big lists: each is a sizeable answer.
            repeat = 200 if size <= 10 else 40 if size <= 1000 else 15
            for path in LISTS:
                for label, headers in VERSIONS:
                    p50(c, path, headers, 2)                  # warm-up
                    latency, body = p50(c, path, headers, repeat)
                    listed = len(next(iter(body.values())))
                    rows.append((size, path, label, latency, listed))
    starts = [start_to_first_200() for _ in range(args.starts)]

    print(f'machine: {os.cpu_count()} cores; '
          f'{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}')
    for size, path, label, latency, listed in rows:
        print(f'{path:17s} {size:6d} devices ({label:7s}): p50 {latency * 1000:7.1f} ms'
              f'  ({listed} listed)')
    print(f'steward serve start to first 200 on /v2: median '
          f'{statistics.median(starts):.2f} s (of {len(starts)}: '
          f'{", ".join(f"{s:.2f}" for s in starts)})')


if __name__ == '__main__':
    main()
