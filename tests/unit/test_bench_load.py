"""bench/load.py's bookkeeping: what a failed instance is counted and cleaned up as,
and the process-tree CPU the production benchmark reports (no timings asserted)."""
import json
import os
import subprocess
import sys
import uuid

from bench import load


def test_bound_request_names_the_instance_and_arqs_of_a_bind():
    inst, arqs = str(uuid.uuid4()), [str(uuid.uuid4()), str(uuid.uuid4())]
    body = json.dumps(load.bind_body([{'uuid': a} for a in arqs], 'h', 'rp', inst)).encode()
    assert load.bound_request('PATCH', body) == (inst, arqs)
    assert load.bound_request('POST', body) is None
    assert load.bound_request('PATCH', b'not json') is None


def test_describe_groups_failures_by_call_status_and_reason():
    def error(text):
        return load.ClientError(load.Response(500, text.encode(), 'PATCH',
                                              f'/v2/accelerator_requests?x={uuid.uuid4()}'))
    cyborg = json.dumps({'error_message': json.dumps(
        {'faultstring': f'database is locked {uuid.uuid4()}'})})
    assert load.describe(error(cyborg)) == load.describe(error(cyborg)) == \
        'PATCH /v2/accelerator_requests -> 500: database is locked <uuid>'
    assert load.describe(OSError('reset')) == 'OSError: reset'


class _Client:
    def __init__(self, statuses):
        self.statuses, self.calls = list(statuses), []

    def delete(self, url, params):
        self.calls.append(params)
        return load.Response(self.statuses.pop(0), b'', 'DELETE', url)


def test_clean_up_retries_5xx_then_deletes_the_arqs_by_uuid():
    c = _Client([503, 204, 404])
    load.clean_up(c, ('i', ['a', 'b']))
    assert c.calls == [{'instance': 'i'}, {'instance': 'i'}, {'arqs': 'a,b'}]
    load.clean_up(c, None)          # failed before its bind: nothing to clean up
    assert len(c.calls) == 3


def test_tree_cpu_counts_a_reaped_child():
    burn = 'import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass'
    before = load.tree_cpu(os.getpid())
    subprocess.run([sys.executable, '-c', burn], check=True)
    assert load.tree_cpu(os.getpid()) - before >= 0.2


def test_describe_reads_stewards_error_body():
    body = json.dumps({'error_message': 'An unexpected error occurred.',
                       'faultstring': 'An unexpected error occurred.', 'error_code': 500})
    err = load.ClientError(load.Response(500, body.encode(), 'PATCH',
                                         '/v2/accelerator_requests'))
    assert load.describe(err) == \
        'PATCH /v2/accelerator_requests -> 500: An unexpected error occurred.'
