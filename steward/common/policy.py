"""Default policy rules: upstream Cyborg's secure-RBAC defaults (project scope).

Registered as defaults on the API's Enforcer (steward/api/policy.py) and listed
for ``oslopolicy-sample-generator`` through the ``oslo.policy.policies`` entry
point (``steward.common.policy:list_rules``). A policy file overrides any rule.

Differences from upstream, on purpose:

* No deprecated-rule bridges. Upstream ORs every rule with its legacy check while
  ``enforce_new_defaults`` is False; the legacy ``admin_or_owner`` check is
  satisfied by any caller with a project (the target is the caller's own
  project), which is how device reads ended up open to everyone (upstream defect
  6, CVE-2026-40213). Here the persona rules are the only defaults.
* Device, deployable and attribute reads, erase records and device history are
  for the cloud operator only: the admin role, or a system-scoped reader. They
  name hosts, PCI addresses, serial numbers and every tenant's cleanup history;
  upstream lets any project's manager read devices and deployables (and had
  ``rule:allow`` before that). A project manager manages a project, not the
  cloud's hardware.

The service-token requirement of bind/unbind and delete-by-instance is not a
policy rule: it is checked in the ARQ handlers (``ctx.is_service``), as upstream
hard-codes it, so a policy file cannot switch it off by accident.
"""
from oslo_policy import policy

ADMIN = 'rule:admin_api'
PROJECT_READER_OR_ADMIN = 'rule:project_reader_or_admin'
CLOUD_READER = 'rule:cloud_reader'
PROJECT_MEMBER_OR_SERVICE = 'rule:project_member_or_service'

_PROJECT = ['project']
_SYSTEM_AND_PROJECT = ['system', 'project']

base_rules = [
    policy.RuleDefault('admin_api', 'role:admin',
                       description='Cloud administrator.'),
    policy.RuleDefault('service_api', 'role:service',
                       description='OpenStack service account (machine to machine).'),
    policy.RuleDefault('project_manager_api',
                       'role:manager and project_id:%(project_id)s',
                       description='Project manager.'),
    policy.RuleDefault('project_member_api',
                       'role:member and project_id:%(project_id)s',
                       description='Project member.'),
    policy.RuleDefault('project_reader_api',
                       'role:reader and project_id:%(project_id)s',
                       description='Project reader.'),
    policy.RuleDefault('project_reader_or_admin',
                       'rule:project_reader_api or rule:admin_api',
                       description='Project reader or cloud admin.'),
    policy.RuleDefault('system_reader_api', 'role:reader and system_scope:all',
                       description='Reader of the whole cloud (system-scoped token).'),
    policy.RuleDefault('cloud_reader',
                       'rule:admin_api or rule:system_reader_api',
                       description='Cloud admin or system-scoped reader: who may see '
                                   'the cloud\'s hardware and its cleanup history.'),
    policy.RuleDefault('project_member_or_service',
                       'rule:project_member_api or rule:service_api',
                       description='Project member or service account.'),
]


def _rule(name, check_str, description, *operations):
    return policy.DocumentedRuleDefault(
        name=name, check_str=check_str, description=description,
        operations=[{'method': m, 'path': p} for m, p in operations],
        scope_types=_SYSTEM_AND_PROJECT if check_str == CLOUD_READER else _PROJECT)


api_rules = [
    # Accelerator requests.
    _rule('cyborg:arq:get_all', PROJECT_READER_OR_ADMIN,
          'List accelerator requests (non-admins see their project only).',
          ('GET', '/v2/accelerator_requests')),
    _rule('cyborg:arq:get_one', PROJECT_READER_OR_ADMIN,
          'Show an accelerator request.',
          ('GET', '/v2/accelerator_requests/{uuid}')),
    _rule('cyborg:arq:create', PROJECT_MEMBER_OR_SERVICE,
          'Create accelerator requests from a device profile.',
          ('POST', '/v2/accelerator_requests')),
    _rule('cyborg:arq:update', PROJECT_MEMBER_OR_SERVICE,
          'Bind or unbind accelerator requests (also needs a service token).',
          ('PATCH', '/v2/accelerator_requests'),
          ('PATCH', '/v2/accelerator_requests/{uuid}')),
    _rule('cyborg:arq:delete', PROJECT_MEMBER_OR_SERVICE,
          'Delete accelerator requests (by instance: also needs a service token).',
          ('DELETE', '/v2/accelerator_requests'),
          ('DELETE', '/v2/accelerator_requests/{uuid}')),
    # Device profiles.
    _rule('cyborg:device_profile:get_all', PROJECT_READER_OR_ADMIN,
          'List device profiles.', ('GET', '/v2/device_profiles')),
    _rule('cyborg:device_profile:get_one', PROJECT_READER_OR_ADMIN,
          'Show a device profile.', ('GET', '/v2/device_profiles/{uuid_or_name}')),
    _rule('cyborg:device_profile:create', ADMIN,
          'Create a device profile.', ('POST', '/v2/device_profiles')),
    _rule('cyborg:device_profile:delete', ADMIN,
          'Delete device profiles.', ('DELETE', '/v2/device_profiles/{uuid_or_name}'),
          ('DELETE', '/v2/device_profiles?value={name1},{name2}')),
    # Devices.
    _rule('cyborg:device:get_all', CLOUD_READER,
          'List devices.', ('GET', '/v2/devices')),
    _rule('cyborg:device:get_one', CLOUD_READER,
          'Show a device.', ('GET', '/v2/devices/{uuid}')),
    _rule('cyborg:device:disable', ADMIN,
          'Disable a device (status maintaining).', ('POST', '/v2/devices/{uuid}/disable')),
    _rule('cyborg:device:enable', ADMIN,
          'Enable a device.', ('POST', '/v2/devices/{uuid}/enable')),
    _rule('cyborg:device:clean', ADMIN,
          'Re-clean a device whose cleanup failed (device_state error).',
          ('POST', '/v2/devices/{uuid}/clean')),
    _rule('cyborg:device:clean_plan', ADMIN,
          'Show which cleanup action a device would get, and why.',
          ('GET', '/v2/devices/{uuid}/clean_plan')),
    _rule('cyborg:device:erase_records', CLOUD_READER,
          'List the cleanup attempts (erase records) of a device.',
          ('GET', '/v2/devices/{uuid}/erase_records')),
    _rule('cyborg:device:history', CLOUD_READER,
          'List the state changes of a device, oldest first.',
          ('GET', '/v2/devices/{uuid}/history')),
    # Deployables.
    _rule('cyborg:deployable:get_all', CLOUD_READER,
          'List deployables.', ('GET', '/v2/deployables')),
    _rule('cyborg:deployable:get_one', CLOUD_READER,
          'Show a deployable.', ('GET', '/v2/deployables/{uuid}')),
    _rule('cyborg:deployable:program', ADMIN,
          'Program a deployable (FPGA bitstream).',
          ('PATCH', '/v2/deployables/{uuid}/program')),
    # Attributes.
    _rule('cyborg:attribute:get_all', CLOUD_READER,
          'List attributes.', ('GET', '/v2/attributes')),
    _rule('cyborg:attribute:get_one', CLOUD_READER,
          'Show an attribute.', ('GET', '/v2/attributes/{uuid}')),
    _rule('cyborg:attribute:create', ADMIN,
          'Create an attribute.', ('POST', '/v2/attributes')),
    _rule('cyborg:attribute:delete', ADMIN,
          'Delete an attribute.', ('DELETE', '/v2/attributes/{uuid}')),
]


def list_rules():
    """Every default rule (the ``oslo.policy.policies`` entry point)."""
    return base_rules + api_rules
