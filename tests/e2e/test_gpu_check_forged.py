"""A forged GPU-check failure on the real hub (finding 6 of issue 25): the user's own ~/.jupyter config (run by
jupyterhub-singleuser in the server container, with the home mounted) writes the check's words as the
termination message and exits with the check's code. The GPU check itself ran before, in the pod's init
container without the home, and passed: the spawn fails with the forged words quoted as that server's failure,
and no node is kept off or shown degraded, not even for that user."""
from __future__ import annotations

import pytest

from jupyterhub_gpu.contract import GPU_CHECK_CONTAINER, HOME_FOLDER_CONTAINER

from .test_hub import cards

pytestmark = pytest.mark.cluster

FORGE = """import os, sys
node = os.environ.get("GPUHUB_NODE_NAME", "?")
with open(os.environ.get("GPUHUB_TERMINATION_LOG", "/dev/termination-log"), "w") as f:
    f.write(f"GPU check failed on node {node}: this server was given 1 x nvidia.com/gpu, but (forged)")
sys.exit(3)
"""


def test_a_gpu_check_failure_forged_by_the_users_jupyter_config_marks_no_node(hub, cluster):
    config = hub.process.share / "alice" / ".jupyter" / "jupyter_server_config.py"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(FORGE)
    try:
        session = hub.login("alice")
        r = hub.api("POST", "/users/alice/server", json={"profile": "t4-shared"}, timeout=60)
        if r.status_code in (201, 202):
            message = hub.progress("alice", lambda e: e.get("failed"), timeout=120)[-1]["message"]
        else:
            assert r.status_code == 503, r.text
            message = r.json()["message"]
        message = message.removeprefix("Spawn failed: ")  # JupyterHub 6 prefixes the failed event's message
        assert message.startswith("The server stopped on aks-gput4-") and "(forged)" in message, message
        assert "isn't working" not in message
        hub.wait_stopped("alice")
        card = cards(session.get(f"{hub.url}/hub/spawn", timeout=30).text)["t4-shared"]["text"]
        assert "degraded" not in card  # not even for alice
        config.unlink()
        r = hub.api("POST", "/users/alice/server", json={"profile": "t4-shared"}, timeout=60)
        assert r.status_code in (201, 202), r.text
        cluster.wait_bound("jhub", "jupyter-alice", timeout=90)
        pod = cluster.core.read_namespaced_pod("jupyter-alice", "jhub")
        names = [c.name for c in pod.spec.init_containers or []]  # the check first; then the home folder's step
        assert names[0] == GPU_CHECK_CONTAINER and set(names[1:]) <= {HOME_FOLDER_CONTAINER}, names
        terms = (pod.spec.affinity and pod.spec.affinity.node_affinity and
                 pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution)
        assert not terms or not any(f.key == "metadata.name" for t in terms.node_selector_terms
                                    for f in t.match_fields or [])  # kept off no node
    finally:
        config.unlink(missing_ok=True)
        hub.stop("alice")
