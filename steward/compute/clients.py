"""The two services the compute side talks to: Steward's accelerator API and
Placement. Every failed call becomes ServiceCallFailed naming the call, the
status and the service's own error text.

The accelerator API is asked for microversion 2.4 (``attach_handle_info.managed``
on PCI ARQs, spec 4): real Nova sends no header and is served 2.0. Under
``[api] auth_strategy = noauth`` a request without identity headers is an admin
with a service token, which binding and ``DELETE ?instance=`` need; with
Keystone, pass a token that carries the service role.
"""
import json
import logging
import urllib.parse

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
import requests

from steward.common import exception
from steward.placement import transport as placement_transport

LOG = logging.getLogger(__name__)

ACCELERATOR_MICROVERSION = '2.4'
TIMEOUT = 60
# A Steward API being restarted refuses connections for a moment: keystoneauth
# tries again (0.5 s apart, doubling) before the call fails.
CONNECT_RETRIES = 3


def _detail(text):
    """The error text of a Steward, Placement or unknown error body."""
    try:
        doc = json.loads(text)
    except ValueError:
        return ' '.join(text.split())[:300] or 'no body'
    if isinstance(doc, dict):
        if 'error_message' in doc:
            code = doc.get('error_code')
            return f"{doc['error_message']}" + (f' ({code})' if code else '')
        errs = doc.get('errors')
        if isinstance(errs, list) and errs and isinstance(errs[0], dict):
            e = errs[0]
            return ' '.join(str(e.get('detail') or e.get('title')).split()) + \
                (f" ({e['code']})" if e.get('code') else '')
    return ' '.join(text.split())[:300]


def _unexpected(service, call, resp):
    """The ServiceCallFailed of an answer with a status the call does not expect;
    ``http_status`` lets callers tell e.g. a 404 apart."""
    err = exception.ServiceCallFailed(
        service=service, call=call, reason=f'HTTP {resp.status_code}: {_detail(resp.text)}')
    err.http_status = resp.status_code
    return err


class StewardApi:
    """The accelerator API calls Nova makes (cyborg-api.md §11)."""

    def __init__(self, endpoint, token=None, timeout=TIMEOUT):
        base = endpoint.rstrip('/')
        if base.endswith('/v2'):
            base = base[:-3]
        self.endpoint = base + '/v2'
        http = requests.Session()
        http.trust_env = False   # an http_proxy from the environment must not catch loopback
        # A token: keystoneauth's token_endpoint plugin sends it as X-Auth-Token; it
        # is the service token too (binding needs the service role). None: noauth.
        auth = token_endpoint.Token(self.endpoint, token) if token else None
        self._session = ks_session.Session(auth=auth, session=http, timeout=timeout)
        self._http = ks_adapter.Adapter(
            self._session, service_type='accelerator', endpoint_override=self.endpoint,
            default_microversion=ACCELERATOR_MICROVERSION, raise_exc=False,
            connect_retries=CONNECT_RETRIES,
            additional_headers={'Accept': 'application/json',
                                **({'X-Service-Token': token} if token else {})})

    def close(self):
        self._session.session.close()

    def _call(self, method, path, ok=(200,), **kwargs):
        call = f'{method} {path}'
        try:
            resp = self._http.request(path, method, **kwargs)
        except ks_exc.ClientException as err:
            raise exception.ServiceCallFailed(service='Steward API', call=call,
                                              reason=f'{type(err).__name__}: {err} '
                                                     f'({self.endpoint})') from None
        if resp.status_code not in ok:
            raise _unexpected('Steward API', call, resp)
        return resp

    def device_profile(self, name):
        """The one profile called ``name`` (Nova requires exactly one)."""
        found = self._call('GET', '/device_profiles',
                           params={'name': name}).json()['device_profiles']
        found = [p for p in found if p.get('name') == name]
        if len(found) != 1:
            raise exception.DeviceProfileUnusable(
                name=name, reason='no such device profile' if not found
                else f'{len(found)} profiles have that name')
        return found[0]

    def create_arqs(self, device_profile_name):
        return self._call('POST', '/accelerator_requests', ok=(201,),
                          json={'device_profile_name': device_profile_name}
                          ).json()['arqs']

    def bind(self, bindings):
        """One collection PATCH for all ARQs: ``{arq_uuid: {hostname,
        device_rp_uuid, instance_uuid}}``."""
        body = {arq: [{'op': 'add', 'path': f'/{k}', 'value': v}
                      for k, v in sorted(values.items())]
                for arq, values in bindings.items()}
        self._call('PATCH', '/accelerator_requests', ok=(202,), json=body)

    def resolved_arqs(self, instance_uuid):
        """The instance's ARQs once all are resolved, or None while binding (423)."""
        resp = self._call('GET', '/accelerator_requests', ok=(200, 423),
                          params={'instance': instance_uuid, 'bind_state': 'resolved'})
        return None if resp.status_code == 423 else resp.json()['arqs']

    def list_arqs(self, instance_uuid=None):
        params = {'instance': instance_uuid} if instance_uuid else None
        return self._call('GET', '/accelerator_requests', params=params).json()['arqs']

    def delete_arqs_of_instance(self, instance_uuid):
        self._call('DELETE', '/accelerator_requests', ok=(204,),
                   params={'instance': instance_uuid})

    def delete_arqs(self, uuids):
        """Delete ``uuids``, whichever of them still exist (``?arqs=`` is all or
        nothing, so after a 404 each is deleted on its own)."""
        if not uuids:
            return
        try:
            self._call('DELETE', '/accelerator_requests', ok=(204,),
                       params={'arqs': ','.join(uuids)})
            return
        except exception.ServiceCallFailed as err:
            if getattr(err, 'http_status', None) != 404:
                raise
        for uuid in uuids:
            self._call('DELETE', f'/accelerator_requests/{uuid}', ok=(204, 404))


class PlacementApi:
    """Placement at 1.39 through keystoneauth: ``endpoint`` given means a noauth2
    Placement (the embedded one; token ``admin``), else the ``[placement]``
    keystone options."""

    def __init__(self, adapter):
        self._adapter = adapter

    @classmethod
    def from_conf(cls, conf, endpoint=None):
        # The conductor's Placement client builds the same adapter; every call
        # here passes raise_exc=False too.
        return cls(placement_transport.build_adapter(conf, endpoint, default_timeout=TIMEOUT))

    def call(self, method, path, body=None, ok=(200,), params=None):
        if params:
            path = f'{path}?{urllib.parse.urlencode(params)}'
        call = f'{method} {path}'
        try:
            resp = self._adapter.request(path, method, json=body, raise_exc=False)
        except ks_exc.ClientException as err:
            raise exception.ServiceCallFailed(
                service='Placement', call=call,
                reason=str(err) or type(err).__name__) from None
        if resp.status_code not in ok:
            err = _unexpected('Placement', call, resp)
            try:
                err.placement_code = resp.json()['errors'][0].get('code')
            except (ValueError, KeyError, IndexError, TypeError):
                err.placement_code = None
            raise err
        return resp

    def get(self, path, params=None):
        return self.call('GET', path, params=params).json()
