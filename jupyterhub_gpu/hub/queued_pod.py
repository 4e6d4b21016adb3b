"""A queued server's pod kept across a hub restart, with its place in the team's queue (pure).

JupyterHub forgets a spawn that is pending when it stops; the pod stays, held at Kueue's admission gate.
On the user's next start KubeSpawner would find that pod, delete it and create it again, and Kueue would
queue the new one at the back. So each server pod carries the digest of the request it was made from
(contract.REQUEST_DIGEST_ANNOTATION: the manifest without the server's API token, the one part a new start
changes); a start whose pod has that digest and finds its old pod still gated keeps it (and hands JupyterHub
the old pod's token, as JupyterHub allows a resumed server to). A pod of another request, one already
admitted, or one being deleted is KubeSpawner's as before.

The pod object is not trusted for the token: anyone who may create pods in the hub namespace could plant one
with the expected name and digest, and JupyterHub registers a resumed server's token it does not know
(generated=False), so a revoked token would come back. The pod is kept only when its token is a live API
token of this user in the hub's database (`token_refusal`); else it is replaced like another request's pod.
"""
from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from jupyterhub import orm

from jupyterhub_gpu.contract import KUEUE_ADMISSION_GATE, REQUEST_DIGEST_ANNOTATION

#: The environment variables a new start changes (JupyterHub makes a fresh server token each time).
TOKEN_ENV = ("JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN")


def _without_tokens(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    meta = pod.get("metadata") or {}
    (meta.get("annotations") or {}).pop(REQUEST_DIGEST_ANNOTATION, None)
    for group in ("containers", "initContainers"):
        for c in (pod.get("spec") or {}).get(group) or []:
            c["env"] = [e for e in c.get("env") or [] if e.get("name") not in TOKEN_ENV]
    return {"metadata": {k: meta.get(k) for k in ("name", "labels", "annotations")}, "spec": pod.get("spec")}


def digest(pod: dict[str, Any]) -> str:
    """The request a server pod is made from (its manifest as JSON, tokens left out)."""
    canonical = json.dumps(_without_tokens(pod), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def token_of(pod: dict[str, Any]) -> str | None:
    for c in (pod.get("spec") or {}).get("containers") or []:
        for e in c.get("env") or []:
            if e.get("name") == "JUPYTERHUB_API_TOKEN" and isinstance(e.get("value"), str) and e["value"]:
                return e["value"]
    return None


def kept_token(existing: dict[str, Any] | None, want: str) -> str | None:
    """The token to resume `existing` with when it is the queued pod of the request with digest `want` (still
    at Kueue's gate, not being deleted); None: not a pod to keep."""
    if not existing:
        return None
    meta = existing.get("metadata") or {}
    gates = (existing.get("spec") or {}).get("schedulingGates") or []
    if (meta.get("annotations") or {}).get(REQUEST_DIGEST_ANNOTATION) != want or meta.get("deletionTimestamp"):
        return None
    if not any(g.get("name") == KUEUE_ADMISSION_GATE for g in gates):
        return None
    return token_of(existing)


def token_refusal(db: Any, orm_user: Any, token: str) -> str | None:
    """Why `token` may not be handed back to JupyterHub for `orm_user`'s server (None: it may): it must be a
    live (unexpired) API token of that user in the hub's database, as JupyterHub's own check of a resumed
    server's token (User.spawn) expects; one it does not find it would register again."""
    if db is None or orm_user is None:
        return "the hub database is not at hand to check its token"
    found = orm.APIToken.find(db, token)
    if found is None:
        return "its token is not in the hub database (revoked, expired or never issued)"
    if found.user_id is None or found.user_id != orm_user.id:
        return "its token belongs to someone else"
    if found.expired:
        return "its token has expired"
    return None
