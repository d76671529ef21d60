"""No open API by accident: noauth serves loopback only, unless the operator says
so loudly. Real `steward serve` / `steward api` subprocesses."""
import os
import subprocess
import sys

import pytest

from steward.cmd import checks
from steward.conf import CONF
from tests.fixtures.stack import free_port
from tests.fixtures.stack import running_stack

STEWARD = os.path.join(os.path.dirname(sys.executable), 'steward')


def _start(tmp_path, command, conf_text):
    conf = tmp_path / 'steward.conf'
    conf.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\nhost = exposure-host\n'
                    f'transport_url = rabbit://steward:x@127.0.0.1:{free_port()}/\n'
                    f'[api]\nport = {free_port()}\nmetrics_listen = 127.0.0.1:{free_port()}\n'
                    f'[placement]\nembedded_port = {free_port()}\n{conf_text}')
    return subprocess.run([STEWARD, command, '--config-file', str(conf)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize('command,conf_text,names', [
    ('serve', '[api]\nhost_ip = 0.0.0.0\n', 'the API on 0.0.0.0'),
    ('serve', '[placement]\nembedded_host = 0.0.0.0\n', 'the embedded Placement on 0.0.0.0'),
    ('api', '[api]\nhost_ip = ::\n', 'the API on ::'),
])
def test_noauth_on_a_routable_address_refuses_to_start(tmp_path, command, conf_text, names):
    out = _start(tmp_path, command, conf_text)
    assert out.returncode == 1, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr          # one line, no traceback
    assert names in lines[0]
    assert 'allow_insecure_noauth' in lines[0] and 'auth_strategy = keystone' in lines[0]
    # Refused before anything was created or started.
    assert not (tmp_path / 'steward.sqlite').exists()
    assert not (tmp_path / 'placement.log').exists()


def test_allow_insecure_noauth_starts_with_a_warning_every_time():
    extra = '[api]\nhost_ip = 0.0.0.0\nallow_insecure_noauth = true\n'
    for _ in range(2):
        with running_stack(extra_conf=extra) as stack:
            warnings = [line for line in stack.log().splitlines() if 'INSECURE' in line]
            assert len(warnings) == 1 and 'WARNING' in warnings[0], stack.log()[-3000:]
            assert 'the API on 0.0.0.0' in warnings[0]


def test_loopback_default_starts_without_a_warning():
    with running_stack() as stack:
        assert 'INSECURE' not in stack.log()
        assert 'allow_insecure_noauth' not in stack.log()


@pytest.mark.parametrize('host,loopback', [
    ('127.0.0.1', True), ('127.1.2.3', True), ('::1', True), ('[::1]', True),
    ('localhost', True), ('0.0.0.0', False), ('::', False), ('192.0.2.10', False),
    ('no-such-host.invalid', False),
])
def test_is_loopback(host, loopback):
    assert checks.is_loopback(host) is loopback


def test_keystone_passes_on_any_address():
    CONF.set_override('auth_strategy', 'keystone', group='api')
    try:
        checks.check_exposure([('the API', '0.0.0.0')])
    finally:
        CONF.clear_override('auth_strategy', group='api')
    with pytest.raises(Exception) as err:
        checks.check_exposure([('the API', '0.0.0.0')])
    assert err.value.code == 'cyb.config.invalid'


def test_metrics_apart_from_the_api_and_without_tenant_labels():
    import httpx
    from prometheus_client import parser
    with running_stack() as stack:
        r = httpx.get(f'{stack.url}/metrics', timeout=60)
        assert r.status_code == 404 and r.json()['error_code'] == 'cyb.request.path_not_found'
        r = httpx.get(stack.metrics_url, timeout=60)
        assert r.status_code == 200
        labels = {name for fam in parser.text_string_to_metric_families(r.text)
                  for sample in fam.samples for name in sample.labels}
    assert 'steward_devices' in r.text
    # Hosts, device types, states and outcomes; never a project, user, instance or
    # request: whoever reads the scrape learns nothing about tenants.
    assert labels <= {'host', 'type', 'state', 'kind', 'outcome', 'action', 'le',
                      'reason', 'device', 'health', 'code', 'severity'}, labels


def test_a_bad_metrics_listen_refuses_to_start(tmp_path):
    out = _start(tmp_path, 'serve', '[api]\nmetrics_listen = 127.0.0.1\n')
    assert out.returncode == 1, out
    assert out.stderr.strip().count('\n') == 0, out.stderr
    assert '[api] metrics_listen' in out.stderr
