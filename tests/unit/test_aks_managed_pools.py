"""AKS-managed GPU pools (`gpu_stack: aks-managed`): what the file may ask of one, how the script and Terraform
render it, and what the nodes of such a pool are expected to say (model/gpu_stack.py)."""
from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from test_terraform import parse, script_pools, terraform_pools, with_pools

from jupyterhub_gpu.builders import terraform
from jupyterhub_gpu.builders.aks_pools import AGENTPOOL, DEVICE_PLUGIN_CONFIG_LABEL, aks_node_pools
from jupyterhub_gpu.builders.deploy import MANAGED_GPU_NOTE, render_aks_script, render_device_plugin_config
from jupyterhub_gpu.model.gpu_stack import MANAGED_GPU_LABEL, OPERATOR_OPERANDS_LABEL
from jupyterhub_gpu.model.node_facts import gpu_labels
from jupyterhub_gpu.model.profiles import Pool
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles_text

GPU = {"taints": [{"key": "sku", "value": "gpu"}], "instance_type": "Standard_NC40ads_H100_v5",
       "gpu": {"model": "H100-NVL-94GB"}}
MANAGED = {"managed": {"node_selector": {AGENTPOOL: "managed"}, **GPU, "gpu_stack": "aks-managed", "min_nodes": 2}}


def problems(pool: dict) -> list[str]:
    """The problems validation reports for the example file plus this one pool (named `p`)."""
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["pools"]["p"] = {"node_selector": {AGENTPOOL: "p"}, **pool}
    with pytest.raises(ProfilesError) as e:
        parse_profiles_text(yaml.safe_dump(data, sort_keys=False))
    return [str(p) for p in e.value.problems]


# ------------------------------------------------------------------------------------ validation
def test_a_whole_gpu_fixed_size_pool_is_valid_and_operator_stays_the_default():
    cfg = with_pools(MANAGED)
    assert cfg.pools["managed"].gpu_stack == "aks-managed"
    assert {p.gpu_stack for n, p in cfg.pools.items() if n != "managed"} == {"operator"}


@pytest.mark.parametrize("sharing, word", [({"strategy": "time-slicing", "replicas": 4}, "device plugin config"),
                                           ({"strategy": "mps", "replicas": 4}, "device plugin config"),
                                           ({"strategy": "mig", "layout": "all-1g.12gb"}, "MIG instance labels")])
def test_sharing_and_mig_are_refused_with_the_reason(sharing, word):
    found = problems({**GPU, "gpu_stack": "aks-managed", "sharing": sharing})
    assert any(p.startswith("pools.p.sharing:") and word in p for p in found), found


def test_autoscaling_is_refused_during_the_preview():
    found = problems({**GPU, "gpu_stack": "aks-managed", "max_nodes": 3})
    assert any(p.startswith("pools.p.max_nodes:") and "autoscaler" in p for p in found), found


def test_a_cpu_pool_cannot_be_aks_managed():
    found = problems({"gpu_stack": "aks-managed"})
    assert any(p.startswith("pools.p.gpu_stack:") and "GPU pools" in p for p in found), found


def test_another_stack_name_is_refused_where_it_is_written():
    assert any(p.startswith("pools.p.gpu_stack") for p in problems({**GPU, "gpu_stack": "Managed"}))


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=40), st.integers(), st.booleans(), st.none(), st.lists(st.text(max_size=5))))
def test_no_other_value_is_a_stack(value):
    if value in ("operator", "aks-managed"):
        return
    with pytest.raises(ValidationError):
        Pool.model_validate({"node_selector": {AGENTPOOL: "p"}, "gpu_stack": value})


# ------------------------------------------------------------------------------------ rendering
def test_the_script_asks_aks_for_its_managed_stack_and_keeps_the_operator_away(tmp_path):
    cfg = with_pools(MANAGED)
    text = render_aks_script(cfg)
    pools = script_pools(text, tmp_path)
    managed = pools["managed"]
    assert managed["gpu_driver"] is None and not managed["autoscale"] and managed["node_count"] == 2
    assert managed["labels"] == {OPERATOR_OPERANDS_LABEL: "false"}  # no device plugin config or MIG label
    assert "--enable-managed-gpu=true" in text.split("# pool 'managed'")[1].split("# pool")[0]
    assert all(line in text for line in MANAGED_GPU_NOTE)
    # the operator's pools are as before: no driver from AKS, their device plugin config named
    assert pools["gput4"]["gpu_driver"] == "none" and DEVICE_PLUGIN_CONFIG_LABEL in pools["gput4"]["labels"]
    assert text.count("--enable-managed-gpu") == 1


def test_a_file_without_managed_pools_renders_no_preview_note():
    assert MANAGED_GPU_NOTE[0] not in render_aks_script(with_pools({}))


def test_terraform_leaves_the_managed_pool_to_the_script_and_still_parses():
    cfg = with_pools(MANAGED)
    text = terraform.render_terraform(cfg)
    assert "managed" not in parse(text)["resources"]
    assert "# pool 'managed': an AKS-managed GPU node pool" in text and "--enable-managed-gpu=true" in text
    # every other pool is declared as the script creates it
    want = {f.name for f in aks_node_pools(cfg) if not f.with_cluster and not f.managed_gpu}
    assert set(terraform_pools(text)) == want


def test_the_device_plugin_config_has_no_entry_for_a_managed_pool():
    data = render_device_plugin_config(with_pools(MANAGED))["data"]
    assert "managed" not in data and "gput4" in data


def test_a_managed_node_carries_aks_label_and_no_gpu_feature_discovery_labels():
    cfg = with_pools(MANAGED)
    assert gpu_labels(cfg.pools["managed"]) == {MANAGED_GPU_LABEL: "enabled"}
    assert "nvidia.com/gpu.product" in gpu_labels(cfg.pools["gpuh100"])
