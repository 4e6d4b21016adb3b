"""A submission is all or nothing: created in an order that never leaves a Job able to hold quota
without being able to run, and a reconcile loop that removes what a crash or a lost response left.

Order: the notebook ConfigMap first, then the Job (suspended; Kueue admits it), then the ConfigMap is
made owned by the Job (garbage-collected with it). A JobSet also gets its ranks' own NetworkPolicy right
after it is created (owned by it; `builders.network.jobset_ranks_policy`): if that fails, the JobSet and
the ConfigMap are deleted again, since its ranks could not reach each other. A failure before the Job
exists deletes the ConfigMap (one this request made: under an Idempotency-Key an earlier try's ConfigMap and
Job are taken as they are, `idempotency`); whatever survives a failed rollback or a lost response is found by
`reconcile`:
  - a ConfigMap of ours whose Job does not exist, older than the grace period: deleted;
  - a ConfigMap whose Job exists but which is not owned by it yet: owned;
  - an unfinished Job of ours whose ConfigMap is gone (its pod could never start, yet Kueue would
    admit it and hold GPU quota): deleted;
  - an unfinished JobSet of ours not yet known to have its ranks' NetworkPolicy (a crash between the two
    creates leaves ranks that can never reach each other, holding quota until their timeout): the policy
    is created (an "already exists" answer confirms it; gpu-jobs may create policies, not list them);
    if the API refuses it, the JobSet is deleted. Confirmed JobSets are remembered by uid.
The Job mounts the team's home-share claim: before anything is created, the claim must exist, be
Bound, be ReadWriteMany and carry the home-share label (a claim someone else made under that name is
never used).
"""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone

from kubernetes_asyncio import client

from jupyterhub_gpu.builders.metadata import owner_reference
from jupyterhub_gpu.builders.network import jobset_ranks_policy
from jupyterhub_gpu.contract import (
    HOME_SHARE_LABEL,
    JOB_LABEL,
    REQUEST_DIGEST_ANNOTATION,
    SUBMISSION_LABEL,
    USER_ANNOTATION,
)
from jupyterhub_gpu.services.jobs import idempotency
from jupyterhub_gpu.services.jobs.cache import JOBSET
from jupyterhub_gpu.services.jobs.kube import api_json

log = logging.getLogger("gpuhub.jobs")


class StorageNotReady(RuntimeError):
    """The team's home-share claim cannot be used; nothing was created. The message says what to fix."""


def _age(obj: dict, now: datetime) -> float:
    ts = obj["metadata"].get("creationTimestamp")
    if not ts:
        return 0.0
    return (now - datetime.fromisoformat(ts.replace("Z", "+00:00"))).total_seconds()


def _finished(job: dict) -> bool:
    return any(c.get("type") in ("Complete", "Completed", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def _ours(obj: dict) -> bool:
    meta = obj["metadata"]
    return (bool((meta.get("labels") or {}).get(JOB_LABEL))
            and bool((meta.get("annotations") or {}).get(USER_ANNOTATION)))


async def check_home_claim(kube, namespace: str, claim: str) -> None:
    """The claim a Job will mount: present, Bound, ReadWriteMany, labelled as the home share."""

    fix = "ask an admin to create it (`gpuhub render storage`; `gpuhub doctor` checks it)"
    try:
        pvc = await api_json(kube.core.read_namespaced_persistent_volume_claim(claim, namespace,
                                                                             _preload_content=False))
    except client.ApiException as e:
        if e.status == 404:
            raise StorageNotReady(f"your team's home-share claim {namespace}/{claim} does not exist; {fix}") from None
        raise
    labels = pvc["metadata"].get("labels") or {}
    status = pvc.get("status") or {}
    if labels.get(HOME_SHARE_LABEL) != "true":
        raise StorageNotReady(f"the claim {namespace}/{claim} is not labelled {HOME_SHARE_LABEL}=true, so it is not "
                              f"taken for the users' home share; {fix}")
    if status.get("phase") != "Bound":
        phase = status.get("phase") or "not bound"
        raise StorageNotReady(f"the claim {namespace}/{claim} is {phase}, not Bound; {fix}")
    if "ReadWriteMany" not in (status.get("accessModes") or []):
        raise StorageNotReady(f"the claim {namespace}/{claim} is {status.get('accessModes')}, not ReadWriteMany: a job "
                              f"on another node than your server could not mount it; {fix}")


async def create_submission(kube, objs: list[dict], home_claim: str | None = None) -> tuple[dict, bool]:
    """[Job, ConfigMap] → created all or nothing (see the module). Returns (the created Job, True), or (the Job
    an earlier try of the same Idempotency-Key made, False) when the API server holds it under this name."""

    job = next(o for o in objs if o["kind"] in ("Job", "JobSet"))
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    kind = "jobsets" if job["kind"] == "JobSet" else "jobs"
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    if home_claim:
        await check_home_claim(kube, ns, home_claim)
    made_cm = True
    try:
        await api_json(kube.core.create_namespaced_config_map(ns, cm, _preload_content=False))
    except client.ApiException as e:  # an earlier try of this submission got this far: its ConfigMap is this one
        if e.status != 409 or not _earlier_try(await _held(kube, "configmaps", ns, name), job):
            raise
        made_cm = False
    try:
        if kind == "jobsets":
            created = await api_json(kube.custom.create_namespaced_custom_object(*JOBSET, ns, "jobsets", job,
                                                                                 _preload_content=False))
            await _gang_policy(kube, created)  # the ranks reach each other, and nothing else reaches them
        else:
            created = await api_json(kube.batch.create_namespaced_job(ns, job, _preload_content=False))
    except BaseException as e:
        try:
            held = await _held(kube, kind, ns, name) if isinstance(e, client.ApiException) and e.status == 409 \
                else None
            if held is not None and _earlier_try(held, job):  # its ConfigMap is its own: kept
                return held, False
        except BaseException:
            await _roll_back(kube, ns, name, made_cm)
            raise
        await _roll_back(kube, ns, name, made_cm)
        raise
    try:
        await api_json(kube.core.patch_namespaced_config_map(
            name, ns, {"metadata": {"ownerReferences": [owner_reference(created)]}}, _preload_content=False))
    except Exception as e:  # noqa: BLE001 - the Job can run; reconcile adopts the ConfigMap later
        log.warning("could not make ConfigMap %s/%s owned by its Job (%s); the reconcile loop will", ns, name, e)
    if kube.cached([ns], kind):
        await kube.cache.wait_for(lambda: kube.cache.get(kind, ns, name) is not None)
    return created, True


async def _roll_back(kube, ns: str, name: str, made_cm: bool) -> None:
    """The Job was refused: no ConfigMap without it, if this request made it (if the delete fails too,
    the reconcile loop removes it)."""
    if not made_cm:
        return
    try:
        await api_json(kube.core.delete_namespaced_config_map(name, ns, _preload_content=False))
    except Exception as e:  # noqa: BLE001 - the original error is the one to report
        log.warning("rollback of ConfigMap %s/%s failed (%s); the reconcile loop will remove it", ns, name, e)


async def _held(kube, kind: str, ns: str, name: str) -> dict | None:
    """The object the API server holds under this name (None: none now)."""
    try:
        if kind == "configmaps":
            return await api_json(kube.core.read_namespaced_config_map(name, ns, _preload_content=False))
        if kind == "jobsets":
            return await api_json(kube.custom.get_namespaced_custom_object(*JOBSET, ns, "jobsets", name,
                                                                           _preload_content=False))
        return await api_json(kube.batch.read_namespaced_job(name, ns, _preload_content=False))
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def _earlier_try(held: dict | None, job: dict) -> bool:
    """`held` was made by an earlier try of `job`'s submission (the same user's Idempotency-Key); under that key
    with another body it is `idempotency.KeyReused`. Another submission's object is False (a name clash)."""
    meta = job["metadata"]
    submission = (meta.get("labels") or {}).get(SUBMISSION_LABEL)
    if not submission or not idempotency.is_submission(held, (meta.get("annotations") or {}).get(USER_ANNOTATION),
                                                       submission):
        return False
    idempotency.check_replay(held, meta["annotations"][REQUEST_DIGEST_ANNOTATION])
    return True


async def _gang_policy(kube, jobset: dict) -> None:
    """Create the JobSet's own NetworkPolicy; if that fails, delete the JobSet (its policy, if the create
    did happen despite the error, goes with it: it is owned) and re-raise."""

    ns = jobset["metadata"]["namespace"]
    try:
        await api_json(kube.net.create_namespaced_network_policy(ns, jobset_ranks_policy(jobset),
                                                                 _preload_content=False))
    except BaseException:
        try:
            await _ignore_404(kube.delete_call(jobset))
        except Exception as e:  # noqa: BLE001 - the original error is the one to report
            log.warning("rollback of JobSet %s/%s failed (%s): its ConfigMap is deleted, so the reconcile loop "
                        "deletes it", ns, jobset["metadata"]["name"], e)
        raise


def plan_reconcile(jobs: list[dict], config_maps: list[dict], now: datetime, grace_seconds: float,
                   policies_known: frozenset | set = frozenset()) -> list[tuple]:
    """What to do in one namespace (pure): ("delete-configmap", name), ("own-configmap", name, job),
    ("delete-job", name), ("ensure-policy", name, jobset). `jobs`: Jobs and JobSets; `policies_known`: uids
    of JobSets whose NetworkPolicy was seen. Only objects of this service (job label and user annotation)
    are touched."""
    jobs_by = {j["metadata"]["name"]: j for j in jobs if _ours(j)}
    cms_by = {c["metadata"]["name"]: c for c in config_maps if _ours(c)}
    out: list[tuple] = []
    for name, cm in sorted(cms_by.items()):
        job = jobs_by.get(name)
        owners = [r for r in cm["metadata"].get("ownerReferences") or [] if r.get("kind") in ("Job", "JobSet")]
        if job is None and not owners and _age(cm, now) >= grace_seconds:
            out.append(("delete-configmap", name))
        elif job is not None and not owners:
            out.append(("own-configmap", name, job))
    for name, job in sorted(jobs_by.items()):
        if _finished(job) or _age(job, now) < grace_seconds:
            continue
        if name not in cms_by:
            out.append(("delete-job", name))
        elif job.get("kind") == "JobSet" and job["metadata"].get("uid") not in policies_known:
            out.append(("ensure-policy", name, job))
    return out


async def reconcile(kube, grace_seconds: float, now: datetime | None = None,
                    policies_known: set | None = None) -> list[str]:
    """One pass over the team namespaces (read from the API, not the cache); returns what it did.
    `policies_known`: JobSet uids whose NetworkPolicy exists, kept from pass to pass (grown here)."""

    now = now or datetime.now(timezone.utc)
    known = set() if policies_known is None else policies_known
    done: list[str] = []
    present: set = set()  # the JobSets that exist: `known` keeps no others
    for ns in kube.namespaces:
        jobs = (await api_json(kube.batch.list_namespaced_job(ns, label_selector=JOB_LABEL,
                                                              _preload_content=False))).get("items", [])
        if kube.jobsets:
            jobs += (await api_json(kube.custom.list_namespaced_custom_object(
                *JOBSET, ns, "jobsets", label_selector=JOB_LABEL, _preload_content=False))).get("items", [])
        cms = (await api_json(kube.core.list_namespaced_config_map(ns, label_selector=JOB_LABEL,
                                                                   _preload_content=False))).get("items", [])
        present |= {j["metadata"].get("uid") for j in jobs if j.get("kind") == "JobSet"}
        for action, name, *job in plan_reconcile(jobs, cms, now, grace_seconds, known):
            if action == "ensure-policy":
                if said := await _ensure_policy(kube, job[0], known):
                    done.append(said)
            elif action == "delete-configmap":
                await _ignore_404(kube.core.delete_namespaced_config_map(name, ns, _preload_content=False))
                done.append(f"deleted ConfigMap {ns}/{name}: its Job was never created")
            elif action == "own-configmap":
                await api_json(kube.core.patch_namespaced_config_map(
                    name, ns, {"metadata": {"ownerReferences": [owner_reference(job[0])]}}, _preload_content=False))
                done.append(f"ConfigMap {ns}/{name} now owned by its Job")
            else:
                gone = next(j for j in jobs if j["metadata"]["name"] == name)
                await _ignore_404(kube.delete_call(gone))
                done.append(f"deleted {gone.get('kind') or 'Job'} {ns}/{name}: its notebook ConfigMap is missing, "
                            "so it could never start")
    known &= present
    for line in done:
        log.warning("reconcile: %s", line)
    return done


async def _ensure_policy(kube, jobset: dict, known: set) -> str | None:
    """Create the JobSet's NetworkPolicy if it is missing (409: it is there), else delete the JobSet."""

    ns, name = jobset["metadata"]["namespace"], jobset["metadata"]["name"]
    try:
        await api_json(kube.net.create_namespaced_network_policy(ns, jobset_ranks_policy(jobset),
                                                                 _preload_content=False))
        said = f"created the missing NetworkPolicy of JobSet {ns}/{name} (its ranks could not reach each other)"
    except client.ApiException as e:
        if e.status != 409:
            await _ignore_404(kube.delete_call(jobset))
            return (f"deleted JobSet {ns}/{name}: its NetworkPolicy is missing and could not be created "
                    f"(HTTP {e.status}), so its ranks could never reach each other")
        said = None
    known.add(jobset["metadata"].get("uid"))
    return said


async def _ignore_404(coro) -> None:

    try:
        await api_json(coro)
    except client.ApiException as e:
        if e.status != 404:
            raise


async def reconcile_forever(kube, grace_seconds: float, interval: float) -> None:
    """Run `reconcile` every `interval` seconds; an API error is logged and tried again next time."""
    known: set = set()  # JobSets whose NetworkPolicy exists: one create attempt each per process
    while True:
        try:
            await reconcile(kube, grace_seconds, policies_known=known)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - keep the loop alive through apiserver outages
            log.warning("reconcile pass failed: %s", e)
        await asyncio.sleep(interval)
