"""Stopping and starting the throw-away PostgreSQL of tests/fixtures/pg_fixture.py, for the
database-restart tests, and a database of one's own on it."""
import os
import shlex
import uuid

from tests.fixtures import pg_fixture


def server():
    """The per-process PostgreSQL, or None when it is not installed."""
    return pg_fixture.get_postgres()


def create_database(srv, prefix='steward_mh', driver='psycopg'):
    name = f'{prefix}_{uuid.uuid4().hex[:10]}'
    srv.psql(f'CREATE DATABASE {name}')
    return name, srv.url(name, driver=driver)


def _pg_ctl(srv):
    return os.path.join(srv.bindir, 'pg_ctl')


def stop(srv):
    """A fast shutdown: open sessions are terminated, as in a server restart."""
    srv._as_owner([_pg_ctl(srv), '-D', srv.datadir, '-m', 'fast', '-w', 'stop'])


def start(srv):
    """Start again on the same port with the options of the first start, which
    PostgreSQL recorded in postmaster.opts."""
    with open(os.path.join(srv.datadir, 'postmaster.opts')) as f:
        words = shlex.split(f.read())
    options, i = [], 1          # words[0] is the postgres binary
    while i < len(words):
        if words[i] == '-D':
            i += 2
            continue
        options.append(words[i])
        i += 1
    log = os.path.join(os.path.dirname(srv.datadir), 'log')
    srv._as_owner([_pg_ctl(srv), '-D', srv.datadir, '-w', '-l', log, '-o',
                   shlex.join(options), 'start'])
    srv.psql('SELECT 1')
