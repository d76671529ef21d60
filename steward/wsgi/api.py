"""The ASGI application of the Steward API for a hosting server::

    OS_STEWARD_CONFIG_DIR=/etc/steward \
        gunicorn -k uvicorn_worker.UvicornWorker --forwarded-allow-ips '' \
        --bind 0.0.0.0:6666 --workers 4 'steward.wsgi.api:application'

(configuration from the environment: steward/wsgi/__init__.py; doc/install.md).
Built at import, once in each worker process: do not ``--preload``, a database
pool and a broker connection must not cross a fork.
"""
from steward.wsgi import init_application

application = init_application()
