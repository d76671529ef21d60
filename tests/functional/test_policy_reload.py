"""SIGHUP re-reads the policy file of a running `steward serve` (a real subprocess):
a read the file forbids becomes allowed once the file is changed and the process
signalled, and forbidden again the same way, with no restart (the same process).
With `steward api` workers, SIGHUP is gunicorn's: new workers, each on the file as
it is then."""
import os
import signal

import httpx
import pytest

from tests.fixtures.stack import api_workers, children, running_stack, wait_for


# A project's reader may list device profiles by default (rule:project_reader_or_admin).
READER = {'X-Roles': 'reader', 'X-User-Id': 'u1', 'X-Project-Id': 'p-reader'}
RULE = 'cyborg:device_profile:get_all'


def _status(stack):
    return httpx.get(f'{stack.url}/v2/device_profiles', headers=READER,
                     timeout=60).status_code


def test_sighup_reloads_the_policy_file_without_a_restart(tmp_path):
    policy = tmp_path / 'policy.yaml'
    policy.write_text(f'"{RULE}": "!"\n')
    extra = f'[oslo_policy]\npolicy_file = {policy}\n'
    with running_stack(extra_conf=extra) as stack:
        pid = stack.proc.pid
        assert _status(stack) == 403

        policy.write_text(f'"{RULE}": "role:reader"\n')
        # Kept in memory: an edited file changes nothing until the signal.
        assert _status(stack) == 403
        os.kill(pid, signal.SIGHUP)
        wait_for(lambda: _status(stack) == 200, 'the reader allowed after SIGHUP')

        policy.write_text(f'"{RULE}": "!"\n')
        assert _status(stack) == 200
        os.kill(pid, signal.SIGHUP)
        wait_for(lambda: _status(stack) == 403, 'the reader forbidden after SIGHUP')

        # No restart: the same process answers, and it said what it did.
        assert stack.proc.poll() is None
        assert stack.log().count('Policy reloaded') == 2, stack.log()[-3000:]


def test_a_policy_file_that_does_not_parse_keeps_the_rules_in_force(tmp_path):
    policy = tmp_path / 'policy.yaml'
    policy.write_text(f'"{RULE}": "!"\n')
    extra = f'[oslo_policy]\npolicy_file = {policy}\n'
    with running_stack(extra_conf=extra) as stack:
        assert _status(stack) == 403
        policy.write_text('{"unterminated": \n')
        os.kill(stack.proc.pid, signal.SIGHUP)
        wait_for(lambda: 'Policy reload failed' in stack.log() or _status(stack) != 403,
                 'the failed reload to be logged')
        assert _status(stack) == 403
        assert stack.proc.poll() is None


def _statuses(url, n=6):
    """The answers of ``n`` reads, each on a connection of its own (the kernel
    spreads them over the workers). ``'cut'`` for a connection a stopping worker
    closed unanswered: uvicorn's graceful stop closes connections that have not
    sent their request yet (doc/api.md says so), which a HUP's restart can meet."""
    statuses = set()
    for _ in range(n):
        try:
            statuses.add(httpx.get(f'{url}/v2/device_profiles', headers=READER,
                                   timeout=60).status_code)
        except httpx.TransportError:
            statuses.add('cut')
    return statuses


@pytest.mark.slow
def test_gunicorn_hup_restarts_the_api_workers_on_the_new_policy(tmp_path):
    policy = tmp_path / 'policy.yaml'
    policy.write_text(f'"{RULE}": "!"\n')
    with api_workers(tmp_path, api_conf='metrics_listen =\n',
                     extra_conf=f'[oslo_policy]\npolicy_file = {policy}\n') as (
            proc, url, _log):
        assert _statuses(url) == {403}
        before = set(children(proc.pid))

        policy.write_text(f'"{RULE}": "role:reader"\n')
        assert _statuses(url) == {403}
        os.kill(proc.pid, signal.SIGHUP)
        # Each new worker reads the file as it starts; the old ones stop gracefully.
        wait_for(lambda: _statuses(url) == {200} and
                 not before & set(children(proc.pid)), 'the workers on the new policy')

        policy.write_text(f'"{RULE}": "!"\n')
        os.kill(proc.pid, signal.SIGHUP)
        wait_for(lambda: _statuses(url) == {403}, 'the workers on the policy again')
        assert proc.poll() is None          # the parent itself never restarted
