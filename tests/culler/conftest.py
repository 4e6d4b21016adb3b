"""The culler's fixtures (a real hub, Prometheus and a DCGM-format exporter) live in fixtures.py, which
tests/security/test_culler_*.py import too."""
from .fixtures import exporter, fresh, hub, prometheus  # noqa: F401
