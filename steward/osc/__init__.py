"""Steward's OpenStackClient plugin: ``openstack accelerator ...`` commands that
python-openstackclient and python-cyborgclient do not have (device cleanup,
erase records, device history) and the 2.5/2.6/2.8 device columns on their
``accelerator device list|show`` (command hooks, not replacements).

``steward.osc.plugin`` is the module OSC loads (``openstack.cli.extension``
entry point ``steward``); doc/cli.md describes the commands.
"""
