"""accelerator-request-bound events to Nova (POST /os-server-external-events).

Sent by the process that ran the bind (steward/arqs/service.py): each ``steward
api`` process, or a conductor for the API processes that send it the ARQ
operations over RPC; ``steward serve``'s conductor. One ``NovaNotifier`` per
process, built by the composition root (steward/cmd/root.py).

Nothing configured in ``[nova]``: no event is sent and nothing is logged per bind
(one INFO line at start). Otherwise sent off the request path, once per ARQ: one
POST carries the events of every bind that completed while the previous POST was
under way (at most MAX_EVENTS; Nova's API takes events of any servers in one
request and answers each), so under load a POST serves many binds instead of
each bind paying for its own, and when binds are rare each is sent at once. A failure to connect is retried
by keystoneauth itself (``connect_retries``, 0.5 s apart and doubling), then given
up with one WARNING line. One keystone session for the process: upstream built a
new SDK connection (plus version discovery) per bind, a third of its bind latency.

An event Nova answers 207 with a per-event 422 (the instance has no host yet) is
not sent again. Nova 34 never needs it (doc/nova.md, "accelerator-request-bound
events"): nova-api drops an event only while ``instance.host`` is unset; the build
path sets the host in the compute's claim (compute/manager.py
``_build_and_run_instance``) before ``_get_bound_arq_resources`` registers its
waiters and reads the resolved ARQs, and Steward's bind has committed the ARQs
Bound before it sends the event, so that read finds them and the wait ends early.
Unshelve waits before its claim, with no host: every event is dropped whenever it
is sent, and the same read is what ends the wait. A second copy only reached a
compute that had stopped waiting ("Received unexpected event", a WARNING per boot).
"""
import collections
from concurrent import futures as concurrent_futures
import logging
import threading

import futurist
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading

from steward.conf import CONF

LOG = logging.getLogger(__name__)
EVENT_NAME = 'accelerator-request-bound'
MICROVERSION = '2.82'
# Events in one POST at the most: a bounded request body, whatever the backlog.
MAX_EVENTS = 100
# Events waiting for their POST at the most, per process (binds made while Nova is
# unreachable: each POST then waits out keystoneauth's connect retries). Past it
# the oldest binds' events are dropped, with one WARNING per backlog: Nova 34
# needs none of them to boot (module doc: the bind commits its ARQs Bound before
# it answers, and the compute reads them resolved before it waits), and an
# unbounded queue would grow with every bind for as long as Nova is away.
MAX_PENDING = 10000


def configured(conf=CONF):
    return bool(conf.nova.auth_type or conf.nova.endpoint_override)


def build_adapter(conf=CONF):
    """The keystoneauth adapter of ``[nova]`` (service type compute): the events
    and the conductor's orphan check (steward/conductor/nova_servers.py
    ``ServerLookup``) talk to Nova through it."""
    if conf.nova.auth_type:
        auth = ks_loading.load_auth_from_conf_options(conf, 'nova')
    else:
        auth = ks_loading.get_plugin_loader('none').load_from_options()
    session = ks_loading.load_session_from_conf_options(conf, 'nova', auth=auth)
    return ks_loading.load_adapter_from_conf_options(conf, 'nova', session=session,
                                                     auth=auth)


class NovaNotifier:
    def __init__(self, conf=CONF, adapter=None, announce=True):
        """``announce=False``: no start-up line (another notifier of the same
        service, an API worker of steward serve, said it already)."""
        self.conf = conf
        self._adapter = adapter
        self._pool = futurist.ThreadPoolExecutor(max_workers=1)
        self._lock = threading.Lock()
        self._pending = collections.deque()     # (events, Future) not yet posted
        self._queued = 0                        # events in _pending
        self._draining = False
        self.sent = 0
        self.dropped = 0
        self.enabled = adapter is not None or configured(conf)
        if not self.enabled and announce:
            # Said once here: a bind must not pay for (or log) events nobody receives.
            LOG.info('Nova events are off: [nova] names no endpoint, so '
                     '%s events are not sent', EVENT_NAME)

    def _get_adapter(self):
        if self._adapter is None:
            self._adapter = build_adapter(self.conf)
        return self._adapter

    def notify(self, events):
        """events: [(instance_uuid, arq_uuid, 'completed'|'failed')]. Never raises:
        a Nova problem must not fail a bind that succeeded. Returns a Future of
        whether Nova took the POST that carried them (None: events are off)."""
        if not events or not self.enabled:
            return None
        future = concurrent_futures.Future()
        events = list(events)
        dropped = []
        with self._lock:
            self._pending.append((events, future))
            self._queued += len(events)
            while self._queued > MAX_PENDING and len(self._pending) > 1:
                old, old_future = self._pending.popleft()
                self._queued -= len(old)
                dropped.append((old, old_future))
            start = not self._draining
            self._draining = True
        if dropped:
            first = self.dropped == 0
            self.dropped += sum(len(old) for old, _ in dropped)
            if first:
                LOG.warning('%d %s event(s) wait for Nova, which does not take them: '
                            'the oldest are dropped (Nova needs none of them to boot: '
                            'its compute reads the ARQs resolved)', MAX_PENDING,
                            EVENT_NAME)
            for _, old_future in dropped:
                if old_future is not None:
                    old_future.set_result(False)
        if start:
            self._pool.submit(self._drain)
        return future

    def _take(self):
        """The next POST's share of the pending binds: whole binds, up to
        MAX_EVENTS events (a bind larger than that alone)."""
        batch, count = [], 0
        while self._pending and (not batch or
                                 count + len(self._pending[0][0]) <= MAX_EVENTS):
            events, future = self._pending.popleft()
            self._queued -= len(events)
            batch.append((events, future))
            count += len(events)
        return batch

    def _drain(self):
        while True:
            with self._lock:
                batch = self._take()
                if not batch:
                    self._draining = False
                    return
            try:
                ok = self._send([e for events, _ in batch for e in events])
            except Exception:  # noqa: BLE001 - the drain must go on for later binds
                LOG.exception('Sending %s events to Nova failed', EVENT_NAME)
                ok = False
            for _, future in batch:
                future.set_result(ok)

    def _post(self, body):
        """One POST; keystoneauth retries a failure to connect (``[nova]
        connect_retries`` when set, else ``event_connect_attempts`` - 1)."""
        kwargs = {}
        if self.conf.nova.connect_retries is None:
            kwargs['connect_retries'] = self.conf.nova.event_connect_attempts - 1
        return self._get_adapter().post(
            '/os-server-external-events', json=body, raise_exc=False,
            microversion=MICROVERSION, timeout=self.conf.nova.event_timeout,
            **kwargs)

    def _attempts(self):
        retries = self.conf.nova.connect_retries
        return (retries if retries is not None
                else self.conf.nova.event_connect_attempts - 1) + 1

    def _send(self, events):
        body = {'events': [{'name': EVENT_NAME, 'server_uuid': inst, 'tag': arq,
                            'status': status} for inst, arq, status in events]}
        try:
            resp = self._post(body)
        except ks_exc.ConnectFailure as err:
            # The bind stands and Nova's own check of resolved ARQs finds it; one
            # line, no traceback: keystoneauth's text repeats urllib3's chain.
            LOG.warning('Nova events endpoint unreachable after %d attempt(s) (%s); '
                        '%d %s event(s) not delivered', self._attempts(),
                        type(err).__name__, len(events), EVENT_NAME)
            return False
        except ks_exc.ClientException as err:
            LOG.warning('Sending %s events to Nova failed (%s: %s)', EVENT_NAME,
                        type(err).__name__, str(err).splitlines()[0][:200])
            return False
        self.sent += 1
        if resp.status_code == 200:
            return True
        if resp.status_code == 207:
            # 422: the instance has no host yet, so Nova dropped the event; its
            # compute reads the ARQs Bound (see the module docstring). 404: no such
            # instance (deleted meanwhile).
            LOG.debug('Nova answered 207 to %s events: %s', EVENT_NAME,
                      [(e.get('tag'), e.get('code'))
                       for e in resp.json().get('events', [])])
            return True
        LOG.error('Nova answered %s to %s events: %s', resp.status_code,
                  EVENT_NAME, resp.text[:300])
        return False

    def stop(self):
        self._pool.shutdown(wait=False)
