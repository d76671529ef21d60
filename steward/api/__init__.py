"""Steward's REST API: OpenStack Cyborg's v2 accelerator API.

``steward.api.app.create_app(...)`` builds the ASGI application (called by the
composition root, steward/cmd/root.py's ``Root.api_app``). This
package module stays empty so that importing ``steward.api.policy`` (e.g. for
the policy sample generator) does not pull in the web stack.
"""
