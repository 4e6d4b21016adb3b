"""`gpuhub render terraform`: the node pools as azurerm_kubernetes_cluster_node_pool resources, parsed back with
python-hcl2 and checked against the facts deploy/aks-nodepools.sh is checked against; the script and the
Terraform agree pool by pool; any label or taint a valid file has comes back from the HCL exactly (hypothesis);
with `terraform` on PATH, its own parser says the same."""
from __future__ import annotations

import base64
import json
import os
import random
import shutil
import subprocess
import unicodedata

import hcl2
import pytest
import yaml
from hcl2.utils import SerializationOptions
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.builders import terraform
from jupyterhub_gpu.builders.aks_pools import (
    AGENTPOOL,
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    aks_node_pool,
    aks_node_pools,
)
from jupyterhub_gpu.builders.deploy import render_aks_script
from jupyterhub_gpu.model.profiles import SPOT_TAINT
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles_text
from jupyterhub_gpu.tools import cli

SPOT_KEY = SPOT_TAINT["key"]
SPOT_TAINT_TEXT = f"{SPOT_KEY}={SPOT_TAINT['value']}:{SPOT_TAINT['effect']}"
_VALUES = SerializationOptions(strip_string_quotes=True, with_comments=False, explicit_blocks=False)


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def parse(text: str) -> dict:
    """The HCL as values: {"terraform": ..., "variable": {name: body}, "resources": {name: body}}."""
    doc = hcl2.loads(text, serialization_options=_VALUES)
    resources = {}
    for block in doc.get("resource", []):
        for rtype, named in block.items():
            assert rtype == terraform.RESOURCE_TYPE
            for name, body in named.items():
                assert name not in resources
                resources[name] = body
    variables = {n: b for block in doc.get("variable", []) for n, b in block.items()}
    return {"terraform": doc["terraform"], "variable": variables, "resources": resources}


def render(cfg) -> dict:
    return parse(terraform.render_terraform(cfg, "profiles.yaml"))


# ------------------------------------------------------------------------------------ the example file
def test_provider_is_pinned_and_the_cluster_is_a_variable(cfg):
    doc = render(cfg)
    (tf,) = doc["terraform"]
    (providers,) = tf["required_providers"]
    assert providers["azurerm"] == {"source": "hashicorp/azurerm", "version": terraform.PROVIDER_VERSION}
    assert terraform.PROVIDER_VERSION.startswith("~> 4.")
    for body in doc["resources"].values():
        assert body["kubernetes_cluster_id"] == "${var.kubernetes_cluster_id}"
    # in the source form a string keeps its quotes: these are expressions (a type, an attribute), not strings
    raw = hcl2.loads(terraform.render_terraform(cfg), serialization_options=SerializationOptions(
        with_comments=False, explicit_blocks=False))
    assert raw["variable"] == [{'"kubernetes_cluster_id"': {"description": raw["variable"][0][
        '"kubernetes_cluster_id"']["description"], "type": "string"}}]
    (gput4,) = [r['"gput4"'] for block in raw["resource"] for r in block.values() if '"gput4"' in r]
    assert gput4["lifecycle"] == [{"ignore_changes": ["node_count"]}] and gput4["priority"] == '"Regular"'


def test_each_pool_as_the_script_test_checks_it(cfg):
    """The facts tests/unit/test_deploy.py checks in aks-nodepools.sh, here in the HCL."""
    resources = render(cfg)["resources"]
    assert set(resources) == {n for n, p in cfg.pools.items() if p.is_gpu}  # the system pool comes with the cluster
    for name, r in resources.items():
        pool = cfg.pools[name]
        assert r["name"] == pool.node_selector[AGENTPOOL]
        assert r["mode"] == "User" and r["os_type"] == "Linux"
        assert r["vm_size"] == pool.instance_type
        assert "sku=gpu:NoSchedule" in r["node_taints"]
        assert r["auto_scaling_enabled"] is True
        assert (r["min_count"], r["max_count"], r["node_count"]) == (pool.min_nodes, pool.max_nodes, pool.min_nodes)
        assert r["lifecycle"] == [{"ignore_changes": ["node_count"]}]
        assert r["gpu_driver"] == "None"  # the provider's value (case-sensitive): the GPU operator installs it
        assert r["node_labels"][DEVICE_PLUGIN_CONFIG_LABEL] == name
        assert (MIG_CONFIG_LABEL in r["node_labels"]) == (pool.sharing.strategy == "mig")
        assert r["priority"] == ("Spot" if pool.spot else "Regular")
        assert ("eviction_policy" in r) == ("spot_max_price" in r) == pool.spot
    assert resources["gpumig"]["node_labels"][MIG_CONFIG_LABEL] == "all-1g.10gb"
    spot = resources["spota100"]
    assert (spot["priority"], spot["eviction_policy"], spot["spot_max_price"]) == ("Spot", "Delete", -1)
    # AKS puts these on a spot pool itself; the provider's docs ask to declare them (no drift in plans)
    assert spot["node_labels"][SPOT_KEY] == "spot" and SPOT_TAINT_TEXT in spot["node_taints"]
    assert SPOT_KEY not in resources["gput4"]["node_labels"]
    assert not any(t.startswith(SPOT_KEY) for t in resources["gput4"]["node_taints"])


# --------------------------------------------------------------------- script and Terraform agree
def script_pools(text: str, tmp_path) -> dict[str, dict]:
    """Each `az aks nodepool add` of the script as bash hands it to `az` (a stand-in prints the words), as the
    facts it says (absent flags: the CLI's defaults)."""
    script = tmp_path / "aks-nodepools.sh"
    script.write_text(text)
    stub = 'az() { printf "%s\\0" "$@"; printf "\\1\\0"; }; . "$0"'
    r = subprocess.run(["bash", "-c", stub, str(script)], capture_output=True, timeout=60,
                       env={"PATH": os.environ["PATH"], "RESOURCE_GROUP": "rg", "CLUSTER": "aks"})
    assert r.returncode == 0, r.stderr
    out = {}
    for call in r.stdout.decode().split("\1\0")[:-1]:
        words = call.split("\0")[:-1]
        assert words[:3] == ["aks", "nodepool", "add"], words
        flags: dict[str, list[str]] = {}
        for w in words[3:]:
            if w.startswith("--"):
                flag = w
                flags[flag] = []
            else:
                flags[flag].append(w)
        assert flags["--resource-group"] == ["rg"] and flags["--cluster-name"] == ["aks"]
        (name,) = flags["--name"]
        one = {f: v[0] for f, v in flags.items() if len(v) == 1}
        out[name] = {
            "vm_size": one.get("--node-vm-size"),
            "labels": dict(item.split("=", 1) for item in flags.get("--labels", [])),
            "taints": one["--node-taints"].split(",") if "--node-taints" in one else [],
            "autoscale": "--enable-cluster-autoscaler" in flags,
            "min_count": int(one["--min-count"]) if "--min-count" in one else None,
            "max_count": int(one["--max-count"]) if "--max-count" in one else None,
            "node_count": int(one["--node-count"]),
            "priority": one.get("--priority", "Regular"),
            "eviction_policy": one.get("--eviction-policy"),
            "spot_max_price": float(one["--spot-max-price"]) if "--spot-max-price" in one else None,
            "gpu_driver": one.get("--gpu-driver", "").lower() or None,  # the CLI's enum is case-insensitive
            "mode": one["--mode"], "os_type": one["--os-type"],
        }
    return out


def terraform_pools(text: str) -> dict[str, dict]:
    """Each resource as the same facts, less what the CLI leaves to AKS (a spot pool's own label and taint)."""
    out = {}
    for r in parse(text)["resources"].values():
        spot = r["priority"] == "Spot"
        labels = dict(r.get("node_labels", {}))
        taints = list(r.get("node_taints", []))
        if spot:
            assert labels.pop(SPOT_KEY) == "spot" and taints.pop() == SPOT_TAINT_TEXT
        out[r["name"]] = {
            "vm_size": r.get("vm_size"), "labels": labels, "taints": taints,
            "autoscale": r.get("auto_scaling_enabled", False),
            "min_count": r.get("min_count"), "max_count": r.get("max_count"), "node_count": r["node_count"],
            "priority": r["priority"], "eviction_policy": r.get("eviction_policy"),
            "spot_max_price": float(r["spot_max_price"]) if "spot_max_price" in r else None,
            "gpu_driver": r.get("gpu_driver", "").lower() or None,
            "mode": r["mode"], "os_type": r["os_type"],
        }
    return out


#: Pools beyond the example's: a CPU user pool, a fixed-size one, a name starting with a digit, a custom MIG
#: layout, labels and taints at the edges of Kubernetes' syntax (prefixes, dots, underscores, 63 characters,
#: an empty value), and a display name with a line break and `${`.
MORE_POOLS = {
    "cpuwork": {"node_selector": {AGENTPOOL: "cpuwork", "team": "a_b.c-D"}, "instance_type": "Standard_D16s_v5",
                "max_nodes": 3},
    "fixed": {"node_selector": {AGENTPOOL: "fixed", "example.com/we.ird_Key": "x" * 63, "empty": ""},
              "min_nodes": 2, "taints": [{"key": "dedicated.example.com/batch", "value": "Batch_1.0",
                                          "effect": "NoExecute"}]},
    "9spot": {"node_selector": {AGENTPOOL: "ninespot"}, "spot": True, "max_nodes": 2,
              "taints": [{"key": "sku", "value": "gpu"}, SPOT_TAINT], "gpu": {"model": "T4"},
              "instance_type": "Standard_NC4as_T4_v3", "display_name": "two\nlines ${x}"},
    "migc": {"node_selector": {AGENTPOOL: "migc"}, "taints": [{"key": "sku", "value": "gpu"}],
             "gpu": {"model": "A100-80GB"}, "sharing": {"strategy": "mig", "layout": {"3g.40gb": 1, "1g.10gb": 2}},
             "instance_type": "Standard_NC24ads_A100_v4", "max_nodes": 1, "min_nodes": 1},
}

#: What az's --labels / --node-taints would split, drop or refuse, or the API server would refuse on a node
#: selector or toleration: validation refuses each, so neither renderer ever sees it.
HOSTILE_LABELS = [("team", "a b"), ("team=x", "y"), ("k", "a,b=c"), ("k", "a\x00b"), ("k", "$(id)"),
                  ("k", "${x}"), ("k", "x\n"), ('we"ird', "v"), ("k", "x" * 64), ("a/b/c", "v"), ("", "v")]
HOSTILE_TAINTS = [{"key": "evil", "value": "v:NoSchedule,other=1"}, {"key": "k,x", "value": "v"},
                  {"key": "k", "value": "$(id)"}, {"key": "k", "value": "a b"}]


def with_pools(pools: dict) -> object:
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["pools"] |= pools
    return parse_profiles_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize("more", [{}, MORE_POOLS], ids=["example", "more-pools"])
def test_script_and_terraform_agree_pool_by_pool(more, tmp_path):
    cfg = with_pools(more)
    from_script = script_pools(render_aks_script(cfg), tmp_path)
    from_terraform = terraform_pools(terraform.render_terraform(cfg))
    want = {f.name for f in aks_node_pools(cfg) if not f.with_cluster}
    assert set(from_script) == set(from_terraform) == want
    for name in want:
        assert from_terraform[name] == from_script[name], name


def test_resource_names_are_identifiers_and_unique():
    cfg = with_pools(MORE_POOLS)
    resources = render(cfg)["resources"]
    assert "pool_9spot" in resources and resources["pool_9spot"]["name"] == "ninespot"
    assert terraform.resource_name("gput4") == "gput4" and terraform.resource_name("a-1") == "a-1"


def test_comments_stay_comments():
    """A display name with a line break cannot put a line of its own into either file."""
    cfg = with_pools(MORE_POOLS)
    for text in (terraform.render_terraform(cfg), render_aks_script(cfg)):
        assert "\nlines ${x}" not in text and "# pool '9spot': two lines ${x}" in text


@pytest.mark.parametrize("label", HOSTILE_LABELS, ids=repr)
def test_a_label_that_az_or_the_api_server_would_change_or_refuse_is_refused(label):
    key, value = label
    with pytest.raises(ProfilesError, match="Kubernetes label"):
        with_pools({"odd": {"node_selector": {AGENTPOOL: "odd", key: value}}})


@pytest.mark.parametrize("taint", HOSTILE_TAINTS, ids=repr)
def test_a_taint_that_az_would_split_or_refuse_is_refused(taint):
    with pytest.raises(ProfilesError, match="Kubernetes label"):
        with_pools({"odd": {"node_selector": {AGENTPOOL: "odd"}, "taints": [taint]}})


def test_a_pool_name_with_a_trailing_newline_is_refused():
    with pytest.raises(ProfilesError, match="pool name"):
        with_pools({"odd\n": {"node_selector": {AGENTPOOL: "odd"}}})


# ---------------------------------------------------------------------------------- hostile strings
FRAGMENTS = ['"', "\\", "${", "%{", "$${", "%%{", "$", "%", "{", "}", "\n", "\r", "\t", "\x00", "\x7f", "\u2028",
             "\ufeff", "é", "\U0001f600", "\\u0041", "\\n", "=", ":", " ", "#", "//", "/*", "<<EOF", "a"]
text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(st.characters(blacklist_categories=("Cs",)),
                                                              max_size=4)), max_size=6) \
    .map(lambda parts: unicodedata.normalize("NFC", "".join(parts)))
#: Labels and taints as Kubernetes allows them (validation refuses the rest: HOSTILE_LABELS); the free-text
#: strings (display names, VM sizes) take every hostile fragment.
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
label_value = st.from_regex(rf"({_NAME})?", fullmatch=True)
key = st.from_regex(rf"([a-z0-9]([-a-z0-9]{{0,8}}[a-z0-9])?(\.[a-z0-9]{{1,5}}){{0,2}}/)?{_NAME}", fullmatch=True) \
    .filter(lambda s: not s.startswith("kubernetes.azure.com/"))
effect = st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"])
taint = st.fixed_dictionaries({"key": key, "value": label_value, "effect": effect})


@st.composite
def pools(draw):
    out = {}
    for i in range(draw(st.integers(1, 3))):
        selector = draw(st.dictionaries(key, label_value, min_size=1, max_size=3))
        if draw(st.booleans()):
            selector[AGENTPOOL] = draw(label_value)
        pool = {"node_selector": selector, "display_name": draw(text) or None,
                "taints": draw(st.lists(taint, max_size=3)), "spot": draw(st.booleans()),
                "min_nodes": draw(st.integers(0, 2)), "instance_type": draw(text) or None}
        if draw(st.booleans()):
            pool["max_nodes"] = pool["min_nodes"] + draw(st.integers(0, 3))
        if draw(st.booleans()):
            pool["gpu"] = {"model": "T4"}
            pool["taints"].append({"key": "sku", "value": "gpu", "effect": "NoSchedule"})
        out[f"p{i}"] = pool
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pools())
@example({"p0": {"node_selector": {"a.b/c_d": "", "x": "Y-1.2_3"}, "min_nodes": 0,
                 "taints": [{"key": "k.example/x", "value": "v", "effect": "NoSchedule"}], "spot": True,
                 "display_name": "x\n\u2028${a}%{ if b }", "instance_type": "Standard_NC4as_T4_v3 ${var.x} $${ \\"}})
def test_any_label_and_taint_comes_back_exactly(drawn):
    data = {"pools": drawn, "profiles": [{"slug": "cpu", "display_name": "CPU", "cpu": 1, "memory": "1Gi"}]}
    cfg = parse_profiles_text(yaml.safe_dump(data))
    resources = render(cfg)["resources"]
    for name, pool in cfg.pools.items():
        facts = aks_node_pool(name, pool)
        if facts.with_cluster:
            assert terraform.resource_name(name) not in resources
            continue
        r = resources[terraform.resource_name(name)]
        assert r["name"] == pool.node_selector.get(AGENTPOOL, name)
        assert r.get("vm_size") == (pool.instance_type or None)
        labels = r.get("node_labels", {})
        for k, v in pool.node_selector.items():
            assert k == AGENTPOOL or labels[k] == v
        assert labels == facts.labels | facts.aks_labels
        taints = r.get("node_taints", [])
        assert taints == [f"{t.key}={t.value}:{t.effect}" for t in pool.taints if t.key != SPOT_KEY] + (
            [SPOT_TAINT_TEXT] if pool.spot else [])


def test_a_string_terraform_would_change_is_refused(tmp_path, capsys):
    decomposed = "cafe\u0301"  # HCL normalizes string literals to NFC: it would arrive as "café"
    with pytest.raises(terraform.TerraformError, match="NFC"):
        terraform.hcl_string(decomposed)
    with pytest.raises(terraform.TerraformError, match="surrogate"):
        terraform.hcl_string(yaml.safe_load('"\\ud800"'))  # YAML's escapes can make one; no UTF-8 file can
    cfg = with_pools({"odd": {"node_selector": {"team": "odd"}, "instance_type": decomposed}})
    with pytest.raises(terraform.TerraformError, match="pool 'odd'"):
        terraform.render_terraform(cfg)
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["pools"]["odd"] = {"node_selector": {"team": "odd"}, "instance_type": decomposed}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["render", "terraform", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "NFC" in err and err.startswith("error: ")


# ----------------------------------------------------------------------------------------------- CLI
def test_cli_renders_to_stdout_and_to_a_file(cfg, tmp_path, capsys):
    assert cli.main(["render", "terraform", str(EXAMPLE_PROFILES)]) == 0
    out, _ = capsys.readouterr()
    assert parse(out)["resources"].keys() == render(cfg)["resources"].keys()
    target = tmp_path / "nodepools.tf"
    assert cli.main(["render", "terraform", str(EXAMPLE_PROFILES), "-o", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and str(target) in err
    assert target.read_text() == terraform.render_terraform(cfg, str(EXAMPLE_PROFILES))


def test_cli_invalid_file_is_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools:\n  gpu: {node_selector: {a: b}, gpu: {model: T4}}\nprofiles: []\n")
    assert cli.main(["render", "terraform", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "pools.gpu.taints: a GPU pool needs a NoSchedule taint" in err


# ------------------------------------------------------------- Terraform's own parser, where installed
needs_terraform = pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not on PATH")


def _terraform(args: list[str], cwd, stdin: str = "") -> str:
    r = subprocess.run(["terraform", *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120,
                       env={"PATH": os.environ["PATH"], "HOME": str(cwd), "TF_IN_AUTOMATION": "1",
                            "CHECKPOINT_DISABLE": "1"})
    assert r.returncode == 0, r.stderr
    return r.stdout


@needs_terraform
def test_terraform_fmt_leaves_the_output_as_it_is(tmp_path):
    text = terraform.render_terraform(with_pools(MORE_POOLS))
    assert _terraform(["fmt", "-"], tmp_path, text) == text


@needs_terraform
def test_terraform_reads_every_string_back_exactly(tmp_path):
    """HCL's own parser (terraform console) on hostile strings: the value is what went in."""
    rng = random.Random(28)
    strings = [unicodedata.normalize("NFC", "".join(rng.choice(FRAGMENTS + [chr(rng.randrange(0x20, 0x3000))])
                                                    for _ in range(rng.randrange(8)))) for _ in range(300)]
    strings += FRAGMENTS + ["$$${x}", "%%%{x}", "$", "%", "${", "a$", "\\$${"]
    locals_ = "\n".join(f"  s{i} = {terraform.hcl_string(s)}" for i, s in enumerate(strings))
    keys = "\n".join(f"    {terraform.hcl_string(s)} = {i}" for i, s in enumerate(dict.fromkeys(strings)))
    (tmp_path / "main.tf").write_text(f"locals {{\n{locals_}\n  m = {{\n{keys}\n  }}\n}}\n")
    expr = "base64encode(jsonencode([[" + ", ".join(f"local.s{i}" for i in range(len(strings))) + "], local.m]))"
    out = _terraform(["console"], tmp_path, expr + "\n").strip()
    values, mapping = json.loads(base64.b64decode(json.loads(out)))
    assert values == strings
    assert mapping == {s: i for i, s in enumerate(dict.fromkeys(strings))}
