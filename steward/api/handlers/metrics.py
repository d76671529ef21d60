"""``GET /metrics``: this process's Prometheus metrics (steward/metrics.py,
doc/metrics.md). Like ``/``, no authentication and no microversion: scrapers
send neither."""
from starlette import responses

from steward import metrics


def scrape(req):
    """200: the Prometheus text format (0.0.4). Query parameters are ignored."""
    return responses.Response(metrics.render(), media_type=metrics.CONTENT_TYPE)
