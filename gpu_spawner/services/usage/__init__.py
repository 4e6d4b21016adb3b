"""Showback: where GPU-hours go (accounting.py), how long the queue is (eta.py), what survives restarts
(store.py), the Prometheus metrics (metrics.py) and the live-cluster reads (collect.py)."""
