"""An operator's console carries no other library's warnings (issue 54, item 0):
dnspython's import under cryptography 51 printed three DSA deprecation lines
before every one-line refusal. Real interpreters, real imports."""
import subprocess
import sys

SCRIPT = '''
import warnings, steward
warnings.warn_explicit('from a library', UserWarning, 'lib.py', 1, module='dns.dnssecalgs.dsa')
warnings.warn_explicit('from a look-alike', UserWarning, 'lib.py', 1, module='stewardish')
warnings.warn_explicit('from steward', UserWarning, 'own.py', 1, module='steward.api.app')
'''


def _stderr(*flags):
    return subprocess.run([sys.executable, *flags, '-c', SCRIPT], capture_output=True,
                          text=True, timeout=60, check=True).stderr


def test_only_stewards_own_warnings_reach_the_console():
    err = _stderr()
    assert 'from steward' in err
    assert 'from a library' not in err and 'from a look-alike' not in err, err


def test_the_operator_gets_them_back_with_dash_w():
    err = _stderr('-W', 'default')
    assert 'from a library' in err and 'from steward' in err, err


def test_a_real_start_prints_one_line():
    """The services' import chain (oslo.messaging, keystonemiddleware, dnspython)
    warns on nothing an operator sees."""
    out = subprocess.run([sys.executable, '-c', 'import steward.cmd.main, dns.dnssecalgs'],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr == '', out.stderr
