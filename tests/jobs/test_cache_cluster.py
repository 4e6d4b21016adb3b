"""The gpu-jobs service's watch-fed cache against the dev cluster's real kube-apiserver: it follows
creates and deletes of labelled Jobs only, and `Kube` serves reads from it without calling the API."""
from __future__ import annotations

import pytest
from kubernetes_asyncio import client, config

from jupyterhub_gpu.contract import JOB_LABEL, USER_ANNOTATION
from jupyterhub_gpu.services.jobs.cache import JobsCache
from jupyterhub_gpu.services.jobs.kube import Kube

pytestmark = pytest.mark.cluster


def job(name: str, labelled: bool = True, user: str = "alice") -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {JOB_LABEL: name} if labelled else {},
                         "annotations": {USER_ANNOTATION: user}},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "runner", "image": "simulated", "args": ["gpuhub-runner"]}]}}}}


async def api_for(kubeconfig) -> client.ApiClient:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


async def test_cache_follows_labelled_jobs_and_serves_reads_without_the_api(cluster, namespace):
    api = await api_for(cluster.kubeconfig)
    cache = JobsCache(api, [namespace])
    # reads go through a client that cannot reach any API server: they must come from the cache
    dead = client.Configuration()
    dead.host = "https://127.0.0.1:9"
    unreachable = client.ApiClient(dead)
    try:
        await cache.start()
        assert cache.synced and cache.requests >= 3  # one list per kind
        kube = Kube(unreachable, [namespace], cache=cache)
        batch = client.BatchV1Api(api)
        await batch.create_namespaced_job(namespace, job("gpu-alice-a"))
        await batch.create_namespaced_job(namespace, job("gpu-bob-b", user="bob"))
        await batch.create_namespaced_job(namespace, job("not-ours", labelled=False))
        assert await cache.wait_for(lambda: {"gpu-alice-a", "gpu-bob-b"} <= set(
            cache.stores[("jobs", namespace)].by_name))
        assert [j["metadata"]["name"] for j in await kube.jobs("alice")] == ["gpu-alice-a"]
        assert sorted(j["metadata"]["name"] for j in await kube.jobs()) == ["gpu-alice-a", "gpu-bob-b"]
        assert (await kube.job("gpu-bob-b"))["metadata"]["annotations"][USER_ANNOTATION] == "bob"
        assert await kube.job("not-ours") is None  # not made by the service: never seen
        assert await kube.workloads([namespace]) == [] and await kube.pods([namespace], "gpu-alice-a") == []
        await batch.delete_namespaced_job("gpu-alice-a", namespace, propagation_policy="Background")
        assert await cache.wait_for(lambda: cache.get("jobs", namespace, "gpu-alice-a") is None)
        assert [j["metadata"]["name"] for j in await kube.jobs()] == ["gpu-bob-b"]
        # an unsynced cache (or a namespace it does not cover) falls back to the API
        assert not Kube(unreachable, [namespace, "elsewhere"], cache=cache).cached([namespace, "elsewhere"])
    finally:
        await cache.stop()
        await unreachable.close()
        await api.close()
