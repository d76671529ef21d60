"""Steward: accelerator and device lifecycle service (Cyborg v2 compatible)."""
import warnings

# oslo.messaging imports oslo.service's eventlet backend, which warns on import even
# though Steward never uses eventlet (threading executor throughout).
warnings.filterwarnings('ignore', message='(?s).*eventlet')
