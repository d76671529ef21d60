"""The compute side's os-server-external-events listener, fed by the conductor's
real NovaNotifier and by raw HTTP."""
import time
import uuid

import httpx
import pytest

from steward.arqs import nova_events
from steward.common import exception
from steward.compute import events
from tests.fixtures.stack import free_port

# Fixed, and free of the ARQ tags below: a random uuid could contain 'a2'.
INSTANCE = '6f1c3e58-0d4b-4b7e-9c11-5d8e7f90b3c4'


@pytest.fixture
def listener():
    with events.EventListener(f'127.0.0.1:{free_port()}') as lst:
        yield lst


@pytest.fixture
def notifier(conf, listener):
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', events.endpoint_for(listener.listen),
                      group='nova')
    conf.set_override('event_retry_delay', 0.05, group='nova')
    n = nova_events.NovaNotifier(conf)
    yield n
    n.stop()


def post(listener, body, version='compute 2.82'):
    headers = {'OpenStack-API-Version': version} if version else {}
    return httpx.post(f'{events.endpoint_for(listener.listen)}/os-server-external-events',
                      json=body, headers=headers, timeout=60, trust_env=False)


def test_conductor_events_complete_the_wait(listener, notifier):
    listener.expect(INSTANCE, ['a1', 'a2'])
    sent = notifier.notify([(INSTANCE, 'a1', 'completed'), (INSTANCE, 'a2', 'failed')])
    assert sent.result(10) is True
    assert listener.wait(INSTANCE, 5) == {'a1': 'completed', 'a2': 'failed'}


def test_unknown_instance_is_404_like_nova(listener, notifier):
    assert notifier.notify([(str(uuid.uuid4()), 'a1', 'completed')]).result(10) is False
    r = post(listener, {'events': [{'name': events.EVENT_NAME,
                                    'server_uuid': str(uuid.uuid4()), 'tag': 'x',
                                    'status': 'completed'}]})
    assert r.status_code == 404 and 'itemNotFound' in r.json()


def test_mixed_events_answer_207_with_per_event_codes(listener):
    listener.expect(INSTANCE, ['a1'])
    other = str(uuid.uuid4())
    r = post(listener, {'events': [
        {'name': events.EVENT_NAME, 'server_uuid': INSTANCE, 'tag': 'a1',
         'status': 'completed'},
        {'name': events.EVENT_NAME, 'server_uuid': other, 'tag': 'b1',
         'status': 'completed'}]})
    assert r.status_code == 207
    assert [e['code'] for e in r.json()['events']] == [200, 404]
    assert listener.wait(INSTANCE, 1) == {'a1': 'completed'}


def test_event_before_2_82_is_refused(listener):
    listener.expect(INSTANCE, ['a1'])
    body = {'events': [{'name': events.EVENT_NAME, 'server_uuid': INSTANCE,
                        'tag': 'a1', 'status': 'completed'}]}
    for version in (None, 'compute 2.81'):
        r = post(listener, body, version=version)
        assert r.status_code == 400 and 'badRequest' in r.json()
    with pytest.raises(exception.BindTimeout):
        listener.wait(INSTANCE, 0.1)
    assert post(listener, body, version='compute latest').status_code == 200


@pytest.mark.parametrize('body', [
    {}, {'events': []}, {'events': [{'name': 'x'}]},
    {'events': [{'name': 'x', 'server_uuid': INSTANCE, 'status': 'done'}]},
    {'events': [{'name': 'x', 'server_uuid': INSTANCE, 'tag': 5}]}])
def test_bad_bodies_are_400(listener, body):
    assert post(listener, body).status_code == 400


def test_timeout_names_the_missing_arqs(listener):
    listener.expect(INSTANCE, ['a1', 'a2'])
    post(listener, {'events': [{'name': events.EVENT_NAME, 'server_uuid': INSTANCE,
                                'tag': 'a2', 'status': 'completed'}]})
    start = time.monotonic()
    with pytest.raises(exception.BindTimeout, match='a1 of instance') as exc:
        listener.wait(INSTANCE, 0.3)
    assert time.monotonic() - start >= 0.3
    assert exc.value.code == 'cyb.compute.bind_timeout' and 'a2' not in str(exc.value)


def test_version_document_and_unknown_paths(listener):
    base = events.endpoint_for(listener.listen)
    assert httpx.get(base, trust_env=False).json()['version']['version'] == '2.82'
    assert httpx.post(base + '/servers', json={}, trust_env=False).status_code == 404


def test_busy_port_is_a_clean_error(listener):
    with pytest.raises(exception.EventListenerFailed, match='another'):
        events.EventListener(listener.listen).start()


@pytest.mark.parametrize('value', ['8774', 'host:', ':99', 'h:0', 'h:70000', ''])
def test_bad_listen_values(value):
    with pytest.raises(exception.EventListenerFailed):
        events.parse_listen(value)


def test_one_notifier_feeds_successive_listeners_on_one_port(conf):
    """Boots come and go on one port while the conductor's HTTP session lives on:
    a connection kept alive to a stopped listener must not swallow the next
    boot's events."""
    listen = f'127.0.0.1:{free_port()}'
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', events.endpoint_for(listen), group='nova')
    notifier = nova_events.NovaNotifier(conf)
    try:
        for _ in range(3):
            instance = str(uuid.uuid4())
            with events.EventListener(listen) as lst:
                lst.expect(instance, ['a1'])
                assert notifier.notify([(instance, 'a1', 'completed')]).result(10) is True
                assert lst.wait(instance, 5) == {'a1': 'completed'}
    finally:
        notifier.stop()


def test_resolved_arqs_leave_the_wait_early(listener):
    """Nova's exit_wait_early: an ARQ found resolved needs no event; one that is
    not still does."""
    listener.expect(INSTANCE, ['a1', 'a2'])
    listener.exit_early(INSTANCE, ['a1'])
    with pytest.raises(exception.BindTimeout, match='a2 of instance'):
        listener.wait(INSTANCE, 0.2)
    post(listener, {'events': [{'name': events.EVENT_NAME, 'server_uuid': INSTANCE,
                                'tag': 'a2', 'status': 'completed'}]})
    assert listener.wait(INSTANCE, 5) == {'a2': 'completed'}
    listener.expect(INSTANCE, ['b1'])
    listener.exit_early(INSTANCE, ['b1'])
    assert listener.wait(INSTANCE, 0) == {}
