"""bench/hub_users.py's pure parts (bench/hub_load.py): argument bounds, who spawns, the progress stream's
parser, the per-round statistics, and the plain hub's profile list (no cluster, no hub)."""
import argparse

import pytest

from bench.hub_load import (
    EventStream,
    check_args,
    p95,
    parse_sizes,
    plain_profile_list,
    profile_groups,
    spawning,
    spread,
    summarize,
)
from jupyterhub_gpu.builders import pods as podspec
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles


def args(**over):
    base = dict(rounds=2, cycles=1, polls=3, job_polls=3, concurrency=50, progress_share=0.1,
                spawn_concurrency=8, progress_window=20.0)
    return argparse.Namespace(**{**base, **over})


def test_sizes_are_distinct_and_bounded():
    assert parse_sizes("300,1000, 3000") == [300, 1000, 3000]
    for bad in ("", "0", "300,300", "10001", "a,b"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_sizes(bad)


@pytest.mark.parametrize("over", [dict(rounds=0), dict(concurrency=0), dict(concurrency=201),
                                  dict(progress_share=1.5), dict(progress_share=-0.1), dict(spawn_concurrency=0),
                                  dict(spawn_concurrency=51), dict(progress_window=0), dict(progress_window=121),
                                  dict(job_polls=-1)])
def test_unbounded_or_meaningless_loads_are_refused(over):
    check_args(args())
    with pytest.raises(argparse.ArgumentTypeError):
        check_args(args(**over))


def test_the_spawning_share_is_spread_over_the_users():
    names = [f"u{i}" for i in range(300)]
    chosen = spawning(names, 0.1)
    assert len(chosen) == 30 and "u9" in chosen and "u0" not in chosen and "u299" in chosen
    assert spawning(names, 0) == set() and spawning(names, 1.0) == set(names)


def test_event_stream_parses_jupyterhub_progress_across_chunks_and_keepalives():
    stream = EventStream()
    body = ('\n\ndata: {"progress": 0, "message": "Server requested"}\n\n'
            'data: {"progress": 100, "ready": true, "message": "Server ready at /user/a/"}\n\n').encode()
    got = []
    for i in range(0, len(body), 7):  # split anywhere, even inside a multi-byte character's neighbours
        got += stream.feed(body[i:i + 7])
    assert [e["progress"] for e in got] == [0, 100] and got[1]["ready"] is True
    assert stream.feed(b"data: not json\r\n\r\n") == [{"message": "not json"}]
    assert stream.feed("data: {\"message\": \"\u00e9\"}\n\n".encode()[:14]) == []  # incomplete: nothing yet


def test_p95_and_spread():
    assert p95([]) is None and p95(list(range(1, 101))) == 95
    assert spread([]) is None and spread([None]) is None
    assert spread([1.0, 3.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "values": [1.0, 3.0, 2.0]}


def test_the_ratio_is_taken_within_each_round_and_unpaired_rounds_are_left_out():
    def run(hub, rnd, cpu):
        return {"hub": hub, "users": 300, "round": rnd, "cpu_ms_per_user": cpu, "errors": 0}

    runs = [run("package", 1, 10), run("plain", 1, 20), run("plain", 2, 10), run("package", 2, 15),
            run("package", 3, 99)]  # round 3 stopped after one hub
    s = summarize(runs, [300])[300]
    assert s["rounds"] == 2
    assert s["ratio"]["values"] == [0.5, 1.5] and s["ratio"]["median"] == 1.0
    assert s["package_cpu_ms_per_user"]["values"] == [10, 15] and s["plain_spawn_page_p95_ms"] is None


def test_plain_profiles_are_the_same_profiles_with_gpuspawner_pod_settings():
    path = str(EXAMPLE_PROFILES)
    cfg = load_profiles(path)
    plain = plain_profile_list(path)
    assert [p["slug"] for p in plain] == [p.slug for p in cfg.profiles]
    assert [p["slug"] for p in plain if p.get("default")] == [p.slug for p in cfg.profiles if p.default]
    t4 = next(p for p in plain if p["slug"] == "t4-shared")["kubespawner_override"]
    assert t4["node_selector"] == podspec.node_selector(cfg, cfg.by_slug["t4-shared"]) and t4["tolerations"]
    assert all(isinstance(v, str) for p in plain for v in p["kubespawner_override"]["environment"].values())
    assert "data-science" in profile_groups(path)
