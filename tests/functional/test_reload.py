"""SIGHUP reloads a running `steward serve` and `steward api` (one process, and
with gunicorn workers): real processes, their configuration file and policy file
edited, then the signal. The process stays (same pid), keeps serving, and shows
the new values; a file that does not parse, or holds a value its option refuses,
keeps the configuration in force. (The conductor and the agent, over RabbitMQ:
tests/functional/test_reload_services.py.)"""
import os
import re
import signal
import uuid

import httpx
import pytest

from tests.fixtures.stack import api_workers, children, running_stack, wait_for

READER = {'X-Roles': 'reader', 'X-User-Id': 'u1', 'X-Project-Id': 'p-reader'}
RULE = 'cyborg:device_profile:get_all'
# Generous for a loaded 2-core machine: what is waited on takes a second or two.
DEADLINE = 60


def reader_status(url):
    return httpx.get(f'{url}/v2/device_profiles', headers=READER, timeout=60).status_code


def debug_lines(text, pid):
    # oslo.log's default format: "<date> <time> <pid> <LEVEL> <logger> ...".
    return [line for line in text.splitlines() if f' {pid} DEBUG ' in line]


def discovery_cycles(metrics_url, host):
    text = httpx.get(metrics_url, timeout=60).text
    pattern = r'^steward_discovery_cycles_total\{host="%s"\} (\S+)$' % re.escape(host)
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else 0.0


def append(path, text):
    """Later lines win in oslo.config: appended sections override the file's."""
    with open(path, 'a') as f:
        f.write('\n' + text)


def hup_and_wait(proc, log, marker, since):
    """SIGHUP, then wait for ``marker`` in the log written after ``since``."""
    os.kill(proc.pid, signal.SIGHUP)
    wait_for(lambda: marker in log()[since:] or proc.poll() is not None,
             f'{marker!r} in the log', timeout=DEADLINE)
    assert proc.poll() is None, log()[-3000:]
    return log()[since:]


def test_serve_reloads_configuration_log_level_and_policy_on_sighup(tmp_path):
    policy = tmp_path / 'policy.yaml'
    policy.write_text(f'"{RULE}": "!"\n')
    with running_stack(extra_conf=f'[oslo_policy]\npolicy_file = {policy}\n') as stack:
        conf = os.path.join(stack.state_path, 'steward.conf')
        pid = stack.proc.pid
        metrics = stack.metrics_url
        # discovery_interval = 3600: the first cycle, at start, and no other.
        wait_for(lambda: discovery_cycles(metrics, 'bench-host') == 1, 'first cycle')
        assert reader_status(stack.url) == 403
        assert not debug_lines(stack.log(), pid)

        append(conf, '[DEFAULT]\ndebug = true\n'
                     'default_log_levels = oslo_messaging=DEBUG\n'
                     '[agent]\ndiscovery_interval = 1\n')
        policy.write_text(f'"{RULE}": "role:reader"\n')
        since = len(stack.log())
        text = hup_and_wait(stack.proc, stack.log, 'Configuration reloaded', since)
        # oslo.config names each option that changed; one line says it reloaded.
        assert 'Option agent.discovery_interval changed from [3600] to [1]' in text
        # (oslo.config compares what the files say: unset before, "true" now.)
        assert 'Option DEFAULT.debug changed from [None] to [true]' in text
        assert text.count('Configuration reloaded from') == 1, text

        # The new interval: cycles every second, each a report the conductor took.
        wait_for(lambda: discovery_cycles(metrics, 'bench-host') >= 4,
                 'discovery every second after the reload', timeout=DEADLINE)
        # The new log levels: DEBUG lines, the RPC calls of those reports.
        wait_for(lambda: debug_lines(stack.log()[since:], pid), 'DEBUG lines',
                 timeout=DEADLINE)
        lines = debug_lines(stack.log()[since:], pid)
        assert any('oslo_messaging' in line for line in lines), lines[:5]
        # The new policy, on the same process.
        wait_for(lambda: reader_status(stack.url) == 200, 'the new policy')
        assert stack.proc.pid == pid and stack.proc.poll() is None
        assert 'Traceback' not in stack.log()


@pytest.mark.parametrize('broken', [
    # Does not parse.
    '[agent\ndiscovery_interval = 1\n',
    # Parses, but the option refuses the value (min=1; an inline comment is kept
    # by oslo.config as part of the value).
    '[agent]\ndiscovery_interval = 0\n',
    '[agent]\ndiscovery_interval = 1   # seconds\n',
])
def test_serve_keeps_its_configuration_when_the_file_is_broken(tmp_path, broken):
    policy = tmp_path / 'policy.yaml'
    policy.write_text(f'"{RULE}": "!"\n')
    with running_stack(extra_conf=f'[oslo_policy]\npolicy_file = {policy}\n') as stack:
        conf = os.path.join(stack.state_path, 'steward.conf')
        metrics = stack.metrics_url
        wait_for(lambda: discovery_cycles(metrics, 'bench-host') == 1, 'first cycle')
        append(conf, '[DEFAULT]\ndebug = true\ndefault_log_levels = oslo_messaging=DEBUG\n'
               + broken)
        policy.write_text(f'"{RULE}": "role:reader"\n')
        since = len(stack.log())
        text = hup_and_wait(stack.proc, stack.log, 'Configuration reload failed', since)
        assert ' ERROR steward.reload ' in text, text
        assert 'Configuration reloaded' not in text
        # Still serving, on the old values: no DEBUG, discovery hourly. The policy
        # file is a file of its own, and read again (as api workers would).
        wait_for(lambda: reader_status(stack.url) == 200, 'the new policy')
        assert discovery_cycles(metrics, 'bench-host') == 1
        assert not debug_lines(stack.log(), stack.proc.pid)
        assert 'Traceback' not in stack.log()

        # Fixed and signalled again: now it reloads.
        with open(conf) as f:
            text = f.read().replace(broken, '[agent]\ndiscovery_interval = 1\n')
        with open(conf, 'w') as f:
            f.write(text)
        since = len(stack.log())
        hup_and_wait(stack.proc, stack.log, 'Configuration reloaded', since)
        wait_for(lambda: discovery_cycles(metrics, 'bench-host') >= 3, 'discovery',
                 timeout=DEADLINE)
        assert debug_lines(stack.log()[since:], stack.proc.pid)


def _bind_503(url):
    """A bind with no broker behind the API: 503 once [DEFAULT]
    rpc_unavailable_timeout has passed, which the answer names."""
    arq = str(uuid.uuid4())
    r = httpx.patch(f'{url}/v2/accelerator_requests', timeout=30, json={arq: [
        {'op': 'add', 'path': '/hostname', 'value': 'h'},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': str(uuid.uuid4())},
        {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())}]})
    assert r.status_code == 503, r.text
    return r.text


def _statuses(url, n=6):
    """Reads on a connection each (the kernel spreads them over the workers); a
    connection cut by a worker stopping during gunicorn's HUP is 'cut'."""
    found = set()
    for _ in range(n):
        try:
            found.add(reader_status(url))
        except httpx.TransportError:
            found.add('cut')
    return found


@pytest.mark.parametrize('workers', [1, 2])
def test_api_reloads_on_sighup(tmp_path, workers):
    """One process: Steward's reload in the process. Two workers: gunicorn's HUP,
    the arbiter reloading the configuration before it forks the new workers."""
    policy = tmp_path / 'policy.yaml'
    policy.write_text(f'"{RULE}": "!"\n')
    with api_workers(tmp_path, default_conf='rpc_unavailable_timeout = 0\n',
                     api_conf='metrics_listen =\n', workers=workers,
                     extra_conf=f'[oslo_policy]\npolicy_file = {policy}\n') as (
            proc, url, log_path):
        log = log_path.read_text
        before = set(children(proc.pid))
        assert 'within 0 s' in _bind_503(url)
        assert _statuses(url) == {403}

        append(tmp_path / 'api.conf', '[DEFAULT]\nrpc_unavailable_timeout = 0.5\n')
        policy.write_text(f'"{RULE}": "role:reader"\n')
        since = len(log())
        text = hup_and_wait(proc, log, 'Configuration reloaded', since)
        assert 'Option DEFAULT.rpc_unavailable_timeout changed from [0] to [0.5]' in text
        # Every process serving now has the new policy and the new timeout (with
        # workers: new ones, forked after the reload).
        wait_for(lambda: _statuses(url) == {200}, 'the new policy in every process',
                 timeout=DEADLINE)
        if workers > 1:
            wait_for(lambda: not before & set(children(proc.pid)), 'new workers',
                     timeout=DEADLINE)
        for _ in range(2 * workers):
            assert 'within 0.5 s' in _bind_503(url)

        # A file that does not parse: the configuration kept, still serving; the
        # policy file (a file of its own) read again.
        append(tmp_path / 'api.conf', '[DEFAULT\nrpc_unavailable_timeout = 2\n')
        policy.write_text(f'"{RULE}": "!"\n')
        since = len(log())
        hup_and_wait(proc, log, 'Configuration reload failed', since)
        wait_for(lambda: _statuses(url) == {403}, 'the policy read again',
                 timeout=DEADLINE)
        for _ in range(2 * workers):
            assert 'within 0.5 s' in _bind_503(url)
        assert proc.poll() is None
