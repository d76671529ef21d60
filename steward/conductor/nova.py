"""accelerator-request-bound events to Nova (POST /os-server-external-events).

Sent off the request path from a small pool: a synchronous bind finishes before
Nova's instance is on a host, Nova answers 207 with per-event 422 and drops the
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


class NovaNotifier:
    def __init__(self, conf=CONF, adapter=None):
        self.conf = conf
        self._adapter = adapter
        self._pool = futurist.ThreadPoolExecutor(max_workers=4)
        self.sent = 0

    def _get_adapter(self):
        if self._adapter is None:
            auth = None
            if self.conf.nova.auth_type:
                auth = ks_loading.load_auth_from_conf_options(self.conf, 'nova')
            else:
                auth = ks_loading.get_plugin_loader('none').load_from_options()
            session = ks_loading.load_session_from_conf_options(self.conf, 'nova',
                                                                auth=auth)
            self._adapter = ks_loading.load_adapter_from_conf_options(
                self.conf, 'nova', session=session, auth=auth)
        return self._adapter

    def notify(self, events):
        """events: [(instance_uuid, arq_uuid, 'completed'|'failed')]. Never raises:
        a Nova problem must not fail a bind that succeeded."""
        if not events:
            return None
        if not configured(self.conf):
            LOG.info('No [nova] endpoint configured; not sending %d %s event(s)',
                     len(events), EVENT_NAME)
            return None
        return self._pool.submit(self._send, events)

    def _send(self, events):
        body = {'events': [{'name': EVENT_NAME, 'server_uuid': inst, 'tag': arq,
                            'status': status} for inst, arq, status in events]}
        for attempt in (1, 2):
            try:
                resp = self._get_adapter().post(
                    '/os-server-external-events', json=body, raise_exc=False,
                    microversion=MICROVERSION, timeout=self.conf.nova.event_timeout)
            except ks_exc.ConnectFailure as err:
                # Nothing listening (e.g. the single-host default, where a listener
                # exists only while `steward compute boot` waits): the bind stands
                # and Nova's own poll finds it; not an error of this service.
                LOG.warning('No Nova events endpoint answered (%s); %d %s event(s) '
                            'not delivered', err, len(events), EVENT_NAME)
                return False
            except ks_exc.ClientException as err:
                LOG.error('Sending %s events to Nova failed: %s', EVENT_NAME, err)
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
