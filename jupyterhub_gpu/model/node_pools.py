"""Which pool a node belongs to (pure): one rule for live capacity (hub/capacity.py) and `gpuhub doctor`.

A node is in a pool when its labels carry the pool's whole `node_selector` (as the scheduler matches a
pod's nodeSelector). Were two pools' selectors to match one node, the pool listed first in the file owns it.
"""
from __future__ import annotations

from typing import Any, Mapping

from jupyterhub_gpu.model.profiles import Pool


def node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    """A node's labels as the API sends them (absent: none)."""
    return dict((node.get("metadata") or {}).get("labels") or {})


def in_pool(pool: Pool, labels: Mapping[str, str]) -> bool:
    """Do these labels (a node's, or a pod's nodeSelector) carry the pool's whole node_selector?"""
    return all(labels.get(k) == v for k, v in pool.node_selector.items())


def pool_of(pools: Mapping[str, Pool], labels: Mapping[str, str]) -> str | None:
    """The name of the pool these labels place a node (or a pod's nodeSelector) in; None: no pool."""
    return next((name for name, pool in pools.items() if in_pool(pool, labels)), None)


def nodes_in_pool(name: str, pools: Mapping[str, Pool], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes (API dicts) that belong to pool `name`."""
    return [n for n in nodes if pool_of(pools, node_labels(n)) == name]


def label_selector(pool: Pool) -> str:
    """The pool's node_selector as a label selector (`kubectl get nodes -l ...`, the API's labelSelector)."""
    return ",".join(f"{k}={v}" for k, v in pool.node_selector.items())
