"""Steward: accelerator and device lifecycle service (Cyborg v2 compatible)."""
import sys
import warnings

# An operator's console carries Steward's own messages, not its libraries' warnings
# about each other (dnspython's import of DSA under cryptography 51 printed three
# lines at every start, before a one-line refusal; oslo.messaging's eventlet backend
# warns on import though Steward never uses eventlet). Warnings raised from a
# module outside steward are ignored unless the operator asks for them with -W or
# PYTHONWARNINGS, which Python records in sys.warnoptions.
if not sys.warnoptions:
    warnings.filterwarnings('ignore', module=r'(?!steward(\.|$))')
    warnings.filterwarnings('ignore', message='(?s).*eventlet')
