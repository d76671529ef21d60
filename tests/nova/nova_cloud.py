"""The real Nova 34 services for Steward's multi-host deployment: run INSIDE .venv-nova.

    STEWARD_NOVA_IN=<request.json> PYTHONPATH=.venv-nova/patched:<placement>:tests/nova \\
        .venv-nova/bin/python -m testtools.run nova_cloud.NovaCloudTestCase.test_serve

Nova's own functional test base (``ProviderUsageBaseTestCase``: nova-api,
nova-conductor, nova-scheduler in this process over oslo.messaging's fake transport,
Nova's database on sqlite) with two nova-compute services on the fake virt driver.
What is not Nova's in-process stand-in:

* Placement is the real one Steward uses, over HTTP (``[placement]`` of the request):
  Nova's ``PlacementFixture`` would start its own in-process copy with its own
  database, which Steward could not see. ``RealPlacement`` keeps that fixture's
  client (the report client's calls and ``self.placement``) and only points it at
  the shared server (token ``admin``, Placement's noauth2).
* The accelerator service is Steward's API, over HTTP: Nova's real client
  (``nova.accelerator.cyborg``) with ``[cyborg] endpoint_override``; no
  ``CyborgFixture``.
* Nova's API, which the functional tests reach through wsgi-intercept, is also served
  on a real port (``api_port``) so that Steward's conductor can post
  ``accelerator-request-bound`` events and ask ``GET /servers/{id}``, and the pytest
  module can drive servers as an operator does. The wrapper gives a request without
  identity headers the ones keystonemiddleware would give Steward's service user
  (admin, service), as Nova's ``OSAPIFixture`` itself stubs keystonemiddleware.

The test writes ``ready`` (a JSON file: the computes' provider uuids) once both
computes are up and the API is served, then serves until the file ``stop`` appears
(or its parent process is gone).
"""
# Nova's tests monkey-patch with eventlet when nova.tests is imported: first, before
# urllib3 and oslo.context are (Nova warns about those imported earlier).
import nova.tests  # noqa: F401,I001
from importlib import metadata
import json
import logging
import os
import time
import warnings

import eventlet
from eventlet import wsgi as eventlet_wsgi
import fixtures
from keystoneauth1 import adapter as ka
from keystoneauth1 import session as ks
from sqlalchemy import exc as sqla_exc

from nova.api import auth
from nova.tests import fixtures as nova_fixtures
from nova.tests.functional import fixtures as func_fixtures
from nova.tests.functional import integrated_helpers
from nova.virt import fake



class RealPlacement(func_fixtures.PlacementFixture):
    """Nova's PlacementFixture minus its in-process Placement: the same client,
    aimed at a running Placement."""

    def __init__(self, endpoint):
        fixtures.Fixture.__init__(self)
        self.endpoint = endpoint
        self.token = 'admin'

    def setUp(self):
        fixtures.Fixture.setUp(self)
        self._client = ka.Adapter(ks.Session(auth=None), raise_exc=False)
        for verb in ('get', 'post', 'put', 'delete'):
            self.useFixture(fixtures.MonkeyPatch(
                'nova.scheduler.client.report.SchedulerReportClient.' + verb,
                getattr(self, '_fake_' + verb)))
        self.api = func_fixtures.PlacementApiClient(self)


def _api_paste():
    (path,) = [f.locate() for f in metadata.distribution('nova').files
               if f.name == 'api-paste.ini']
    return os.path.realpath(path)


def _with_identity(app, project_id):
    def wrapped(environ, start_response):
        environ.setdefault('HTTP_X_AUTH_USER', 'admin')
        environ.setdefault('HTTP_X_AUTH_PROJECT_ID', project_id)
        environ.setdefault('HTTP_X_ROLES', 'reader,member,admin,service')
        # The token Nova passes on to the accelerator service (Steward's noauth
        # API takes any).
        environ.setdefault('HTTP_X_AUTH_TOKEN', 'admin')
        return app(environ, start_response)
    return wrapped


class NovaCloudTestCase(integrated_helpers.ProviderUsageBaseTestCase):

    compute_driver = 'fake.MediumFakeDriver'

    def setUp(self):
        with open(os.environ['STEWARD_NOVA_IN']) as f:
            self.request = json.load(f)
        # ProviderUsageBaseTestCase.setUp builds func_fixtures.PlacementFixture().
        original = func_fixtures.PlacementFixture
        func_fixtures.PlacementFixture = lambda: RealPlacement(
            self.request['placement'])
        # Nova's ConfFixture looks for api-paste.ini under the source tree, which
        # an installed Nova does not have: the wheel's own copy.
        conf_setup = nova_fixtures.ConfFixture.setUp

        def conf_fixture_setup(fixture):
            conf_setup(fixture)
            fixture.conf.set_default('api_paste_config', _api_paste(), group='wsgi')
        nova_fixtures.ConfFixture.setUp = conf_fixture_setup
        try:
            super().setUp()
        finally:
            func_fixtures.PlacementFixture = original
            nova_fixtures.ConfFixture.setUp = conf_setup
        self.flags(endpoint_override=self.request['accelerator'], group='cyborg')
        # Nova's log, as it goes, beside the test's own capture (which is only
        # written out when the test ends).
        handler = logging.FileHandler(self.request['log'])
        handler.setLevel(logging.INFO)
        handler.setFormatter(logging.Formatter(
            '%(asctime)s %(levelname)s [%(name)s] %(message)s'))
        logging.getLogger().addHandler(handler)
        self.addCleanup(logging.getLogger().removeHandler, handler)
        # Nova's WarningsFixture makes SQLAlchemy deprecations raised in nova errors;
        # the venv's SQLAlchemy 2.1 (newer than Nova 34 was released against)
        # deprecates noload(), which nova/db/main/api.py uses on shelve.
        warnings.filterwarnings('ignore', message=r'The noload\(\) option',
                                category=sqla_exc.SADeprecationWarning)
        # Nova's OSAPIFixture stands in for keystonemiddleware with a context built
        # from X-Auth-User/-Project-Id/-Roles; keystonemiddleware would also pass the
        # token on, which Nova's Cyborg client sends to Steward.
        stub = auth.NovaKeystoneContext._create_context

        def create_context(env, **kwargs):
            ctx = stub(env, **kwargs)
            ctx.auth_token = env.get('HTTP_X_AUTH_TOKEN')
            return ctx
        self.useFixture(fixtures.MonkeyPatch(
            'nova.api.auth.NovaKeystoneContext._create_context', create_context))
        # The hypervisor's part of a live migration fails while the test says so
        # (its file exists): the fake driver then calls Nova's rollback, as the
        # libvirt driver does when libvirt's migration fails.
        fail = self.request['fail_live_migration']
        migrate = fake.FakeDriver.live_migration

        def live_migration(driver, context, instance, dest, post_method,
                           recover_method, block_migration=False,
                           migrate_data=None):
            if os.path.exists(fail):
                return recover_method(context, instance, dest, migrate_data)
            return migrate(driver, context, instance, dest, post_method,
                           recover_method, block_migration, migrate_data)
        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.fake.FakeDriver.live_migration', live_migration))
        # Shelve offloads at once: unshelve then binds fresh ARQs, on any host.
        self.flags(shelved_offload_time=0)
        if self.request.get('accel_info'):
            self._record_accel_info(self.request['accel_info'])

    def _record_accel_info(self, path):
        """What the fake virt driver is given, when the request asks: one JSON
        line per spawn (a boot; a resize's finish_migration goes through it)
        and finish_revert_migration, with its host, the instance and the bound
        ARQs (``accel_info``) Nova's compute passed. The driver's own behaviour
        is unchanged."""
        def record(driver, call, instance, accel_info):
            with open(path, 'a') as f:
                f.write(json.dumps({'call': call, 'host': driver._host,
                                    'instance': instance.uuid,
                                    'arqs': accel_info}, default=str) + '\n')
        spawn = fake.FakeDriver.spawn
        revert = fake.FakeDriver.finish_revert_migration

        def recorded_spawn(driver, context, instance, *args, **kwargs):
            record(driver, 'spawn', instance, kwargs.get('accel_info'))
            return spawn(driver, context, instance, *args, **kwargs)

        def recorded_revert(driver, context, instance, *args, **kwargs):
            record(driver, 'finish_revert_migration', instance,
                   kwargs.get('accel_info'))
            return revert(driver, context, instance, *args, **kwargs)
        self.useFixture(fixtures.MonkeyPatch('nova.virt.fake.FakeDriver.spawn',
                                             recorded_spawn))
        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.fake.FakeDriver.finish_revert_migration', recorded_revert))

    def _serve_api(self):
        # Nova's functional tests run under eventlet (nova/tests/functional/
        # __init__.py patches; native threading fails at import here): eventlet's
        # own WSGI server, in a green thread.
        app = _with_identity(self.api_fixture.app(), self.api_fixture.project_id)
        sock = eventlet.listen(('127.0.0.1', self.request['api_port']))
        thread = eventlet.spawn(eventlet_wsgi.server, sock, app, log_output=False)
        self.addCleanup(sock.close)
        self.addCleanup(thread.kill)

    def test_serve(self):
        parent = os.getppid()
        for host in self.request['hosts']:
            self._start_compute(host)
        self._serve_api()
        computes = {host: self._get_provider_uuid_by_host(host)
                    for host in self.request['hosts']}
        ready = self.request['ready']
        with open(ready + '.tmp', 'w') as f:
            json.dump({'computes': computes,
                       'project_id': self.api_fixture.project_id}, f)
        os.rename(ready + '.tmp', ready)
        # Served until the pytest module says stop (or is gone, or has removed
        # its directory).
        stop = self.request['stop']
        while (not os.path.exists(stop) and os.path.isdir(os.path.dirname(stop))
               and os.getppid() == parent):
            time.sleep(0.1)

