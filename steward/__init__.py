"""Steward: accelerator and device lifecycle service (Cyborg v2 compatible)."""
