"""Policy enforcement for the API: one oslo.policy Enforcer per process.

The Enforcer is built once, with the defaults of steward/common/policy.py and
the operator's policy file ([oslo_policy] policy_file/policy_dirs) applied on
top, and then frozen: oslo.policy would otherwise look for and stat the policy
file(s) on every ``enforce()`` call. ``reload()`` (SIGHUP, tests) re-reads them.

Decisions are memoised: with frozen rules a decision depends only on the rule,
the target and the caller's credentials, and oslo.policy spends ~100 us per
``enforce()`` (mostly ``inspect.getfullargspec`` on every check node), while a
bench drives hundreds of requests a second through here.
"""
import threading

from oslo_policy import policy as oslo_policy

from steward.common import exception
from steward.common import policy as defaults
from steward.conf import CONF

_lock = threading.Lock()
_enforcer = None
_decisions = {}
_MAX_DECISIONS = 4096


def list_rules():
    return defaults.list_rules()


def get_enforcer():
    global _enforcer
    if _enforcer is None:
        with _lock:
            if _enforcer is None:
                enforcer = oslo_policy.Enforcer(CONF)
                enforcer.register_defaults(defaults.list_rules())
                _load(enforcer, force=False)
                _enforcer = enforcer
    return _enforcer


def _load(enforcer, force):
    _decisions.clear()
    enforcer.load_rules(force_reload=force)
    # NOTE(steward): freeze the loaded rules; see the module docstring.
    enforcer.use_conf = False


def reload():
    """Re-read the policy file(s), e.g. on SIGHUP."""
    with _lock:
        if _enforcer is not None:
            _load(_enforcer, force=True)


def reset():
    """Forget the Enforcer (tests that change policy options)."""
    global _enforcer
    with _lock:
        _enforcer = None
        _decisions.clear()


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


def authorize(ctx, rule, target=None):
    """Raise Forbidden (403, naming ``rule``) unless ``ctx`` may do ``rule``.

    The default target is the caller's own project: the persona rules then ask
    for a role in a project, and per-object ownership is enforced by scoping
    the queries (an ARQ of another project is simply not found).
    """
    if target is None:
        target = {'project_id': ctx.project_id, 'user_id': ctx.user_id}
    try:
        key = _key(rule, target, ctx)
        allowed = _decisions.get(key)
    except TypeError:       # an unhashable value: just don't memoise
        key = allowed = None
    if allowed is None:
        try:
            allowed = get_enforcer().enforce(rule, target, ctx.to_policy_values(),
                                             do_raise=False)
        except oslo_policy.InvalidScope:
            allowed = False
        if key is not None:
            if len(_decisions) >= _MAX_DECISIONS:
                _decisions.clear()
            _decisions[key] = allowed
    if not allowed:
        raise exception.Forbidden(action=rule)
