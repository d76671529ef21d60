"""Policy enforcement for the API: one ``Enforcer`` per process, built by the
command's composition root (steward/cmd/root.py) and handed to the API app.

The oslo.policy Enforcer inside is built once, with the defaults of
steward/common/policy.py and the operator's policy file ([oslo_policy]
policy_file/policy_dirs) applied on top, and then frozen: oslo.policy would
otherwise look for and stat the policy file(s) on every ``enforce()`` call.
``reload()`` re-reads them; ``request_reload()`` is what a SIGHUP handler calls
(it only sets a flag: the next ``authorize()`` reloads, outside the handler).

Decisions are memoised: with frozen rules a decision depends only on the rule,
the target and the caller's credentials, and oslo.policy spends ~100 us per
``enforce()`` (mostly ``inspect.getfullargspec`` on every check node), while a
bench drives hundreds of requests a second through here.
"""
import logging
import threading

from oslo_policy import policy as oslo_policy

from steward.common import exception
from steward.common import policy as defaults
from steward.conf import CONF

LOG = logging.getLogger(__name__)
_MAX_DECISIONS = 4096


def list_rules():
    return defaults.list_rules()


# Every context attribute that RequestContext.to_policy_values() exposes (plus
# our is_admin): a memoised decision is keyed on all of them, so a policy file
# checking any credential stays correct.
_CREDENTIAL_ATTRS = ('user_id', 'user_domain_id', 'system_scope', 'domain_id',
                     'project_id', 'project_domain_id', 'is_admin_project',
                     'service_user_id', 'service_user_domain_id', 'service_project_id',
                     'service_project_domain_id', 'is_admin')


def _key(rule, target, ctx):
    return (rule, tuple(sorted(target.items())),
            tuple(getattr(ctx, a, None) for a in _CREDENTIAL_ATTRS),
            tuple(ctx.roles or ()), tuple(ctx.service_roles or ()))


class Enforcer:
    """The policy of one process: ``authorize()`` decides, ``reload()`` re-reads
    the policy file(s). ``conf``: the configuration ([oslo_policy])."""

    def __init__(self, conf=None):
        self._lock = threading.Lock()
        self._decisions = {}
        self._reload_requested = False
        self._enforcer = oslo_policy.Enforcer(CONF if conf is None else conf)
        self._enforcer.register_defaults(defaults.list_rules())
        self._load(force=False)

    def _load(self, force):
        self._enforcer.load_rules(force_reload=force)
        # NOTE(steward): freeze the loaded rules; see the module docstring.
        self._enforcer.use_conf = False
        self._decisions = {}

    def reload(self):
        """Re-read the policy file(s) now. A file that cannot be read or parsed
        leaves the rules as they were (and says so)."""
        with self._lock:
            return self._reload_locked()

    def _reload_locked(self):
        self._reload_requested = False
        try:
            self._load(force=True)
        except Exception:   # noqa: BLE001 - keep serving with the rules loaded
            LOG.exception('Policy reload failed; the previous rules stay')
            self._enforcer.use_conf = False
            return False
        LOG.info('Policy reloaded (%s)', CONF.oslo_policy.policy_file)
        return True

    def _reload_if_requested(self):
        with self._lock:
            if self._reload_requested:      # not done by another thread meanwhile
                self._reload_locked()

    def request_reload(self):
        """Safe in a signal handler: only sets a flag (no lock, no I/O); the next
        ``authorize()`` reloads."""
        self._reload_requested = True

    def authorize(self, ctx, rule, target=None):
        """Raise Forbidden (403, naming ``rule``) unless ``ctx`` may do ``rule``.

        The default target is the caller's own project: the persona rules then ask
        for a role in a project, and per-object ownership is enforced by scoping
        the queries (an ARQ of another project is simply not found).
        """
        if self._reload_requested:
            self._reload_if_requested()
        if target is None:
            target = {'project_id': ctx.project_id, 'user_id': ctx.user_id}
        decisions = self._decisions
        try:
            key = _key(rule, target, ctx)
            allowed = decisions.get(key)
        except TypeError:       # an unhashable value: just don't memoise
            key = allowed = None
        if allowed is None:
            try:
                allowed = self._enforcer.enforce(rule, target, ctx.to_policy_values(),
                                                 do_raise=False)
            except oslo_policy.InvalidScope:
                allowed = False
            if key is not None:
                if len(decisions) >= _MAX_DECISIONS:
                    decisions.clear()
                decisions[key] = allowed
        if not allowed:
            raise exception.Forbidden(action=rule)
