"""keystoneauth's session, auth and adapter options for a group that configures a
client of another OpenStack service ([placement], [nova]), registered and listed
the same way for each so that the sample config shows what is read."""
from keystoneauth1 import loading as ks_loading


def register(conf, group, service_type):
    ks_loading.register_session_conf_options(conf, group.name)
    ks_loading.register_auth_conf_options(conf, group.name)
    ks_loading.register_adapter_conf_options(conf, group.name, include_deprecated=False)
    conf.set_default('service_type', service_type, group=group.name)


def opts():
    """What ``register`` adds, for list_opts; the auth options are shown for the
    password plugin, the one operators configure most."""
    return (ks_loading.get_session_conf_options()
            + ks_loading.get_auth_common_conf_options()
            + ks_loading.get_auth_plugin_conf_options('password')
            + ks_loading.get_adapter_conf_options(include_deprecated=False))
