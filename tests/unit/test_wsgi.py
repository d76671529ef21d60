"""steward/wsgi: which configuration files the environment names."""
import pytest

from steward import wsgi


def test_config_files_named_by_the_environment(tmp_path):
    env = {'STEWARD_CONFIG_FILES': ' /a/one.conf, /b/two.conf ,',
           'OS_STEWARD_CONFIG_DIR': str(tmp_path)}
    assert wsgi.config_sources(env) == (['/a/one.conf', '/b/two.conf'], [])


def test_config_dir_and_its_conf_d(tmp_path):
    env = {'OS_STEWARD_CONFIG_DIR': f' {tmp_path} '}
    assert wsgi.config_sources(env) == ([str(tmp_path / 'steward.conf')], [])
    (tmp_path / 'steward.conf.d').mkdir()
    assert wsgi.config_sources(env) == ([str(tmp_path / 'steward.conf')],
                                        [str(tmp_path / 'steward.conf.d')])


def test_default_dir():
    assert wsgi.config_sources({}) == (['/etc/steward/steward.conf'], [])
    assert wsgi.config_sources({'OS_STEWARD_CONFIG_DIR': ''}) == \
        (['/etc/steward/steward.conf'], [])


def test_a_missing_file_stops_the_worker(tmp_path):
    with pytest.raises(RuntimeError, match='not found: .*nowhere.conf'):
        wsgi.init_application({'STEWARD_CONFIG_FILES': str(tmp_path / 'nowhere.conf')})
