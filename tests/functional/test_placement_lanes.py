"""The embedded Placement cannot be stalled by a query of allocation candidates:
its configuration file and the defaults that bound such a query
(steward/placement/settings.py), Steward's own lane (steward/placement/embedded.py,
handle.py, unix_http.py), and a query whose client has gone stopping
(steward/placement/candidate_watch.py).

The long query is the one Launchpad bugs 2070257 and 2126751 describe: eight
one-unit groups over a host of eight one-unit providers, under Placement's upstream
defaults (which an operator's file can bring back): 8**8 combinations, minutes of
one core. Each test waits for Placement's own word that it is generating (its
WARNING after candidate_watch.LONG seconds) before it writes, and checks the query
had still not answered when the writes were done.
"""
import os

import httpx
import pytest

from bench.placement_stall import HEADERS, RC, UPSTREAM, RawQuery, query_path, \
    register_host
from steward.common import exception
from steward.conf import CONF
from steward.placement import candidate_watch
from steward.placement import client as client_mod
from steward.placement import handle
from steward.placement import unix_http
from tests.fixtures.stack import bind_instance, children, free_port, \
    release_instance, running_stack, wait_for

pytestmark = pytest.mark.slow
V26 = {'OpenStack-API-Version': 'accelerator 2.6'}

GENERATING = 'has been generating candidates for'
ABANDONED = 'abandoned by its client'


def _read(path):
    with open(path) as f:
        return f.read()


@pytest.fixture
def lifted(tmp_path):
    """An operator's file bringing back Placement's upstream defaults."""
    path = tmp_path / 'placement.conf'
    path.write_text(UPSTREAM)
    return str(path)


@pytest.fixture
def child_of(tmp_path):
    """start(config_file=None): an embedded Placement child with Steward's lane, as
    `steward serve` starts it, and its log's path; stopped at the end."""
    started = []

    def start(config_file=None):
        log = str(tmp_path / f'placement-{len(started)}.log')
        sock = handle.steward_socket_path()
        try:
            child = handle.start_subprocess(
                f'sqlite:///{tmp_path}/placement-{len(started)}.sqlite', '127.0.0.1',
                free_port(), log_file=log, config_file=config_file, steward_socket=sock)
        except BaseException:
            handle.remove_steward_socket(sock)
            raise
        started.append((child, sock))
        return child, log

    yield start
    for child, sock in started:
        child.stop()
        handle.remove_steward_socket(sock)


def test_steward_writes_complete_while_a_query_explodes_and_it_stops_when_abandoned(
        child_of, lifted):
    child, log = child_of(config_file=lifted)
    rp = register_host(child.url, 8)
    lane = client_mod.PlacementClient.from_conf(CONF, endpoint=child.steward_url)
    query = RawQuery(child.url, 8)
    # Placement says it is deep in the product (after LONG seconds of it).
    wait_for(lambda: GENERATING in _read(log), 'the query to run long',
             timeout=candidate_watch.LONG + 120)
    # Steward's writes, each a PUT of the inventory, through its own lane: all
    # answered while the query is still generating.
    for reserved in (1, 0, 2, 3):
        assert lane.set_reserved(rp, RC, reserved) == reserved
    assert lane.get_inventory(rp)[RC]['reserved'] == 3
    assert not query.answered.is_set(), 'the query ended before the writes: no proof'
    assert lane.stats['errors'] == 0
    # None of them went through the TCP port, whose request log lines name the
    # client's address (a Unix socket's client has none).
    writes = [line for line in _read(log).splitlines()
              if f'"PUT /resource_providers/{rp}/inventories/{RC}"' in line]
    assert len(writes) == 4 and not any('127.0.0.1 "PUT' in line for line in writes)
    # The client gives up: Placement stops generating and the thread is free.
    query.abandon()
    wait_for(lambda: ABANDONED in _read(log), 'Placement to stop the abandoned query',
             timeout=60)
    assert 'Traceback' not in _read(log)


def test_the_defaults_bound_the_query_and_a_file_sets_placements_options(
        child_of, tmp_path):
    child, log = child_of()
    register_host(child.url, 8)
    with httpx.Client(base_url=child.url, headers=HEADERS, trust_env=False,
                      timeout=120) as c:
        found = c.get(query_path(8)).json()['allocation_requests']
    # 8! ways to seat the groups; generation stopped at Steward's cap, Nova's limit.
    assert len(found) == 1000
    assert ("Allocation candidates (Steward's defaults): max_allocation_candidates = "
            '1000, allocation_candidates_generation_strategy = breadth-first, '
            'optimize_for_wide_provider_trees = True') in _read(log)

    # An operator's file: Placement's own options apply, Steward's database stays.
    elsewhere = tmp_path / 'elsewhere.sqlite'
    conf = tmp_path / 'operator.conf'
    conf.write_text('[placement]\nmax_allocation_candidates = 7\n'
                    f'[placement_database]\nconnection = sqlite:///{elsewhere}\n')
    child, log = child_of(config_file=str(conf))
    register_host(child.url, 8)
    with httpx.Client(base_url=child.url, headers=HEADERS, trust_env=False,
                      timeout=120) as c:
        assert len(c.get(query_path(8)).json()['allocation_requests']) == 7
    text = _read(log)
    assert f'Allocation candidates ({conf}): max_allocation_candidates = 7' in text
    assert f'{conf} sets [placement_database] connection, which the embedded ' \
           'Placement does not use: [placement] embedded_connection' in text
    assert not elsewhere.exists()


def test_a_value_placement_refuses_stops_the_start_naming_it(tmp_path):
    conf = tmp_path / 'operator.conf'
    conf.write_text('[placement]\nallocation_candidates_generation_strategy = '
                    'sideways\n')
    with pytest.raises(exception.EmbeddedPlacementError) as err:
        handle.start_subprocess(f'sqlite:///{tmp_path}/p.sqlite', '127.0.0.1',
                                free_port(), log_file=str(tmp_path / 'p.log'),
                                config_file=str(conf))
    assert 'allocation_candidates_generation_strategy' in str(err.value)
    assert 'sideways' in str(err.value)


def test_each_worker_accepts_on_its_lanes_listener_only(child_of):
    """Two processes poll the TCP port, one the Unix socket, none both: what the
    TCP port's clients send can never occupy the process Steward writes through.
    (Read from each worker's epoll set in /proc: gthread registers the listeners
    it accepts on there.)"""
    import signal
    child, _log = child_of()
    port = int(child.url.rsplit(':', 1)[1])
    listeners = {_tcp_listener_inode(port): 'tcp',
                 _unix_listener_inode(unix_http.socket_path(child.steward_url)): 'unix'}

    def polling():
        found = {pid: sorted(listeners[i] for i in _polled(pid) if i in listeners)
                 for pid in children(child.pid)}
        return found if len(found) == 3 and all(found.values()) else None

    polled = wait_for(polling, 'three workers polling their listeners')
    assert sorted(polled.values()) == [['tcp'], ['tcp'], ['unix']], polled
    # The lane's worker dies: gunicorn's new one takes its place in that lane.
    [steward_worker] = [pid for pid, found in polled.items() if found == ['unix']]
    os.kill(steward_worker, signal.SIGKILL)
    again = wait_for(lambda: (lambda found: found if found and steward_worker
                              not in found else None)(polling()),
                     'a new worker in place of the killed one')
    assert sorted(again.values()) == [['tcp'], ['tcp'], ['unix']], again
    lane = client_mod.PlacementClient.from_conf(CONF, endpoint=child.steward_url)
    assert lane.list_providers() == []


def test_serve_and_the_child_alone_default_to_the_same_threads():
    from steward.placement import embedded
    assert CONF.placement.embedded_threads == embedded.THREADS


def _polled(pid):
    """Socket inodes in the epoll sets of ``pid``."""
    found = set()
    try:
        fds = os.listdir(f'/proc/{pid}/fd')
    except FileNotFoundError:
        return found
    for fd in fds:
        try:
            if os.readlink(f'/proc/{pid}/fd/{fd}') != 'anon_inode:[eventpoll]':
                continue
            with open(f'/proc/{pid}/fdinfo/{fd}') as f:
                targets = [line.split()[1] for line in f if line.startswith('tfd:')]
        except OSError:
            continue
        for target in targets:
            try:
                link = os.readlink(f'/proc/{pid}/fd/{target}')
            except OSError:
                continue
            if link.startswith('socket:['):
                found.add(int(link[len('socket:['):-1]))
    return found


def _tcp_listener_inode(port):
    with open('/proc/net/tcp') as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(':', 1)[1], 16) == port and fields[3] == '0A':
                return int(fields[9])
    raise AssertionError(f'nothing listens on port {port}')


def _unix_listener_inode(path):
    with open('/proc/net/unix') as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if len(fields) == 8 and fields[7] == path:
                return int(fields[6])
    raise AssertionError(f'nothing listens on {path}')


def test_a_lane_nobody_listens_on_is_placement_unavailable(tmp_path):
    """As a refused port: an outage (503 to the API's callers, the drift repair
    later), not a bug."""
    gone = unix_http.url_for(str(tmp_path / 'gone.sock'))
    lane = client_mod.PlacementClient.from_conf(CONF, endpoint=gone)
    with pytest.raises(exception.PlacementUnavailable, match='gone.sock'):
        lane.list_providers()


def _inventory(url, rp):
    with httpx.Client(base_url=url, headers=HEADERS, trust_env=False, timeout=60) as c:
        [inventory] = c.get(f'/resource_providers/{rp}/inventories').json()[
            'inventories'].values()
    return inventory


def test_serve_binds_and_writes_while_a_query_explodes(lifted):
    """`steward serve` end to end, while a client's query explodes on
    embedded_port: Nova's flow binds and releases (the bind that waited 30 s on
    Placement and went BindFailed), and Steward's own writes (a device taken out of
    service and back: its reservation) answer, through serve's lane."""
    extra = f'[placement]\nembedded_config_file = {lifted}\n'
    with running_stack(extra_conf=extra) as st:
        log = os.path.join(st.state_path, 'placement.log')
        register_host(st.placement_url, 8)
        with httpx.Client(base_url=st.url, timeout=30) as api:
            api.post('/v2/device_profiles', json=[{'name': 'lanes', 'groups': [
                {'resources:FPGA': '1'}]}]).raise_for_status()
        query = RawQuery(st.placement_url, 8)
        wait_for(lambda: GENERATING in _read(log), 'the query to run long',
                 timeout=candidate_watch.LONG + 120)
        inst = bind_instance(st.url, st.placement_url, 'lanes', 'FPGA', 'bench-host')
        release_instance(st.url, st.placement_url, inst)
        # Steward's own writes, each answered once Placement has it: the device out
        # of service is reserved whole, back in service free again.
        with httpx.Client(base_url=st.url, timeout=60, headers=V26) as api:
            [dep] = api.get('/v2/deployables').json()['deployables']
            [dev] = api.get('/v2/devices').json()['devices']
            r = api.post(f'/v2/devices/{dev["uuid"]}/disable')
            assert r.status_code == 200, r.text
            inventory = _inventory(st.placement_url, dep['rp_uuid'])
            assert inventory['reserved'] == inventory['total']
            r = api.post(f'/v2/devices/{dev["uuid"]}/enable')
            assert r.status_code == 200, r.text
            assert _inventory(st.placement_url, dep['rp_uuid'])['reserved'] == 0
        assert not query.answered.is_set(), 'the query ended before the writes: no proof'
        query.abandon()
        wait_for(lambda: ABANDONED in _read(log), 'Placement to stop the query',
                 timeout=60)
        text, placement_log = st.log(), _read(log)
    assert 'BindFailed' not in text and 'Traceback' not in text
    # Every write of the device's provider (its registration, the disable's
    # reservation and the enable's) came through serve's lane, none through the
    # TCP port, whose request log lines name the client's address.
    writes = [line for line in placement_log.splitlines()
              if f'/resource_providers/{dep["rp_uuid"]}' in line and '"PUT' in line]
    assert len(writes) >= 3 and not any('127.0.0.1 "PUT' in line for line in writes), \
        writes
