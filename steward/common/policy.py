"""Default policy rules: upstream Cyborg 17.0.0's, rule for rule, plus Steward's own.

Registered as defaults on the API's Enforcer (steward/api/policy.py) and listed
for ``oslopolicy-sample-generator`` through the ``oslo.policy.policies`` entry
point (``steward.common.policy:list_rules``). A policy file overrides any rule.

Every rule name upstream Cyborg defines (cyborg/policies/*.py of
openstack-cyborg 17.0.0) is here with upstream's check string, scope types and
deprecated rule, so an operator's policy.yaml written for Cyborg means the same
here; tests/functional/api/test_policy_upstream.py compares them with upstream's,
rule by rule. In particular a project's **manager** reads devices, deployables
and attributes (upstream: "capacity planning and troubleshooting"), and every
upstream rule is project-scoped: a system-scoped token is refused.

One difference, in configuration rather than in the rules: upstream forces
``[oslo_policy] enforce_new_defaults = False``, which ORs each rule with its
deprecated one; the legacy ``admin_or_owner`` check is satisfied by any caller
with a project (the target is the caller's own project), which is how device
reads ended up open to everyone before (upstream defect 6, CVE-2026-40213).
Steward keeps oslo.policy's default, ``True``: the deprecated rules are listed
(an operator may still turn them on) but not applied.

Steward's own rules (device clean, clean plan, erase records, history) are not
upstream's and stay with the cloud operator: the admin role, or a system-scoped
reader for the records (``rule:cloud_reader``). They name hosts, PCI addresses,
serial numbers and every tenant's cleanup history.

The service-token requirement of bind/unbind and delete-by-instance is not a
policy rule: it is checked in the ARQ handlers (``ctx.is_service``), as upstream
hard-codes it, so a policy file cannot switch it off by accident.
"""
from oslo_log import versionutils
from oslo_policy import policy

# -- upstream's base rules (cyborg/policies/base.py) ---------------------------------
DEPRECATED_REASON = """
Cyborg API policies are introducing new default roles with scope_type
capabilities. We will start to deprecate old policies from WALLABY release,
and are going to ignore all the old policies silently from X release.
Be sure to take these new defaults into consideration if you are
relying on overrides in your deployment for the policy API.
"""
WALLABY = versionutils.deprecated.WALLABY
GAZPACHO = versionutils.deprecated.GAZPACHO

DEPRECATED_DEFAULT = 'rule:admin_or_owner'
DEPRECATED_IS_ADMIN = 'rule:is_admin'

# Upstream names this deprecated rule 'rule:admin_or_owner' (sic).
DEPRECATED_ADMIN_OR_OWNER = policy.DeprecatedRule(
    name='rule:admin_or_owner',
    check_str='is_admin:True or project_id:%(project_id)s',
    deprecated_reason=DEPRECATED_REASON,
    deprecated_since=WALLABY,
)

ADMIN = 'rule:admin_api'
PROJECT_READER_OR_ADMIN = 'rule:project_reader_or_admin'
PROJECT_MANAGER_OR_ADMIN = 'rule:project_manager_or_admin'
PROJECT_MEMBER_OR_SERVICE = 'rule:project_member_or_service'
CLOUD_READER = 'rule:cloud_reader'

_PROJECT = ['project']
_SYSTEM_AND_PROJECT = ['system', 'project']


def _legacy(name, check_str, description):
    return policy.RuleDefault(name=name, check_str=check_str, description=description,
                              deprecated_for_removal=True,
                              deprecated_reason=DEPRECATED_REASON,
                              deprecated_since=WALLABY)


base_rules = [
    policy.RuleDefault('admin_api', 'role:admin',
                       description='Legacy rule for cloud admin access'),
    policy.RuleDefault('project_admin_api', 'role:admin and project_id:%(project_id)s',
                       description='Default rule for Project level admin APIs.'),
    policy.RuleDefault('project_member_api', 'role:member and project_id:%(project_id)s',
                       description='Default rule for Project level non admin APIs.'),
    policy.RuleDefault('project_reader_api', 'role:reader and project_id:%(project_id)s',
                       description='Default rule for Project level read only APIs.'),
    policy.RuleDefault('project_member_or_admin',
                       'rule:project_member_api or rule:admin_api',
                       description='Default rule for Project Member or admin APIs.',
                       deprecated_rule=DEPRECATED_ADMIN_OR_OWNER),
    policy.RuleDefault('project_reader_or_admin',
                       'rule:project_reader_api or rule:admin_api',
                       description='Default rule for Project reader or admin APIs.',
                       deprecated_rule=DEPRECATED_ADMIN_OR_OWNER),
    policy.RuleDefault('service_api', 'role:service',
                       description='Default rule for service-to-service APIs.'),
    policy.RuleDefault('project_manager_api',
                       'role:manager and project_id:%(project_id)s',
                       description='Default rule for project manager APIs.'),
    policy.RuleDefault('project_manager_or_admin',
                       'rule:project_manager_api or rule:admin_api',
                       description='Default rule for project manager or admin APIs.',
                       deprecated_rule=DEPRECATED_ADMIN_OR_OWNER),
    policy.RuleDefault('project_member_or_service',
                       'rule:project_member_api or rule:service_api',
                       description='Default rule for project member or service APIs.',
                       deprecated_rule=DEPRECATED_ADMIN_OR_OWNER),
    # Upstream's legacy rules, deprecated for removal; a deprecated rule above
    # names them.
    _legacy('public_api', 'is_public_api:True',
            'legacy rule of Internal flag for public API routes'),
    _legacy('allow', '@', 'legacy rule: any access will be passed'),
    _legacy('deny', '!', 'legacy rule: all access will be forbidden'),
    _legacy('default', 'rule:admin_or_owner', 'Legacy rule for default rule'),
    _legacy('is_admin', 'rule:admin_api', 'Full read/write API access'),
    _legacy('admin_or_owner', 'is_admin:True or project_id:%(project_id)s',
            'Admin or owner API access'),
    _legacy('admin_or_user', 'is_admin:True or user_id:%(user_id)s',
            'Admin or user API access'),
]

# -- Steward's own base rules ---------------------------------------------------------
steward_base_rules = [
    policy.RuleDefault('system_reader_api', 'role:reader and system_scope:all',
                       description='Reader of the whole cloud (system-scoped token).'),
    policy.RuleDefault('cloud_reader', 'rule:admin_api or rule:system_reader_api',
                       description='Cloud admin or system-scoped reader: who may see '
                                   'the cloud\'s cleanup records and device history.'),
]


def _deprecated(name, check_str, reason, since):
    return policy.DeprecatedRule(name=name, check_str=check_str,
                                 deprecated_reason=reason, deprecated_since=since)


def _rule(name, check_str, description, operations, deprecated=None, scope=_PROJECT):
    return policy.DocumentedRuleDefault(
        name=name, check_str=check_str, description=description,
        operations=[{'method': m, 'path': p} for m, p in operations],
        scope_types=scope, deprecated_rule=deprecated)


def _arq_reason(what):
    return (f'rule:default (admin_or_owner) is replaced by {what}')


_READ_ARQS = 'project_reader_or_admin to grant readers explicit read-only access ' \
             'to their own ARQs'
_MODERN = 'project_member_or_service to use modern personas'


def _manager_reason(what):
    return ('rule:admin_api is replaced by project_manager_or_admin to grant the '
            f'manager persona read access to {what} for capacity planning and '
            'troubleshooting')


_HARDWARE = 'hardware inventory'
_DEPLOYABLES = 'deployable inventory'
_METADATA = 'accelerator capability metadata'

upstream_rules = [
    # Accelerator requests (cyborg/policies/arqs.py).
    _rule('cyborg:arq:get_all', PROJECT_READER_OR_ADMIN,
          'Retrieve all accelerator requests (non-admins see their project only).',
          [('GET', '/v2/accelerator_requests')],
          _deprecated('cyborg:arq:get_all', DEPRECATED_DEFAULT,
                      _arq_reason(_READ_ARQS), GAZPACHO)),
    _rule('cyborg:arq:get_one', PROJECT_READER_OR_ADMIN,
          'Retrieve a specific accelerator request.',
          [('GET', '/v2/accelerator_requests/{arqs_uuid}')],
          _deprecated('cyborg:arq:get_one', DEPRECATED_DEFAULT,
                      _arq_reason(_READ_ARQS), GAZPACHO)),
    _rule('cyborg:arq:create', PROJECT_MEMBER_OR_SERVICE,
          'Create accelerator request records from a device profile.',
          [('POST', '/v2/accelerator_requests')],
          _deprecated('cyborg:arq:create', 'rule:project_member_or_admin',
                      'rule:project_member_or_admin is replaced by '
                      'project_member_or_service to additionally accept the '
                      'service role for machine-to-machine APIs', GAZPACHO)),
    _rule('cyborg:arq:delete', PROJECT_MEMBER_OR_SERVICE,
          'Delete accelerator request records (by instance: also needs a service '
          'token).',
          [('DELETE', '/v2/accelerator_requests'),
           ('DELETE', '/v2/accelerator_requests/{arqs_uuid}')],
          _deprecated('cyborg:arq:delete', DEPRECATED_DEFAULT, _arq_reason(_MODERN),
                      GAZPACHO)),
    _rule('cyborg:arq:update', PROJECT_MEMBER_OR_SERVICE,
          'Bind or unbind accelerator requests (also needs a service token).',
          [('PATCH', '/v2/accelerator_requests'),
           ('PATCH', '/v2/accelerator_requests/{arqs_uuid}')],
          _deprecated('cyborg:arq:update', DEPRECATED_DEFAULT, _arq_reason(_MODERN),
                      GAZPACHO)),
    # Device profiles (cyborg/policies/device_profiles.py).
    _rule('cyborg:device_profile:get_all', PROJECT_READER_OR_ADMIN,
          'Retrieve all device_profiles', [('GET', '/v2/device_profiles')],
          _deprecated('cyborg:device_profile:get_all', DEPRECATED_DEFAULT,
                      'request admin_or_owner rule is too strict for listing '
                      'device_profile', WALLABY)),
    _rule('cyborg:device_profile:get_one', PROJECT_READER_OR_ADMIN,
          'Retrieve a specific device_profile',
          [('GET', '/v2/device_profiles/{device_profiles_uuid}')],
          _deprecated('cyborg:device_profile:get_one', DEPRECATED_DEFAULT,
                      'request admin_or_owner rule is too strict for retrieving a '
                      'device_profile', WALLABY)),
    _rule('cyborg:device_profile:create', ADMIN, 'Create a device_profile',
          [('POST', '/v2/device_profiles')],
          _deprecated('cyborg:device_profile:create', DEPRECATED_IS_ADMIN,
                      'project_admin_or_owner is too permissive, require admin for '
                      'creation', WALLABY)),
    _rule('cyborg:device_profile:delete', ADMIN, 'Delete device_profile(s)',
          [('DELETE', '/v2/device_profiles/{device_profiles_uuid}'),
           ('DELETE', '/v2/device_profiles?value={device_profile_name1}')],
          _deprecated('cyborg:device_profile:delete', DEPRECATED_IS_ADMIN,
                      'device profiles are global resources, require admin for '
                      'deletion', WALLABY)),
    # Deployables (cyborg/policies/deployables.py).
    _rule('cyborg:deployable:get_all', PROJECT_MANAGER_OR_ADMIN,
          'Retrieve all deployable records', [('GET', '/v2/deployables')],
          _deprecated('cyborg:deployable:get_all', ADMIN,
                      _manager_reason(_DEPLOYABLES), GAZPACHO)),
    _rule('cyborg:deployable:get_one', PROJECT_MANAGER_OR_ADMIN,
          'Show deployable detail', [('GET', '/v2/deployables/{uuid}')],
          _deprecated('cyborg:deployable:get_one', ADMIN,
                      _manager_reason(_DEPLOYABLES), GAZPACHO)),
    _rule('cyborg:deployable:program', ADMIN,
          'Program a deployable (FPGA bitstream reprogramming)',
          [('PATCH', '/v2/deployables/{uuid}/program')]),
    # Devices (cyborg/policies/devices.py).
    _rule('cyborg:device:get_all', PROJECT_MANAGER_OR_ADMIN,
          'Retrieve all device records', [('GET', '/v2/devices')],
          _deprecated('cyborg:device:get_all', ADMIN, _manager_reason(_HARDWARE),
                      GAZPACHO)),
    _rule('cyborg:device:get_one', PROJECT_MANAGER_OR_ADMIN,
          'Show device detail', [('GET', '/v2/devices/{uuid}')],
          _deprecated('cyborg:device:get_one', ADMIN, _manager_reason(_HARDWARE),
                      GAZPACHO)),
    _rule('cyborg:device:disable', ADMIN, 'Disable a device (status maintaining)',
          [('POST', '/v2/devices/{uuid}/disable')]),
    _rule('cyborg:device:enable', ADMIN, 'Enable a device',
          [('POST', '/v2/devices/{uuid}/enable')]),
    # Attributes (cyborg/policies/attributes.py).
    _rule('cyborg:attribute:get_all', PROJECT_MANAGER_OR_ADMIN,
          'Retrieve all attribute records', [('GET', '/v2/attributes')],
          _deprecated('cyborg:attribute:get_all', ADMIN, _manager_reason(_METADATA),
                      GAZPACHO)),
    _rule('cyborg:attribute:get_one', PROJECT_MANAGER_OR_ADMIN,
          'Show attribute detail', [('GET', '/v2/attributes/{uuid}')],
          _deprecated('cyborg:attribute:get_one', ADMIN, _manager_reason(_METADATA),
                      GAZPACHO)),
    _rule('cyborg:attribute:create', ADMIN, 'Create an attribute record',
          [('POST', '/v2/attributes')]),
    _rule('cyborg:attribute:delete', ADMIN, 'Delete an attribute record',
          [('DELETE', '/v2/attributes/{uuid}')]),
]

# Steward's own routes: the cloud operator's.
steward_rules = [
    _rule('cyborg:device:clean', ADMIN,
          'Re-clean a device whose cleanup failed (device_state error).',
          [('POST', '/v2/devices/{uuid}/clean')]),
    _rule('cyborg:device:clean_plan', ADMIN,
          'Show which cleanup action a device would get, and why.',
          [('GET', '/v2/devices/{uuid}/clean_plan')]),
    _rule('cyborg:device:erase_records', CLOUD_READER,
          'List the cleanup attempts (erase records) of a device.',
          [('GET', '/v2/devices/{uuid}/erase_records')], scope=_SYSTEM_AND_PROJECT),
    _rule('cyborg:device:history', CLOUD_READER,
          'List the state changes of a device, oldest first.',
          [('GET', '/v2/devices/{uuid}/history')], scope=_SYSTEM_AND_PROJECT),
]

# Names of the rules that are Steward's, not upstream's.
STEWARD_ONLY = frozenset(r.name for r in steward_base_rules + steward_rules)


def list_rules():
    """Every default rule (the ``oslo.policy.policies`` entry point)."""
    return base_rules + steward_base_rules + upstream_rules + steward_rules


def get_enforcer():
    """The ``oslo.policy.enforcer`` entry point: an oslo.policy Enforcer with
    these defaults registered, on the global configuration the oslopolicy tools
    parsed (``--config-file``: ``[oslo_policy] policy_file``), for
    ``oslopolicy-list-redundant``, ``oslopolicy-policy-generator`` and
    ``oslopolicy-validator --namespace steward``. The API builds its own
    (steward/api/policy.py)."""
    from oslo_config import cfg
    enforcer = policy.Enforcer(cfg.CONF)
    enforcer.register_defaults(list_rules())
    return enforcer
