"""accelerator-request-bound events to Nova (POST /os-server-external-events).

Nothing configured in ``[nova]``: no event is sent and nothing is logged per bind
(one INFO line at start). Otherwise sent off the request path from a small pool,
retrying a failure to connect a few times with a doubling delay, then giving up with
one WARNING line. A synchronous bind finishes before Nova's instance is on a
host, Nova answers 207 with per-event 422 and drops the
event, so such an event is sent once more after ``[nova] event_retry_delay``
(harmless when Nova already proceeded; it makes late binds reliable). One keystone
session for the process: upstream built a new SDK connection (plus version
discovery) per bind, a third of its bind latency.
"""
import logging
import time

import futurist
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading

from steward.conf import CONF

LOG = logging.getLogger(__name__)
EVENT_NAME = 'accelerator-request-bound'
MICROVERSION = '2.82'


def configured(conf=CONF):
    return bool(conf.nova.auth_type or conf.nova.endpoint_override)


def build_adapter(conf=CONF):
    """The keystoneauth adapter of ``[nova]`` (service type compute): the events
    and the orphan check (``ServerLookup``) talk to Nova through it."""
    if conf.nova.auth_type:
        auth = ks_loading.load_auth_from_conf_options(conf, 'nova')
    else:
        auth = ks_loading.get_plugin_loader('none').load_from_options()
    session = ks_loading.load_session_from_conf_options(conf, 'nova', auth=auth)
    return ks_loading.load_adapter_from_conf_options(conf, 'nova', session=session,
                                                     auth=auth)


class ServerStatusUnknown(Exception):
    """Nova did not say whether a server exists (an error status, no answer)."""

    def __init__(self, reason, unreachable=False):
        super().__init__(reason)
        self.unreachable = unreachable


class ServerLookup:
    """``GET /servers/{uuid}``: does Nova still have this server? The conductor's
    orphan check (steward/conductor/periodic.py). The ``[nova]`` credentials must
    see every project's servers (admin, as Nova's external events API requires):
    a 404 is taken to mean the server is gone."""

    def __init__(self, conf=CONF, adapter=None, announce=True):
        """``announce=False``: no start-up line (another notifier of the same
        service, an API worker of steward serve, said it already)."""
        self.conf = conf
        self._adapter = adapter

    def exists(self, instance_uuid):
        """True (200), False (404); raises ServerStatusUnknown otherwise."""
        if self._adapter is None:
            self._adapter = build_adapter(self.conf)
        try:
            resp = self._adapter.get(f'/servers/{instance_uuid}', raise_exc=False,
                                     timeout=self.conf.nova.event_timeout)
        except (ks_exc.ConnectFailure, ks_exc.ConnectTimeout) as err:
            raise ServerStatusUnknown(type(err).__name__, unreachable=True)
        except ks_exc.ClientException as err:
            raise ServerStatusUnknown(
                f'{type(err).__name__}: {str(err).splitlines()[0][:200]}')
        if resp.status_code == 200:
            return True
        if resp.status_code == 404:
            return False
        raise ServerStatusUnknown(f'HTTP {resp.status_code}')


CONNECT_BACKOFF_FIRST = 0.5


class NovaNotifier:
    def __init__(self, conf=CONF, adapter=None, announce=True):
        """``announce=False``: no start-up line (another notifier of the same
        service, an API worker of steward serve, said it already)."""
        self.conf = conf
        self._adapter = adapter
        self._pool = futurist.ThreadPoolExecutor(max_workers=4)
        self.sent = 0
        self.connect_failures = 0
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
        a Nova problem must not fail a bind that succeeded."""
        if not events or not self.enabled:
            return None
        return self._pool.submit(self._send, events)

    def _post(self, body):
        """One POST, retrying only failures to connect, with a bounded backoff."""
        attempts = self.conf.nova.event_connect_attempts
        delay = CONNECT_BACKOFF_FIRST
        for attempt in range(1, attempts + 1):
            try:
                return self._get_adapter().post(
                    '/os-server-external-events', json=body, raise_exc=False,
                    microversion=MICROVERSION, timeout=self.conf.nova.event_timeout)
            except ks_exc.ConnectFailure as err:
                self.connect_failures += 1
                if attempt == attempts:
                    raise
                LOG.debug('Nova events endpoint not reachable (%s); attempt %d of %d '
                          'in %.1f s', type(err).__name__, attempt + 1, attempts, delay)
                time.sleep(delay)
                delay *= 2

    def _send(self, events):
        body = {'events': [{'name': EVENT_NAME, 'server_uuid': inst, 'tag': arq,
                            'status': status} for inst, arq, status in events]}
        for attempt in (1, 2):
            try:
                resp = self._post(body)
            except ks_exc.ConnectFailure as err:
                # The bind stands and Nova's own check of resolved ARQs finds it; one
                # line, no traceback: keystoneauth's text repeats urllib3's chain.
                LOG.warning('Nova events endpoint unreachable after %d attempt(s) (%s); '
                            '%d %s event(s) not delivered',
                            self.conf.nova.event_connect_attempts, type(err).__name__,
                            len(events), EVENT_NAME)
                return False
            except ks_exc.ClientException as err:
                LOG.warning('Sending %s events to Nova failed (%s: %s)', EVENT_NAME,
                            type(err).__name__, str(err).splitlines()[0][:200])
                return False
            self.sent += 1
            if resp.status_code == 200:
                return True
            if resp.status_code == 207:
                codes = [e.get('code') for e in resp.json().get('events', [])]
                if codes and all(c == 422 for c in codes) and attempt == 1:
                    time.sleep(self.conf.nova.event_retry_delay)
                    continue
                return True
            LOG.error('Nova answered %s to %s events: %s', resp.status_code,
                      EVENT_NAME, resp.text[:300])
            return False
        return True

    def stop(self):
        self._pool.shutdown(wait=False)
