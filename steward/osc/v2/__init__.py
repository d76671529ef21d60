"""Commands of the ``openstack.steward.v2`` group and the command hooks on
``accelerator device list|show``."""
