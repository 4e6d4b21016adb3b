"""GPUSpawner is a KubeSpawner: without a profiles file it is exactly one; with a file, an admin's own
`profile_list` stops the hub instead of being shown and then refused. (KubeSpawner's own test suite with
GPUSpawner in its place: devcluster/jupyterhub_gpu_dev/kubespawner_compat.py, results in
docs/compatibility.md.)"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient
from kubespawner import KubeSpawner
from traitlets.config import Config

from jupyterhub_gpu.config import exit_on_conflicts
from jupyterhub_gpu.hub import spawner as spawner_module
from jupyterhub_gpu.hub.render_pod import OfflineUser, _ensure_kubeconfig
from jupyterhub_gpu.hub.spawner import GPUSpawner
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, profiles_path

REPO = Path(__file__).resolve().parents[2]
KS_PROFILES = [
    {"display_name": "Small", "slug": "small", "default": True, "kubespawner_override": {"cpu_limit": 1}},
    {"display_name": "Custom", "slug": "custom", "kubespawner_override": {"cpu_limit": 2},
     "profile_options": {"image": {"display_name": "Image", "choices": {
         "a": {"display_name": "A", "kubespawner_override": {"image": "a:1"}}},
         "unlisted_choice": {"enabled": True, "validation_regex": "^b:",
                             "kubespawner_override": {"image": "{value}"}}}}},
]


def config(**traits) -> Config:
    c = Config()
    c.KubeSpawner.namespace = "ns"
    c.KubeSpawner.environment = {"JUPYTERHUB_API_TOKEN": "t", "JUPYTERHUB_CLIENT_ID": "c"}
    for k, v in traits.items():
        c.KubeSpawner[k] = v
    return c


@pytest.fixture
async def pair(monkeypatch):
    """A KubeSpawner and a GPUSpawner built from the same config, no profiles file anywhere."""
    monkeypatch.delenv("GPUHUB_PROFILES", raising=False)
    _ensure_kubeconfig()
    made = []

    def make(**traits):
        c = config(**traits)
        both = [cls(config=c, _mock=True, user=OfflineUser("alice")) for cls in (KubeSpawner, GPUSpawner)]
        made.extend(both)
        return both

    yield make
    for sp in made:
        await sp.api.api_client.close()


async def manifest(sp, user_options):
    sp.user_options = user_options
    await sp.load_user_options()
    async with ApiClient() as client:
        return client.sanitize_for_serialization(await sp.get_pod_manifest())


def test_no_profiles_file_means_none_not_the_example(monkeypatch):
    monkeypatch.delenv("GPUHUB_PROFILES", raising=False)
    assert profiles_path() is None
    monkeypatch.setenv("GPUHUB_PROFILES", str(EXAMPLE_PROFILES))
    assert profiles_path() == EXAMPLE_PROFILES


async def test_without_a_profiles_file_it_is_exactly_kubespawner(pair, caplog):
    spawner_module.GPUSpawner._said_plain = False
    with caplog.at_level(logging.INFO):
        ks, gpu = pair(cpu_limit=3, image="admin/nb:1", tolerations=[{"key": "sku", "operator": "Exists"}])
        pair()
    said = [r.getMessage() for r in caplog.records if "no profiles file" in r.getMessage()]
    assert said == ["GPUSpawner: no profiles file (GPUSpawner.profiles_file, $GPUHUB_PROFILES): running as a plain "
                    "KubeSpawner"]  # once per process, not per spawner
    assert gpu.profiles_file == "" and gpu.profile_list == ks.profile_list == []
    assert gpu.additional_profile_form_template_paths == []
    assert await manifest(gpu, {}) == await manifest(ks, {})


async def test_without_a_profiles_file_the_admins_profile_list_works_as_in_kubespawner(pair):
    ks, gpu = pair(profile_list=KS_PROFILES)
    assert gpu.options_form == ks.options_form and "profile-option-custom--image" in gpu.options_form
    for options in ({}, {"profile": "custom", "image": "a"}, {"profile": "custom", "image--unlisted-choice": "b:2"}):
        ks_pod, gpu_pod = await manifest(ks, dict(options)), await manifest(gpu, dict(options))
        assert gpu_pod == ks_pod
    assert gpu_pod["spec"]["containers"][0]["image"] == "b:2"
    form = {"profile": ["custom"], "profile-option-custom--image": ["a"]}
    assert gpu.options_from_form(form) == ks.options_from_form(form) == {"profile": "custom", "image": "a"}


async def test_profile_list_and_profiles_file_together_are_refused(monkeypatch):
    monkeypatch.delenv("GPUHUB_PROFILES", raising=False)
    _ensure_kubeconfig()
    with pytest.raises(ValueError, match=r"both GPUSpawner.profiles_file \(.*profiles.yaml, also \$GPUHUB_PROFILES\) "
                                         r"and KubeSpawner.profile_list are set"):
        GPUSpawner(config=config(profile_list=KS_PROFILES), profiles_file=str(EXAMPLE_PROFILES), _mock=True,
                   user=OfflineUser("alice"), live_capacity=False)
    # set after construction (as KubeSpawner's tests do): refused when the server starts, before any pod
    sp = GPUSpawner(config=config(), profiles_file=str(EXAMPLE_PROFILES), _mock=True, user=OfflineUser("alice"),
                    live_capacity=False)
    try:
        sp.profile_list = KS_PROFILES
        with pytest.raises(ValueError, match="KubeSpawner.profile_list are set"):
            await sp.load_user_options()
    finally:
        await sp.api.api_client.close()


def test_config_check_names_both_settings(capsys, monkeypatch):
    monkeypatch.setenv("GPUHUB_PROFILES", str(EXAMPLE_PROFILES))
    c = Config()
    exit_on_conflicts(c)  # a file alone is fine
    c.KubeSpawner.profile_list = KS_PROFILES
    with pytest.raises(SystemExit) as e:
        exit_on_conflicts(c)
    assert e.value.code == 2
    assert "GPUSpawner.profiles_file" in capsys.readouterr().err
    monkeypatch.delenv("GPUHUB_PROFILES")
    exit_on_conflicts(c)  # profile_list alone is KubeSpawner's business


def test_the_real_hub_refuses_to_start_with_both(tmp_path):
    """As z2jh has it: `singleuser.profileList` sets profile_list, then extraConfig (exec'd in the same
    namespace) runs configure(c)."""
    cfg = tmp_path / "jupyterhub_config.py"
    cfg.write_text(f"c = get_config()  # noqa\nc.KubeSpawner.profile_list = {KS_PROFILES!r}\n"
                   f"exec(open({str(REPO / 'jupyterhub_config.py')!r}).read())\n")
    env = dict(os.environ, GPUHUB_PROFILES=str(EXAMPLE_PROFILES))
    r = subprocess.run([sys.executable, "-m", "jupyterhub", "-f", str(cfg), "--ip", "127.0.0.1", "--port", "18998"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "refusing to start: both GPUSpawner.profiles_file" in r.stderr
    assert "and KubeSpawner.profile_list are set" in r.stderr
    assert not list(tmp_path.glob("jupyterhub.sqlite")), "the hub must not have started"


def test_gpu_jobs_without_a_profiles_file_says_so_and_never_uses_the_example():
    env = {k: v for k, v in os.environ.items() if k != "GPUHUB_PROFILES"}
    r = subprocess.run([sys.executable, "-m", "jupyterhub_gpu.services.jobs"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 1
    assert "gpu-jobs: no profiles file; pass --profiles FILE or set $GPUHUB_PROFILES" in r.stderr
