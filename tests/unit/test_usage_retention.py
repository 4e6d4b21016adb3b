"""Usage store retention: finished lifetimes older than the retention are pruned (DELETE in batches), the
rest read back unchanged; the collector refuses a retention it cannot read or under a day."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.services.usage.__main__ import main, retention_of
from jupyterhub_gpu.services.usage.accounting import Lifetime
from jupyterhub_gpu.services.usage.store import UsageStore

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


def lifetime(uid, ended_days_ago):
    end = NOW - timedelta(days=ended_days_ago)
    return Lifetime(uid, "server", "jhub", f"jupyter-{uid}", "alice", "", "h100-full", "", 1, 6.98,
                    end - timedelta(hours=2), end)


def test_prune_drops_only_what_ended_before_the_cutoff(tmp_path):
    store = UsageStore(tmp_path)
    store.append_finished([lifetime("old", 500), lifetime("edge", 90), lifetime("new", 1)])
    store.save_open({"run": lifetime("run", 0)}, NOW)
    assert store.prune(NOW - timedelta(days=90)) == 1  # "old"; "edge" ended exactly at the cutoff
    assert sorted(lt.uid for lt in store.finished()) == ["edge", "new"] and set(store.load_open()[0]) == {"run"}
    assert store.prune(NOW - timedelta(days=90)) == 0  # nothing left to drop
    assert UsageStore(tmp_path / "empty").prune(NOW) == 0
    store.append_finished([lifetime("after", 0)])  # appends go on after a prune
    assert sorted(lt.uid for lt in UsageStore(tmp_path).finished()) == ["after", "edge", "new"]


def test_retention_must_be_a_day_or_more():
    assert retention_of("400d") == timedelta(days=400) and retention_of("36h") == timedelta(hours=36)
    for bad in ("1h", "", "soon", "-5d", "9" * 40):
        assert retention_of(bad) is None
    with pytest.raises(SystemExit) as e:
        main(["--profiles-file=x", "--store=y", "--retention=1h"])
    assert e.value.code == 2
