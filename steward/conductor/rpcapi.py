"""Client side of the conductor: what the API and the agents call.

``ConductorAPI`` sends every call to the conductors over oslo.messaging, and
nothing else. A process that holds the ConductorManager itself (``steward
serve``, tests) calls it directly through steward/conductor/local_api.py's
``LocalConductorAPI`` instead: the same methods (``ConductorCalls``), no
serialisation, no transport hop. The composition root (steward/cmd) decides
which a caller gets. The ARQ operations reach the API through
steward/arqs/api.py (``ArqRPCAPI`` sends them with the ConductorAPI below).

History of the conductor RPC API:
    1.0 - report_data, arq_create, arq_bind, arq_unbind, arq_delete,
          device_set_status, deployable_program
    1.1 - device cleanup (spec 1). From the API: device_clean, device_clean_plan.
          From agents: device_cleanup_start, device_cleanup_progress,
          device_cleanup_finish, device_recovery_info, device_fail_interrupted,
          device_recover_missed_cleanup.
    1.2 - device_release_for_cleaning (cast). An API process that runs the ARQ
          operations itself (steward/arqs/service.py) hands a released device's
          cleanup to a conductor with it; arq_create, arq_bind, arq_unbind and
          arq_delete stay for APIs of earlier releases and capped ones.
    1.3 - report_unchanged. An agent whose report has the digest a conductor
          last answered it with sends only the digest; ``{'resend': True}``
          asks it for the whole report (report_data, which stays for agents of
          earlier releases and capped ones).
    1.4 - report_quiet (cast). The same digest, not waited on: answering a
          call costs a conductor more than taking the report (a reply
          published and confirmed by the broker). A conductor that cannot take
          the digest asks the host's agent for the whole report (agent RPC 1.2
          report_again); an agent casts only once a conductor's answer said it
          can (``quiet_cast``), so a conductor capped below agent 1.2 keeps
          being called.
"""
import logging

import futurist
import oslo_messaging as messaging

from steward.common import exception
from steward.common import report_digest
from steward.common import rpc
from steward.conf import CONF

LOG = logging.getLogger(__name__)

RPC_API_VERSION = '1.4'
# What an API process needs of the conductors to run the ARQ operations itself.
LOCAL_ARQS_VERSION = '1.2'
# What an agent needs of the conductors to send only its report's digest.
REPORT_DIGEST_VERSION = report_digest.CONDUCTOR_RPC_VERSION
# What an agent needs of the conductors to cast its quiet reports.
QUIET_CAST_VERSION = '1.4'
# Clients are built at the oldest version: each 1.1 method asks for 1.1 itself, so a
# rolling upgrade's [upgrade_levels] conductor = 1.0 still lets 1.0 calls through.
BASE_VERSION = '1.0'

# What the API asks for a caller who is waiting on the answer: with the broker
# down these give up after [DEFAULT] rpc_unavailable_timeout (the API answers 503)
# and are never sent later. Agents' calls (reports, cleanup progress) keep waiting
# for the broker: they are better delivered late than lost.
CALLER_WAITS = frozenset({'arq_create', 'arq_bind', 'arq_unbind', 'arq_delete',
                          'device_set_status', 'deployable_program', 'device_clean',
                          'device_clean_plan'})


class ConductorCalls:
    """What callers ask of a conductor, each method named as the RPC method it
    is; how a call is carried is the subclass's ``_call(ctx, method, timeout=None,
    version=None, **kwargs)``: ConductorAPI (over RPC) or
    local_api.LocalConductorAPI (the ConductorManager of this process)."""

    def _call(self, ctx, method, timeout=None, version=None, **kwargs):
        raise NotImplementedError

    def report_data(self, ctx, host, rp_name, devices):
        """devices: list of DriverDevice dicts. Returns a summary dict."""
        return self._call(ctx, 'report_data', host=host, rp_name=rp_name,
                          devices=devices)

    def report_unchanged(self, ctx, host, rp_name, digest, read_at=None):
        """1.3: the report of ``host`` has ``digest``, the one a conductor last
        answered a report of it with; ``read_at``: the newest time of its health
        readings. Returns the summary, or ``{'resend': True}``: send report_data."""
        return self._call(ctx, 'report_unchanged', version=REPORT_DIGEST_VERSION,
                          host=host, rp_name=rp_name, digest=digest, read_at=read_at)

    # The ARQ operations run by a conductor: what steward/arqs/api.py's ArqRPCAPI
    # sends (API processes of earlier releases, capped ones, API hosts whose
    # [placement] names no service).
    def arq_create(self, ctx, device_profile_name, project_id):
        return self._call(ctx, 'arq_create', device_profile_name=device_profile_name,
                          project_id=project_id)

    def arq_bind(self, ctx, bindings):
        return self._call(ctx, 'arq_bind', timeout=CONF.rpc_response_timeout_bind,
                          bindings=bindings)

    def arq_unbind(self, ctx, arq_uuids):
        return self._call(ctx, 'arq_unbind', arq_uuids=arq_uuids)

    def arq_delete(self, ctx, arq_uuids=None, instance_uuid=None, project_id=None):
        return self._call(ctx, 'arq_delete', arq_uuids=arq_uuids,
                          instance_uuid=instance_uuid, project_id=project_id)

    def device_set_status(self, ctx, device_uuid, status):
        return self._call(ctx, 'device_set_status', device_uuid=device_uuid,
                          status=status)

    def deployable_program(self, ctx, deployable_uuid, image_uuid):
        return self._call(ctx, 'deployable_program', deployable_uuid=deployable_uuid,
                          image_uuid=image_uuid)

    # -- 1.1: device cleanup -------------------------------------------------------
    def device_clean(self, ctx, device_uuid):
        """Operator re-clean (POST /v2/devices/{uuid}/clean): error -> pending_cleaning
        and the agent is asked to clean it."""
        return self._call(ctx, 'device_clean', version='1.1', device_uuid=device_uuid)

    def device_clean_plan(self, ctx, device_uuid):
        return self._call(ctx, 'device_clean_plan', version='1.1', device_uuid=device_uuid)

    def device_cleanup_start(self, ctx, device_uuid, host, trigger):
        """pending_cleaning -> cleaning; returns {'device': ..., 'erase_record': uuid}."""
        return self._call(ctx, 'device_cleanup_start', version='1.1',
                          device_uuid=device_uuid, host=host, trigger=trigger)

    def device_cleanup_progress(self, ctx, record_uuid, phase, percent, detail):
        return self._call(ctx, 'device_cleanup_progress', version='1.1',
                          record_uuid=record_uuid, phase=phase, percent=percent,
                          detail=detail)

    def device_cleanup_finish(self, ctx, device_uuid, record_uuid, succeeded, record,
                              error_code=None, error_message=None):
        return self._call(ctx, 'device_cleanup_finish', version='1.1',
                          device_uuid=device_uuid, record_uuid=record_uuid,
                          succeeded=succeeded, record=record, error_code=error_code,
                          error_message=error_message)

    def device_recovery_info(self, ctx, host, agent_version):
        return self._call(ctx, 'device_recovery_info', version='1.1', host=host,
                          agent_version=agent_version)

    def device_fail_interrupted(self, ctx, device_uuid, reason):
        return self._call(ctx, 'device_fail_interrupted', version='1.1',
                          device_uuid=device_uuid, reason=reason)

    def device_recover_missed_cleanup(self, ctx, device_uuid):
        return self._call(ctx, 'device_recover_missed_cleanup', version='1.1',
                          device_uuid=device_uuid)


class ConductorAPI(ConductorCalls):
    """The conductors over RPC on ``transport`` (a steward.common.rpc.Transport),
    capped at ``version_cap`` (``[upgrade_levels] conductor``). Every call crosses
    the broker."""

    def __init__(self, *, transport, version_cap=None):
        self._transport = transport
        # The thread that sends device_release_for_cleaning (started on first use).
        self._casts = futurist.ThreadPoolExecutor(max_workers=1)
        self._client = transport.client(CONF.rpc_topic_conductor, BASE_VERSION,
                                        version_cap=version_cap)

    def can_send_version(self, version):
        """Whether ``[upgrade_levels] conductor`` lets ``version`` through."""
        return self._client.can_send_version(version)

    def _call(self, ctx, method, timeout=None, version=None, **kwargs):
        prepare = {k: v for k, v in (('timeout', timeout), ('version', version)) if v}
        if method in CALLER_WAITS:
            bound = CONF.rpc_unavailable_timeout
            if not self._transport.reply_queue_ready(bound):
                raise exception.ServiceUnavailable(
                    service='The message broker',
                    reason=f'not reachable within {bound:g} s')
            prepare['retry'] = rpc.retries_within(bound)
        client = self._client.prepare(**prepare) if prepare else self._client
        return client.call(ctx, method, **kwargs)

    def can_cast_quiet(self):
        """Whether report_quiet goes: to conductors not capped below 1.4."""
        return self._client.can_send_version(QUIET_CAST_VERSION)

    def report_quiet(self, ctx, host, rp_name, digest, read_at=None):
        """1.4 (cast): report_unchanged without waiting for the answer; a
        conductor that cannot take ``digest`` asks the agent for the whole report
        (agent RPC report_again)."""
        self._client.prepare(version=QUIET_CAST_VERSION).cast(
            ctx, 'report_quiet', host=host, rp_name=rp_name, digest=digest,
            read_at=read_at)

    # -- 1.2: the ARQ operations in an API process -----------------------------------
    def device_release_for_cleaning(self, ctx, device_uuid):
        """Cast: a conductor asks the agent of ``device_uuid`` (released by an ARQ
        operation of this process) to clean it. Sent from a thread of its own, so
        the release's answer never waits for the broker; with the broker
        unreachable it gives up after [DEFAULT] rpc_unavailable_timeout and logs:
        the release is committed, the device stays reserved, and a conductor's
        periodic clean_missed_releases asks its agent later. Returns a Future."""
        return self._casts.submit(self._cast_release, ctx, device_uuid)

    def _cast_release(self, ctx, device_uuid):
        client = self._client.prepare(version=LOCAL_ARQS_VERSION,
                                      retry=rpc.retries_within(CONF.rpc_unavailable_timeout))
        try:
            client.cast(ctx, 'device_release_for_cleaning', device_uuid=device_uuid)
        except messaging.MessagingException as err:
            LOG.error('device %s: cleanup could not be handed to a conductor (%s); a '
                      'conductor\'s periodic task asks its agent later', device_uuid, err)
