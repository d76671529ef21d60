"""steward/common/netutils.py: HOST:PORT through oslo.config's types, and the one
URL redactor of messages."""
import pytest

from steward.common import netutils


@pytest.mark.parametrize('value, expected', [
    ('127.0.0.1:9464', ('127.0.0.1', 9464)), (' [::1]:9464 ', ('::1', 9464)),
    ('compute-1.example.org:1', ('compute-1.example.org', 1))])
def test_host_port_forms(value, expected):
    assert netutils.split_host_port(value) == expected


@pytest.mark.parametrize('value', ['9464', 'host:', ':99', 'h:0', 'h:65536', 'h:http',
                                   '::1:80', '[::1]', 'bad_host!:80', '', None])
def test_bad_host_port(value):
    with pytest.raises(ValueError):
        netutils.split_host_port(value)


@pytest.mark.parametrize('url, shown', [
    ('rabbit://steward:s3cret@ctl:5672/', 'rabbit://steward:***@ctl:5672/'),
    ('rabbit://a:p1@h1:5672,b:p2@h2:5672/v', 'rabbit://a:***@h1:5672,b:***@h2:5672/v'),
    ('postgresql+psycopg2://steward:DB:PASS@db/steward',
     'postgresql+psycopg2://steward:***@db/steward'),
    ('sqlite:////var/lib/steward/steward.sqlite',
     'sqlite:////var/lib/steward/steward.sqlite'),
    ('kombu+memory://', 'kombu+memory://')])
def test_redacted_url(url, shown):
    assert netutils.redacted_url(url) == shown
