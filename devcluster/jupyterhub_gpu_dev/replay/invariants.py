"""What must hold at the end of a day replay, faulted or not: every session served (or its reason), every job
finished exactly once (one Job, one Workload, one output notebook each), a job that lost its pod resumed from
its checkpoint, the showback store holding every ended lifetime. Read from the cluster, the home share and
the usage store, as an auditor would; `gather` reports, it does not raise (the bench decides)."""
from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import requests

from jupyterhub_gpu.contract import KUEUE_GROUP, KUEUE_VERSION
from jupyterhub_gpu_dev.devhub import NAMESPACE

from . import notified
from .trace import HOUR

#: Answers a person retries: the hub or gpu-jobs away, busy, or an answer lost.
TRANSIENT = (429, 502, 503, 504)
#: Wall seconds a lifetime may take to reach the store after its pod ended (the collector's cycle and more).
STORE_LAG_S = 90.0


def transient(r: Any) -> bool:
    """An answer a person retries: none, one of TRANSIENT, or a 404 page from the hub instead of gpu-jobs' JSON
    (a proxy started again with the hub has no route to the service until the hub adds it back)."""
    if isinstance(r, requests.RequestException):
        return True
    code = getattr(r, "status_code", None)
    html = "text/html" in (getattr(r, "headers", None) or {}).get("Content-Type", "")
    return code in TRANSIENT or (code == 404 and html)


def heard(counts: dict[str, int], what: str, r: Any) -> None:
    """Count what a person was told instead of a success, in its own words (code and message, bounded)."""
    if isinstance(r, requests.RequestException):
        words = f"no answer ({type(r).__name__})"
    else:
        try:
            message = r.json().get("message") or ""
        except ValueError:
            message = r.text
        if r.status_code == 404 and transient(r):
            message = "the hub's page (no route to the service yet)"
        words = f"{r.status_code} {' '.join(str(message).split())[:100]}".strip()
    key = f"{what}: {words}"
    counts[key] = counts.get(key, 0) + 1


def contradictions(jobs: list[dict[str, Any]], now_shown: dict[str, str | None]) -> list[str]:
    """A job the replay saw finish, shown otherwise at the end, was told wrong once (pure): during a fault a
    status may be "unknown" or an error, never a wrong end."""
    return [f"{rec['name']}: {rec['state']} during the replay, {now_shown.get(rec['name'])} at the end"
            for rec in jobs if rec.get("name") and rec.get("state") in ("Succeeded", "Failed")
            and now_shown.get(rec["name"]) != rec["state"]]


#: Wall seconds after a fault's recovery that a server's start may still take (the plain replay's start waits
#: reach ~35 s at their p90): a period that ended before then could not be served for the fault's sake.
SHADOW_AFTER_S = 30.0


def shadows(fault_results: list[dict[str, Any]], speed: float) -> list[tuple[str, float, float]]:
    """Each fault's outage in trace seconds: (what, from, to). The replay compresses the trace, not an outage:
    at x120 a hub that is back in 35 s was away 70 trace minutes, and a period inside that is not served
    for the fault's sake, which the check must tell apart from a session lost for no reason (pure)."""
    from .faults import RECOVERY_TIMEOUT_S

    out = []
    for f in fault_results:
        if f.get("error"):  # not applied: no outage to excuse anything
            continue
        wall = (f.get("recovered_after_s") if f.get("recovered_after_s") is not None else RECOVERY_TIMEOUT_S) \
            + (f.get("paused_s") or 0.0) + SHADOW_AFTER_S
        out.append((f["what"], float(f["at"]), float(f["at"]) + wall * speed))
    return out


def _merged(shade: list[tuple[str, float, float]]) -> list[tuple[list[str], float, float]]:
    """Outages that overlap joined into one: (their faults, from, to)."""
    out: list[tuple[list[str], float, float]] = []
    for what, a, b in sorted(shade, key=lambda x: x[1]):
        if out and a <= out[-1][2]:
            names, a0, b0 = out[-1]
            out[-1] = (names + [what], a0, max(b0, b))
        else:
            out.append(([what], a, b))
    return out


def in_shadows(periods: list[tuple[float, float]], shade: list[tuple[str, float, float]]) -> dict[str, Any]:
    """The unserved periods (hours), the faults whose outage held one from its start to its end, and those no
    outage holds whole (a period that outlasted the outage should have been served after it) (pure)."""
    merged = _merged(shade)

    def held(a: float, b: float) -> list[str]:
        return next((names for names, s0, s1 in merged if s0 <= a and b <= s1), [])

    return {"periods_h": [[round(a / HOUR, 2), round(b / HOUR, 2)] for a, b in periods],
            "in_the_outage_of": sorted({w for a, b in periods for w in held(a, b)}),
            "unexplained_h": [[round(a / HOUR, 2), round(b / HOUR, 2)] for a, b in periods if not held(a, b)]}


def unexplained(inv: dict[str, Any]) -> list[dict[str, Any]]:
    """The sessions not served for no fault's outage (all of them in a replay without faults)."""
    return [e for e in inv.get("sessions_not_served") or [] if e.get("unexplained_h", True)]


def record_pods(seen: dict[str, dict], alive: list[dict], wall: float) -> None:
    """Keep every pod uid the replay saw bound, with when it was last seen (its end, once gone)."""
    now_alive = set()
    for p in alive:
        uid, node = p["metadata"].get("uid"), p["spec"].get("nodeName")
        if not uid or not node:
            continue
        now_alive.add(uid)
        rec = seen.setdefault(uid, {"namespace": p["metadata"]["namespace"], "pod": p["metadata"]["name"],
                                    "gone": None, "started": False})
        rec["gone"] = None
        # a kubelet's acknowledgement (status.startTime): before it the pod held no device and has no lifetime
        rec["started"] = rec.get("started") or bool((p.get("status") or {}).get("startTime"))
    for uid, rec in seen.items():
        if uid not in now_alive and rec["gone"] is None:
            rec["gone"] = wall


def node_recovered(lost_node: str, jobs: set[str], users: set[str], st: Any, trace: Any, now: float) -> bool:
    """After a GPU node is lost: each job that ran there runs again (a pod bound to another node) or has ended,
    and each user whose server ran there has a ready server again or no longer needs one (session over)."""
    bound = {p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") for p in st.pods
             if p["spec"].get("nodeName") not in (None, lost_node)}
    if any(p["spec"].get("nodeName") == lost_node for p in st.pods):
        return False  # the loop has not listed the pods since the node went
    for rec in list(st.jobs.values()):
        if rec.get("name") in jobs and rec.get("state") not in ("Succeeded", "Failed") and rec["name"] not in bound:
            return False
    for user in users:
        open_session = any(s.user == user and s.start <= now < s.end for s in trace.sessions)
        if open_session and not (st.servers.get(user) or {}).get("ready"):
            return False
    return True


def _output_notebooks(share: Path, user: str, job: str) -> list[str]:
    folder = share / user / "gpu-jobs" / job
    if not folder.is_dir():
        return []
    return sorted(f.name for f in folder.glob("*.ipynb")
                  if not f.name.endswith(".input.ipynb") and ".attempt-" not in f.name)


def _resumed_at(path: Path) -> int | None:
    """Where the output notebook's run began (the replay's job prints `resumed at N`)."""
    found = re.findall(r"resumed at (\d+)", path.read_text(errors="replace")) if path.is_file() else []
    return int(found[-1]) if found else None


def checkpoint_step(share: Path, user: str, job: str) -> int:
    """The step the replay's job has checkpointed (its CHECKPOINT_DIR/step in the user's home), 0 before any."""
    try:
        return int((share / user / "gpu-jobs" / job / "checkpoint" / "step").read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def stored_uids(store: Path) -> set[str] | None:
    if not store.is_file():
        return None
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return {row[0] for row in db.execute("SELECT uid FROM finished")}
    finally:
        db.close()


def gather(replay: Any, served: list[bool]) -> dict[str, Any]:
    """The invariants of the replay that just ended (its cluster and hub still up)."""
    st, trace, kube = replay.st, replay.trace, replay.stack.kube
    out: dict[str, Any] = {}
    unserved = {i: [(a, b) for k, (a, b, _) in enumerate(s.active) if not st.served.get((i, k))] or [(s.start, s.end)]
                for i, (s, ok) in enumerate(zip(trace.sessions, served)) if not ok}
    shade = shadows(replay.fault_runner.results if replay.fault_runner else [], replay.speed)
    out["sessions_not_served"] = [
        {"session": i, "user": trace.sessions[i].user,
         "why": ("its server never became ready" if i not in st.session_ever_ready
                 else "a period began while it had no ready server"), **in_shadows(periods, shade)}
        for i, periods in unserved.items()]
    names = {rec["name"] for rec in st.jobs.values() if rec.get("name")}
    out["jobs_with_more_than_one_name"] = sorted(j for j, rec in st.jobs.items() if len(rec.get("names", ())) > 1)
    out["submit_tries"] = sum(rec.get("tries", 1) for rec in st.jobs.values())
    out["jobs_refused"] = {str(j): rec["refused"] for j, rec in st.jobs.items() if rec.get("refused")}
    namespaces = sorted({t.namespace for t in replay.cfg.teams.values()})
    try:
        made = [j for ns in namespaces for j in kube.list("batch/v1", "Job", ns)]
        workloads = [w for ns in namespaces for w in kube.list(f"{KUEUE_GROUP}/{KUEUE_VERSION}", "Workload", ns)]
    except Exception as e:  # noqa: BLE001 (reported)
        out["cluster_read_error"] = repr(e)[:200]
        made, workloads = [], []
    job_names = [j["metadata"]["name"] for j in made]
    out["jobs_made"] = len(job_names)
    out["jobs_not_asked_for"] = sorted(set(job_names) - names)  # a second job from a retry would be here
    owners: dict[str, int] = {}
    for w in workloads:
        for ref in w["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "Job":
                owners[ref["name"]] = owners.get(ref["name"], 0) + 1
    out["jobs_with_workloads_other_than_one"] = sorted(n for n in names if owners.get(n, 0) != 1
                                                       and n in job_names)
    share = replay.stack.hub.share if replay.stack.hub else None
    outputs_missing, outputs_doubled, resumed, not_resumed = [], [], [], []
    for j, rec in st.jobs.items():
        if rec.get("state") != "Succeeded" or share is None:
            continue
        user = trace.jobs[j].user
        found = _output_notebooks(share, user, rec["name"])
        if not found:
            outputs_missing.append(rec["name"])
        elif len(found) > 1:
            outputs_doubled.append(rec["name"])
        at = _resumed_at(share / user / "gpu-jobs" / rec["name"] / found[0]) if found else None
        if rec["name"] in st.lost:  # its node was deleted under it: the rerun must start where the checkpoint was
            (resumed if (at or 0) >= st.lost[rec["name"]] else not_resumed).append(
                {"job": rec["name"], "checkpoint_at_loss": st.lost[rec["name"]], "resumed_at": at})
        elif rec.get("preempted"):
            (resumed if at else out.setdefault("preempted_restarted_at_step_0", [])).append(
                {"job": rec["name"], "resumed_at": at})
    out.update(outputs_missing=outputs_missing, outputs_more_than_one=outputs_doubled,
               resumed_from_checkpoint=resumed, lost_checkpointed_work=not_resumed)
    store = stored_uids(replay.stack.root / "hub" / "gpuhub-usage" / "usage.sqlite")
    gone = {uid: rec for uid, rec in st.seen.items()
            if rec["gone"] is not None and time.monotonic() - rec["gone"] > STORE_LAG_S}
    ended = {uid: rec for uid, rec in gone.items() if rec.get("started")}
    out["lifetimes_ended"] = len(ended)
    out["bound_never_started"] = sorted(f"{r['namespace']}/{r['pod']}" for u, r in gone.items() if u not in ended
                                        and u not in (store or ()))
    out["lifetimes_missing_from_store"] = (None if store is None else
                                           sorted(f"{r['namespace']}/{r['pod']}" for u, r in ended.items()
                                                  if u not in store))
    out["servers_in_hub_namespace"] = sum(1 for r in st.seen.values() if r["namespace"] == NAMESPACE)
    records = replay.job_records()
    out["wrong_answers"] = contradictions(records, {rec["name"]: _shown(replay, rec) for rec in records
                                                    if rec.get("name")})
    sink = replay.stack.webhooks
    out["notifications"] = notified.check(records, sink.received if sink else [])
    out["queued_at_hub_restart"] = kept_places(replay.fault_runner.results if replay.fault_runner else [], st.seen)
    return out


def _shown(replay: Any, rec: dict[str, Any]) -> str | None:
    """The job's state as gpu-jobs shows its owner now (None: no answer)."""
    try:
        r = requests.get(f"{replay.stack.hub_url}/services/gpu-jobs/jobs/{rec['name']}", timeout=30,
                         headers={"Authorization": f"token {replay.user_token(rec['user'])}"})
        return r.json().get("state") if r.ok else f"HTTP {r.status_code}"
    except (requests.RequestException, ValueError):
        return None


def kept_places(fault_results: list[dict[str, Any]], seen: dict[str, dict]) -> list[dict[str, Any]]:
    """Each server queued when the hub was killed: did the pod that waited then (its uid) get its node, i.e.
    keep its place, or did another pod of the same name start instead (the queue's back)? (pure)"""
    out = []
    for f in fault_results:
        for pod, uid in (f.get("queued_servers") or {}).items():
            later = [u for u, rec in seen.items() if rec["pod"] == pod and rec["namespace"] == NAMESPACE]
            out.append({"pod": pod, "kept": uid in seen,
                        "replaced": bool(later) and uid not in seen})
    return out


def violations(inv: dict[str, Any]) -> list[str]:
    """What did not hold, in words (pure)."""
    out = []
    if lost := unexplained(inv):
        out.append(f"sessions not served (outside any fault's outage): {lost}")
    for key, words in (("jobs_with_more_than_one_name",
                       "jobs answered under two names"), ("jobs_not_asked_for", "Jobs nobody asked for (a retry's "
                       "second job)"), ("jobs_with_workloads_other_than_one", "Jobs without exactly one Workload"),
                       ("outputs_missing", "finished jobs without an output notebook"),
                       ("outputs_more_than_one", "jobs with more than one output notebook"),
                       ("lost_checkpointed_work", "jobs whose rerun began before their checkpoint"),
                       ("jobs_refused", "jobs refused at submit (trace index: answer)"),
                       ("lifetimes_missing_from_store", "ended lifetimes missing from the showback store")):
        if inv.get(key):
            out.append(f"{words}: {inv[key]}")
    notes = inv.get("notifications") or {}
    if notes.get("missing"):
        out.append(f"notifications never sent: {notes['missing']}")
    if notes.get("twice"):
        out.append(f"notifications sent twice: {notes['twice']}")
    replaced = [q["pod"] for q in inv.get("queued_at_hub_restart") or [] if q["replaced"]]
    if replaced:
        out.append(f"queued servers that lost their place across the hub restart: {replaced}")
    if inv.get("wrong_answers"):
        out.append(f"jobs told wrong: {inv['wrong_answers']}")
    if inv.get("cluster_read_error"):
        out.append(f"the cluster could not be read at the end: {inv['cluster_read_error']}")
    return out


def compare(plain: dict[str, Any], faulted: dict[str, Any], faults: list[dict[str, Any]],
            node_hours_tolerance: float = 0.05) -> list[str]:
    """The faulted replay against the plain one of the same trace: the same work done, node-hours within the
    tolerance, every fault applied and recovered from (pure)."""
    out = []
    shadowed = len((faulted.get("invariants") or {}).get("sessions_not_served") or []) \
        - len(unexplained(faulted.get("invariants") or {}))
    if (faulted.get("sessions_served") or 0) + shadowed != plain.get("sessions_served"):
        out.append(f"faulted sessions_served {faulted.get('sessions_served')} (+{shadowed} lost to outages) != "
                   f"{plain.get('sessions_served')} unfaulted")
    if faulted.get("jobs_finished") != plain.get("jobs_finished"):
        out.append(f"faulted jobs_finished {faulted.get('jobs_finished')} != {plain.get('jobs_finished')} unfaulted")
    a, b = plain.get("gpu_node_hours") or 0.0, faulted.get("gpu_node_hours") or 0.0
    if a and abs(b - a) / a > node_hours_tolerance:
        out.append(f"faulted GPU node-hours {b} not within {node_hours_tolerance:.0%} of {a} unfaulted")
    for f in faults:
        if f.get("error"):
            out.append(f"fault {f['what']} at {f['at_h']} h: {f['error']}")
        elif f.get("recovered_after_s") is None:
            out.append(f"fault {f['what']} at {f['at_h']} h: not healthy again")
    return out
