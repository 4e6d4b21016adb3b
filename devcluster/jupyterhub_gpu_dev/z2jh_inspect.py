"""`python -m jupyterhub_gpu_dev.z2jh_inspect TREE USER GROUPS PROFILE...`: load the z2jh chart's own hub configuration
(TREE/jupyterhub_config.py, laid out by devcluster/jupyterhub_gpu_dev/z2jh.py) the way JupyterHub loads its config file,
then ask the spawner it names what the hub would offer and create; print one JSON object.

Runs in a process of its own (the chart's config puts its folder on sys.path and caches what it read), with
the hub pod's environment, under whichever interpreter (and so JupyterHub version) the caller picks.
"""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from traitlets.config.loader import PyFileConfigLoader
from traitlets.utils.importstring import import_item


def load(tree: Path):
    return PyFileConfigLoader("jupyterhub_config.py", path=str(tree)).load_config()


async def inspect(tree: Path, user: str, groups: list[str], profiles: list[str]) -> dict:
    import jupyterhub
    from kubernetes_asyncio.client import ApiClient

    from jupyterhub_gpu.hub.render_pod import Group, OfflineUser, _ensure_kubeconfig

    c = load(tree)
    _ensure_kubeconfig()
    spawner_class = import_item(c.JupyterHub.spawner_class)
    out = {"jupyterhub": jupyterhub.__version__, "spawner_class": c.JupyterHub.spawner_class,
           "hub_connect_url": c.JupyterHub.get("hub_connect_url"),
           "services": {s["name"]: {k: s.get(k) for k in ("url", "command", "environment")}
                        for s in c.JupyterHub.services},
           "pods": {}, "errors": {}}
    u = OfflineUser(name=user, groups=[Group(g) for g in groups])
    for slug in profiles:
        spawner = spawner_class(_mock=True, user=u, config=c, live_capacity=False)
        try:
            entries = spawner.profile_list(spawner) if callable(spawner.profile_list) else spawner.profile_list
            entries = await entries if asyncio.iscoroutine(entries) else entries
            out["profile_list"] = [e["slug"] for e in entries]
            out["form_has_picker"] = f'value="{slug}"' in await spawner.get_options_form()
            spawner.user_options = {"profile": slug}
            await spawner.load_user_options()
            pod = await spawner.get_pod_manifest()
            async with ApiClient() as client:
                out["pods"][slug] = client.sanitize_for_serialization(pod)
        except Exception as e:  # what a user would see instead of a server
            out["errors"][slug] = f"{type(e).__name__}: {e}"
        finally:
            await spawner.api.api_client.close()
    out["servers_environment"] = dict(getattr(spawner, "environment", {}) or {})
    return out


def main(argv: list[str]) -> int:
    tree, user, groups, *profiles = argv
    print(json.dumps(asyncio.run(inspect(Path(tree), user, [g for g in groups.split(",") if g], profiles)),
                     default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
