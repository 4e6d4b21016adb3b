"""Nodes whose GPU check failed (pure): remembered for a while, kept off by new pods, said shortly first."""
from __future__ import annotations

from kubernetes_asyncio.client import (
    V1Affinity,
    V1Container,
    V1NodeAffinity,
    V1NodeSelector,
    V1NodeSelectorRequirement,
    V1NodeSelectorTerm,
    V1Pod,
    V1PodSpec,
)

from jupyterhub_gpu.hub.gpu_faults import GPUFaults, avoid_nodes, degraded_note, failure_message

DETAILS = ("GPU check failed on node aks-gput4-0: this server was given 1 x nvidia.com/gpu, but /dev/nvidiactl "
           "does not exist (no NVIDIA driver device files).")


def test_a_failing_node_is_remembered_per_pool_until_the_window_ends_or_it_works_again():
    now = [1000.0]
    faults = GPUFaults(ttl=600, clock=lambda: now[0])
    for user in ("alice", "bob"):  # two distinct users' checks failed there: failing for everyone
        faults.record("aks-gput4-0", "gput4", user=user)
        faults.record("aks-gpumig-1", "gpumig", user=user)
    assert faults.failing("gput4") == ["aks-gput4-0"] and faults.failing() == ["aks-gpumig-1", "aks-gput4-0"]
    now[0] += 601
    assert faults.failing() == [] and faults.since("aks-gput4-0") is None
    faults.record("aks-gput4-1", "gput4", user="alice")
    faults.record("aks-gput4-1", "gput4", user="bob")
    faults.clear("aks-gput4-1")  # a server passed the check there
    assert faults.failing("gput4") == []
    for user in ("alice", "bob"):  # pool unknown (a restarted hub): avoided everywhere, not shown as degraded
        faults.record("restored", None, user=user)
    assert faults.failing("gput4") == ["restored"] and faults.failing("gput4", known_only=True) == []


def test_one_users_report_changes_only_what_that_user_sees_until_another_user_confirms_it():
    """A user's own code (a .pth in home, ~/.jupyter config) can write "GPU check failed" as the termination
    message: their report alone must not mark the node failing or the pool degraded for anyone else."""
    now = [1000.0]
    faults = GPUFaults(ttl=600, clock=lambda: now[0])
    faults.record("aks-gput4-0", "gput4", user="mallory")
    faults.record("aks-gput4-0", "gput4", user="mallory")  # again: still one user
    assert faults.failing("gput4") == [] and faults.failing("gput4", known_only=True, reporter="bob") == []
    assert faults.failing("gput4", reporter="mallory") == ["aks-gput4-0"]  # the reporter keeps off it
    now[0] += 300
    faults.record("aks-gput4-0", "gput4", user="bob")  # a second, distinct user: failing for everyone
    assert faults.failing("gput4") == ["aks-gput4-0"]
    now[0] += 301  # mallory's report left the window: bob's alone again
    assert faults.failing("gput4") == [] and faults.failing("gput4", reporter="bob") == ["aks-gput4-0"]


async def test_a_forged_report_through_the_spawner_never_shows_others_a_degraded_pool():
    from jupyterhub_gpu.hub.render_pod import make_spawner
    from jupyterhub_gpu.hub.spawner import GPUSpawner
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

    GPUSpawner._gpu_faults = None  # a fresh hub process
    spawners = {u: make_spawner(EXAMPLE_PROFILES, u, ["ml-research"]) for u in ("mallory", "bob", "carol")}
    try:
        for sp in spawners.values():
            sp.gpu_profile = sp.profiles.profile("t4-shared")
        forged = {"spec": {"nodeName": "aks-gput4-0"}}
        spawners["mallory"].record_gpu_failure(forged, DETAILS)
        assert spawners["mallory"].pool_failing_note("gput4") is not None
        assert spawners["bob"].pool_failing_note("gput4") is None
        assert spawners["bob"].nodes_to_avoid() == ([], [])  # bob's server is not steered by it
        assert spawners["mallory"].nodes_to_avoid()[0] == ["aks-gput4-0"]
        spawners["carol"].record_gpu_failure(forged, DETAILS)  # a second user's check failed there too
        assert spawners["bob"].pool_failing_note("gput4") is not None
        assert spawners["bob"].nodes_to_avoid() == ([], ["aks-gput4-0"])
    finally:
        GPUSpawner._gpu_faults = None
        for sp in spawners.values():
            await sp.api.api_client.close()


def test_the_message_is_short_first_with_the_checks_words_folded_and_announced():
    text, page = failure_message("T4", DETAILS)
    assert text.startswith("This T4 node's GPU isn't working; pick another profile or start again — you'll get "
                           "another node.") and DETAILS in text
    assert page.startswith('<div role="alert"') and "<details><summary>Details</summary>" in page
    assert page.index("isn&#x27;t working") < page.index("<details>") < page.index("/dev/nvidiactl")
    assert "<script>" not in failure_message("T4", "<script>alert(1)</script>")[1]
    assert degraded_note(1, 2) == "degraded: 1 node's GPU is failing its check (of 2); new servers keep off it"


def pod(affinity=None):
    return V1Pod(spec=V1PodSpec(containers=[V1Container(name="notebook")], affinity=affinity))


def test_new_pods_keep_off_failing_nodes_in_every_affinity_term():
    p = avoid_nodes(pod(), ["n2", "n1"])
    (term,) = p.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert term.match_fields[0].to_dict() == {"key": "metadata.name", "operator": "NotIn", "values": ["n1", "n2"]}
    admin = V1NodeSelectorTerm(match_expressions=[V1NodeSelectorRequirement(key="zone", operator="In", values=["a"])])
    both = [admin, {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]
    p = avoid_nodes(pod(V1Affinity(node_affinity=V1NodeAffinity(
        required_during_scheduling_ignored_during_execution=V1NodeSelector(node_selector_terms=both)))), ["n1"])
    terms = p.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert terms[0].match_expressions[0].key == "zone" and terms[0].match_fields[0].values == ["n1"]
    assert terms[1]["matchFields"] == [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]
    assert avoid_nodes(pod(), []).spec.affinity is None


def test_everyone_else_prefers_other_nodes():
    p = avoid_nodes(pod(), [], ["n1", "n2"])
    na = p.spec.affinity.node_affinity
    assert na.required_during_scheduling_ignored_during_execution is None
    (away,) = na.preferred_during_scheduling_ignored_during_execution
    assert away.weight == 100 and away.preference.match_fields[0].values == ["n1", "n2"]
    both = avoid_nodes(pod(), ["n1"], ["n1", "n2"]).spec.affinity.node_affinity
    assert both.preferred_during_scheduling_ignored_during_execution[0].preference.match_fields[0].values == ["n2"]
    assert both.required_during_scheduling_ignored_during_execution.node_selector_terms[0].match_fields[0].values \
        == ["n1"]


def test_the_readme_tells_to_annotate_with_the_key_the_dev_agent_reads():
    from pathlib import Path

    from jupyterhub_gpu_dev.simulator_keys import SIMULATE_GPU_ANNOTATION

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"kubectl annotate node NODE {SIMULATE_GPU_ANNOTATION}=missing" in readme
    assert f"label a node {SIMULATE_GPU_ANNOTATION}" not in readme.lower()
