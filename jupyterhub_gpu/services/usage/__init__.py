"""Showback: where GPU-hours go (accounting.py), what survives restarts (store.py), the Prometheus metrics
(metrics.py, each queue's wait estimate among them) and the live-cluster reads (collect.py)."""
