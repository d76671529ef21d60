"""The ARQ half of a boot (spec 3, "Nova changes for Assignment workflow"):

1. ``POST /v2/accelerator_requests`` for the profile;
2. match each ARQ to its provider: ARQ ``device_profile_group_id`` N -> request
   group ``device_profile_<N>`` -> the provider the chosen candidate's
   ``mappings`` give for that group's suffix;
3. bind all ARQs in one collection PATCH (hostname = the compute node's name);
4. as Nova does: ask which ARQs are already resolved (an event for them may have
   come before the wait, or been lost: either way it is not waited for), then wait
   for one ``accelerator-request-bound`` event per ARQ still unresolved, at most
   ``arq_binding_timeout`` seconds (a timeout or a ``failed`` event aborts);
5. ``GET ?instance=&bind_state=resolved`` (2.4) and check every ARQ is Bound.

``undo`` unbinds and deletes whatever ARQs exist for the instance, bound or not.
"""
import logging
import time

import tenacity

from steward.common import exception

LOG = logging.getLogger(__name__)

BOUND = 'Bound'
_RESOLVE_POLL = 0.2


def match(arqs, request, claim):
    """{arq uuid: device rp uuid}; every ARQ must land on a provider of the claim."""
    by_group = {}
    for group in request.profile_groups():
        index = int(group.requester_id.rsplit('_', 1)[1])
        by_group[index] = group
    out = {}
    for arq in arqs:
        gid = arq.get('device_profile_group_id')
        group = by_group.get(gid)
        if group is None:
            raise exception.BindFailed(instance=claim.instance_uuid,
                                       reason=f'ARQ {arq["uuid"]} is for profile group '
                                              f'{gid}, which the request does not have')
        rp = claim.provider_for(group.mapping_key)
        if rp is None:
            raise exception.BindFailed(instance=claim.instance_uuid,
                                       reason=f'the chosen candidate maps no provider to '
                                              f'{group.requester_id} ({group.mapping_key})')
        out[arq['uuid']] = rp
    return out


def bind(api, arqs, matches, hostname, instance_uuid):
    bindings = {arq['uuid']: {'hostname': hostname, 'instance_uuid': instance_uuid,
                              'device_rp_uuid': matches[arq['uuid']]} for arq in arqs}
    try:
        api.bind(bindings)
    except exception.ServiceCallFailed as err:
        raise exception.BindFailed(instance=instance_uuid, reason=err.msg) from None


def wait_bound(api, listener, instance_uuid, expected, timeout):
    """Nova's _get_bound_arq_resources: the wait is armed before the bind
    (listener.expect); ARQs Steward already resolved leave it early."""
    arqs = api.resolved_arqs(instance_uuid)            # None while some are binding
    early = [a['uuid'] for a in arqs or () if a['uuid'] in expected]
    listener.exit_early(instance_uuid, early)
    if early:
        LOG.debug('Instance %s: ARQs %s already resolved; no event awaited', instance_uuid,
                  ', '.join(early))
    statuses = listener.wait(instance_uuid, timeout)
    failed = sorted(t for t, s in statuses.items() if s != 'completed')
    if failed:
        raise exception.BindFailed(instance=instance_uuid,
                                   reason='Steward reported failed binds for '
                                          + ', '.join(failed))
    return statuses


def resolved(api, instance_uuid, expected, deadline):
    """The instance's resolved ARQs (423 is retried until ``deadline``); every one
    of ``expected`` must be there and Bound."""
    def unresolved(_state):
        raise exception.BindFailed(instance=instance_uuid,
                                   reason='its ARQs stayed unresolved (423)')

    arqs = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda found: found is None),
        stop=lambda _state: time.monotonic() > deadline,
        wait=tenacity.wait_fixed(_RESOLVE_POLL), retry_error_callback=unresolved)(
        api.resolved_arqs, instance_uuid)
    by_uuid = {a['uuid']: a for a in arqs}
    missing = sorted(set(expected) - set(by_uuid))
    if missing:
        raise exception.BindFailed(instance=instance_uuid,
                                   reason='ARQs missing after bind: ' + ', '.join(missing))
    unbound = sorted(f"{u} ({by_uuid[u]['state']})" for u in expected
                     if by_uuid[u]['state'] != BOUND)
    if unbound:
        raise exception.BindFailed(instance=instance_uuid,
                                   reason='ARQs not bound: ' + ', '.join(unbound))
    return [by_uuid[u] for u in expected]


def undo(api, instance_uuid, arq_uuids):
    """Unbind and delete the instance's ARQs: the bound ones by instance
    (idempotent), then any of ``arq_uuids`` left (never bound)."""
    api.delete_arqs_of_instance(instance_uuid)
    if arq_uuids:
        left = {a['uuid'] for a in api.list_arqs()} & set(arq_uuids)
        api.delete_arqs(sorted(left))
