"""Benchmark: the CPU of a user's first and later profile form, GPUSpawner vs plain KubeSpawner, one process.

    python bench/hub_form_cost.py [--users 100] [--rounds 2]

Why: bench/hub_users.py finds the package hub cheaper per user; this measures the part of it read in the
code: a plain KubeSpawner renders a user's form with a new jinja2 Environment (form.html compiled again),
GPUSpawner with one Environment per process. Each spawner is new (as each user's is in a hub), with the
example profiles (plain: bench/hub_load.py `plain_profile_list`), live capacity off (its cost is
bench/picker_render.py's), a placeholder kube config (nothing is contacted).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hub_users import KUBECONFIG  # noqa: E402


async def measure(users: int, rounds: int) -> None:
    from kubespawner import KubeSpawner

    from bench.hub_load import plain_profile_list, profile_groups
    from jupyterhub_gpu.hub.render_pod import Group, OfflineUser
    from jupyterhub_gpu.hub.spawner import GPUSpawner
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

    path = str(EXAMPLE_PROFILES)
    plain, groups = plain_profile_list(path), [Group(g) for g in profile_groups(path)]
    makers = {
        "plain": lambda i: KubeSpawner(_mock=True, user=OfflineUser(f"u{i}", groups), profile_list=plain),
        "package": lambda i: GPUSpawner(_mock=True, user=OfflineUser(f"u{i}", groups), profiles_file=path,
                                        live_capacity=False),
    }
    for r in range(rounds):
        for kind in ("plain", "package") if r % 2 == 0 else ("package", "plain"):
            await makers[kind](-1).get_options_form()  # warm: imports, the package's Environment
            spawners = [makers[kind](i) for i in range(users)]
            ms = []
            for _ in range(2):  # each user's first form, then its second (a later visit to the picker)
                t0 = time.process_time()
                for sp in spawners:
                    assert "t4-shared" in await sp.get_options_form()
                ms.append((time.process_time() - t0) * 1000 / users)
            print(f"round {r + 1} {kind}: {ms[0]:.2f} ms CPU per first form, {ms[1]:.2f} ms per later one")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--users", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        from kubernetes_asyncio.config import kube_config

        os.environ["KUBECONFIG"] = str(Path(tmp) / "kubeconfig")
        Path(os.environ["KUBECONFIG"]).write_text(KUBECONFIG)
        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = os.environ["KUBECONFIG"]  # read once at import
        asyncio.run(measure(a.users, a.rounds))


if __name__ == "__main__":
    main()
