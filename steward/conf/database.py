from oslo_config import cfg

group = cfg.OptGroup('database', title='Database options')

opts = [
    cfg.StrOpt('connection', secret=True,
               default='sqlite:///$state_path/steward.sqlite',
               help='SQLAlchemy URL. SQLite for one host; PostgreSQL '
                    '(postgresql+psycopg2://...) when several hosts share it.'),
    cfg.IntOpt('max_pool_size', default=10, min=1,
               help='Connections kept open per process (server databases).'),
    cfg.IntOpt('sqlite_busy_timeout', default=30000, min=0,
               help='Milliseconds a SQLite writer waits for the write lock.'),
    cfg.BoolOpt('sync_on_startup', default=True,
                help='Run schema migrations and online data migrations when a '
                     'service starts.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]
