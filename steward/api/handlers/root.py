"""Version documents: ``GET /`` and ``GET /v2`` (no authentication).

keystoneauth (Nova, openstacksdk) fetches ``GET /v2`` before every operation and
then follows its ``self`` link when it points at the configured host, so that
link must be a URL that serves the API: ``<base>/v2/``.
"""
from steward.api import handlers
from steward.api import views


def home(req):
    """200: the list of API versions (only v2)."""
    v2 = views.version_v2(req, trailing_slash=False)
    return handlers.json_response({
        'name': 'OpenStack Cyborg API',
        'description': 'Cyborg (previously named Nomad) is an OpenStack project '
                       'that aims to provide a general purpose management '
                       'framework for acceleration resources (i.e. various types '
                       'of accelerators such as GPU, FPGA, ASIC, NP, SoCs, NVMe/NOF '
                       'SSDs, ODP, DPDK/SPDK and so on). Served by Steward.',
        'versions': [v2],
        'default_version': v2,
    })


def v2(req):
    """200: the v2 version document (``/v2`` and ``/v2/`` alike)."""
    return handlers.json_response(views.version_v2(req, trailing_slash=True))
