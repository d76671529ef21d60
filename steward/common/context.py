"""Request context: who is calling, carried from the API through RPC to the agent."""
from oslo_context import context as oslo_context


class RequestContext(oslo_context.RequestContext):
    """oslo.context's context; ``service_roles`` come from a service token."""

    @property
    def is_service(self):
        from steward.conf import CONF
        wanted = set(CONF.api.service_token_roles)
        return bool(wanted & set(self.service_roles or ()))

    def to_policy_values(self):
        values = super().to_policy_values()
        values['is_admin'] = self.is_admin
        return values

    def to_dict(self):
        values = super().to_dict()
        values['service_roles'] = list(self.service_roles or ())
        return values

    @classmethod
    def from_dict(cls, values, **kwargs):
        kwargs.setdefault('service_roles', values.get('service_roles', []))
        kwargs.setdefault('is_admin', values.get('is_admin', False))
        return super().from_dict(values, **kwargs)


def get_admin_context(request_id=None):
    """The context internal work (agent reports, periodic tasks) runs as."""
    kwargs = {'roles': ['admin', 'member', 'reader'], 'service_roles': ['service'],
              'is_admin': True, 'overwrite': False}
    if request_id:
        kwargs['request_id'] = request_id
    return RequestContext(**kwargs)
