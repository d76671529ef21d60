"""RabbitMQ down: a boot and a delete go on (the API runs the accelerator
requests' operations itself, on the database), what needs a conductor (a
device's enable or disable, its cleaning) answers 503 within [DEFAULT]
rpc_unavailable_timeout and is never done behind the caller's back, reads keep
working, everything recovers by itself when the broker returns; a lost bind race
is a 409 and one INFO line, never a traceback (doc/multihost.md)."""
import time
import uuid

from tests.multihost import flows

# The cluster's API runs the default [DEFAULT] rpc_unavailable_timeout, 10 s (with
# its rabbit_interval_max = 4: two reconnection attempts, about 6 s of waiting).
BOUND = 10.0
MARGIN = 8.0


def _arq_uuids(cluster):
    with cluster.api_client() as api:
        r = api.get('/v2/accelerator_requests')
        assert r.status_code == 200, r.text
        return {a['uuid']: a['state'] for a in r.json()['arqs']}


def _timed(call):
    started = time.monotonic()
    r = call()
    return r, time.monotonic() - started


def _unavailable(r, took):
    assert r.status_code == 503, r.text
    assert r.json()['error_code'] == 'cyb.service.unavailable', r.text
    assert 'Traceback' not in r.text
    assert took < BOUND + MARGIN, f'answered after {took:.1f} s'


def _wait_consuming(cluster):
    queues = ['steward-conductor'] + [f'steward-agent.{h}' for h in cluster.hosts]
    expected = [len(cluster.conductors)] + [1] * len(cluster.hosts)
    cluster.wait_for(lambda: [cluster.rabbit.consumers(q) for q in queues] == expected,
                     'every service consuming again', timeout=120)


def test_broker_down_503_nothing_behind_the_callers_back_and_recovery(healthy):
    cluster = healthy
    host = cluster.hosts[0]
    rp = cluster.pci_rp(host)
    with cluster.api_client(timeout=120) as api:
        flows.ensure_profile(api)
        r = api.post('/v2/accelerator_requests',
                     json={'device_profile_name': flows.PCI_PROFILE})
        assert r.status_code == 201, r.text
        waiting = r.json()['arqs']
        before = _arq_uuids(cluster)
        instance = str(uuid.uuid4())

        device = next(iter(cluster.db_view(host)[0]))
        cluster.rabbit.stop()
        try:
            # Reads are the API's own.
            for path in ('/v2/devices', '/v2/deployables', '/v2/device_profiles',
                         '/v2/accelerator_requests'):
                r, took = _timed(lambda path=path: api.get(path))
                assert r.status_code == 200 and took < 5, (path, r.status_code, took)
            # So are the accelerator requests: a boot and a delete need no broker.
            outage_instance, _ = flows.boot(cluster, api, host, rp)
            flows.delete(cluster, api, outage_instance)
            # What needs a conductor answers 503, and is not done later.
            _unavailable(*_timed(lambda: api.post(f'/v2/devices/{device}/disable')))
            # An API started while the broker is down (its reply queue cannot be
            # opened yet) answers the same, instead of hanging on its first call.
            cluster.api.restart()
            cluster.wait_for(cluster.api_answers, 'the API answering again')
            for _ in range(2):      # whichever worker answers
                _unavailable(*_timed(lambda: api.post(f'/v2/devices/{device}/disable')))
            r = api.post('/v2/accelerator_requests',
                         json={'device_profile_name': flows.PCI_PROFILE})
            assert r.status_code == 201, r.text
            api.delete('/v2/accelerator_requests', params={'arqs': r.json()['arqs'][0]['uuid']})
        finally:
            cluster.rabbit.start()
        _wait_consuming(cluster)
        # Give anything queued behind the outage the time to arrive: it must not.
        time.sleep(5)
        assert _arq_uuids(cluster) == before
        r = api.get(f'/v2/devices/{device}',
                    headers={'OpenStack-API-Version': 'accelerator latest'})
        assert r.status_code == 200 and r.json()['status'] == 'enabled', r.text
        # Recovered without a restart of the conductors or agents.
        flows.claim(cluster, host, instance, rp)
        r = api.patch('/v2/accelerator_requests',
                      json=flows.bind_body(waiting, host, rp, instance))
        assert r.status_code == 202, r.text
        flows.delete(cluster, api, instance)
    flows.boot_delete_cycle(cluster, cluster.hosts[1])
    assert flows.transient(cluster) == ([], [])


def test_a_lost_bind_race_is_one_info_line_not_a_traceback(healthy):
    cluster = healthy
    host = cluster.hosts[2]
    rp = cluster.pci_rp(host)
    offsets = [c.log_size() for c in cluster.conductors]
    api_offset = cluster.api.log_size()
    with cluster.api_client() as api:
        flows.ensure_profile(api)
        instance, _ = flows.boot(cluster, api, host, rp)
        try:
            # A second instance on the same single-function device: the scheduler
            # would not do it, a race between two binds does.
            other = api.post('/v2/accelerator_requests',
                             json={'device_profile_name': flows.PCI_PROFILE}).json()['arqs']
            r = api.patch('/v2/accelerator_requests',
                          json=flows.bind_body(other, host, rp, str(uuid.uuid4())))
            assert r.status_code == 409, r.text
            code = r.json()['error_code']
            assert code.startswith('cyb.') and 'Traceback' not in r.text
            api.delete('/v2/accelerator_requests', params={'arqs': other[0]['uuid']})
        finally:
            flows.delete(cluster, api, instance)
    logs = ''.join(c.log_since(off) for c, off in zip(cluster.conductors, offsets))
    assert 'Traceback' not in logs and 'Exception during message handling' not in logs
    # The API refused it itself: its request line, INFO, with the code.
    api_log = cluster.api.log_since(api_offset)
    assert 'Traceback' not in api_log and ' ERROR ' not in api_log, api_log[-3000:]
    refused = [line for line in api_log.splitlines()
               if 'PATCH /v2/accelerator_requests"' in line and 'status: 409' in line]
    assert len(refused) == 1 and ' INFO ' in refused[0], api_log[-3000:]
