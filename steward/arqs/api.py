"""How the API runs the ARQ operations: one interface, two implementations that
say what they are (as Nova's conductor has LocalComputeTaskAPI and
ComputeTaskAPI).

* ``LocalArqAPI(service)``: the steward/arqs/service.py ``ARQService`` of this
  process, called directly. What ``steward api`` runs (each process holds an
  ARQService of its own) and ``steward serve`` (its conductor's).
* ``ArqRPCAPI(conductor_api)``: the conductors run them; sent over RPC
  (arq_create, arq_bind, arq_unbind, arq_delete of conductor RPC 1.0) through
  the steward/conductor/rpcapi.py ``ConductorAPI`` it is handed. A caller
  waits: with the broker unreachable a call gives up after ``[DEFAULT]
  rpc_unavailable_timeout`` and the API answers 503 (``CALLER_WAITS``). What a
  ``steward api`` runs when it cannot run them itself (Root.api_arqs).

The composition root (steward/cmd/root.py) decides which and hands it to the
API app, where handlers find it as ``req.arqs`` (steward/api/handlers/arqs.py).
"""
import abc


class ArqAPI(abc.ABC):
    """The ARQ operations. Each returns what ARQService's returns: records
    (steward/db/arqs.py ``arq_record``) for create and bind, a count for delete."""

    #: Whether the operations run in this process (no broker crossed).
    local = False

    @abc.abstractmethod
    def arq_create(self, ctx, device_profile_name, project_id):
        """New ARQs of the named profile in ``project_id``: their records."""

    @abc.abstractmethod
    def arq_bind(self, ctx, bindings):
        """Bind ARQs (dicts of uuid, hostname, device_rp_uuid, instance_uuid,
        optionally project_id), all or nothing: the bound records."""

    @abc.abstractmethod
    def arq_unbind(self, ctx, arq_uuids):
        """Unbind ARQs."""

    @abc.abstractmethod
    def arq_delete(self, ctx, arq_uuids=None, instance_uuid=None, project_id=None):
        """Delete ARQs by uuid, or all of an instance's: how many."""


class LocalArqAPI(ArqAPI):
    """The ARQ operations run by ``service`` (a steward.arqs.service.ARQService)
    in this process."""

    local = True

    def __init__(self, service):
        self.service = service

    def arq_create(self, ctx, device_profile_name, project_id):
        return self.service.arq_create(ctx, device_profile_name=device_profile_name,
                                       project_id=project_id)

    def arq_bind(self, ctx, bindings):
        return self.service.arq_bind(ctx, bindings=bindings)

    def arq_unbind(self, ctx, arq_uuids):
        return self.service.arq_unbind(ctx, arq_uuids=arq_uuids)

    def arq_delete(self, ctx, arq_uuids=None, instance_uuid=None, project_id=None):
        return self.service.arq_delete(ctx, arq_uuids=arq_uuids,
                                       instance_uuid=instance_uuid, project_id=project_id)


class ArqRPCAPI(ArqAPI):
    """The ARQ operations sent to the conductors over RPC by ``conductor_api``
    (a steward.conductor.rpcapi.ConductorAPI: a bind waits up to ``[DEFAULT]
    rpc_response_timeout_bind``; every call gives up with 503 when the broker
    cannot be reached within ``rpc_unavailable_timeout``)."""

    def __init__(self, conductor_api):
        self.conductor_api = conductor_api

    def arq_create(self, ctx, device_profile_name, project_id):
        return self.conductor_api.arq_create(ctx, device_profile_name, project_id)

    def arq_bind(self, ctx, bindings):
        return self.conductor_api.arq_bind(ctx, bindings)

    def arq_unbind(self, ctx, arq_uuids):
        return self.conductor_api.arq_unbind(ctx, arq_uuids)

    def arq_delete(self, ctx, arq_uuids=None, instance_uuid=None, project_id=None):
        return self.conductor_api.arq_delete(ctx, arq_uuids=arq_uuids,
                                             instance_uuid=instance_uuid,
                                             project_id=project_id)
