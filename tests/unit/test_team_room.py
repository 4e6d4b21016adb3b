"""Team quota in the picker (issue 28 item 9): what a team can still take of its Kueue quota on a pool
(model/team_room.py, like Kueue's scheduler for a flat cohort), and the card's words for it: the team, not the
pool, is the limit when its quota is used up; an unread quota is "unknown", never a number."""
from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.hub import picker
from jupyterhub_gpu.hub.capacity import ProfileCapacity
from jupyterhub_gpu.hub.capacity_text import STARTS_NOW, team_line, team_outlook
from jupyterhub_gpu.hub.team_quota import TeamView
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.model.team_room import Quota, queue_facts, room, team_room

CFG = load_profiles(EXAMPLE_PROFILES)
GPU = "nvidia.com/gpu"


def live(name: str, used: dict[tuple[str, str], int | str] | None = None, active: bool = True,
         pending: int = 0) -> dict:
    """The example file's ClusterQueue of team `name` as Kueue shows it live: every covered resource of every
    flavor in its status (zero unless `used` says otherwise)."""
    cq = copy.deepcopy(next(o for o in render_kueue(CFG) if o["kind"] == "ClusterQueue"
                            and o["metadata"]["name"] == f"team-{name}"))
    flavors = [{"name": f["name"], "resources": [{"name": r["name"], "borrowed": 0,
                                                  "total": (used or {}).get((f["name"], r["name"]), 0)}
                                                 for r in f["resources"]]}
               for f in cq["spec"]["resourceGroups"][0]["flavors"]]
    cq["status"] = {"flavorsReservation": flavors, "flavorsUsage": flavors, "pendingWorkloads": pending,
                    "conditions": [{"type": "Active", "status": "True" if active else "False"}]}
    return cq


def queues(**used) -> dict:
    """Both teams' live queues; `used`: team → {(flavor, resource): in use}."""
    return {f"team-{t}": queue_facts(live(t, used.get(t.replace("-", "_")))) for t in CFG.teams}


# ------------------------------------------------------------------------------ the arithmetic
def test_a_team_with_room_in_its_quota_and_a_cohort_to_borrow_from():
    r = team_room(queues(data_science={("gput4", GPU): 5}), "team-data-science", "gput4", GPU)
    assert (r.nominal, r.used, r.own_free, r.borrowing_limit) == (8, 5, 3, 4)
    # ml-research has no T4 quota of its own, so the cohort lends only data-science's own: nothing to borrow
    assert r.now == 3 and r.borrow_now == 0 and r.ceiling == 7


def test_borrowing_is_what_the_cohort_has_unused_capped_by_the_limit():
    # MIG slices: data-science 14, ml-research 7 (borrowing limits 4 and 7)
    mig = "nvidia.com/mig-1g.10gb"
    r = team_room(queues(data_science={("gpumig", mig): 14}), "team-data-science", "gpumig", mig)
    assert (r.own_free, r.now, r.borrow_now) == (0, 4, 4)  # 7 unused in the cohort, the limit says 4
    r = team_room(queues(data_science={("gpumig", mig): 14}, ml_research={("gpumig", mig): 5}),
                  "team-data-science", "gpumig", mig)
    assert (r.own_free, r.now, r.borrow_now) == (0, 2, 2)  # only 2 left unused in the cohort
    r = team_room(queues(data_science={("gpumig", mig): 18}), "team-data-science", "gpumig", mig)
    assert (r.now, r.ceiling, r.may_borrow) == (0, 0, 0)  # 14 + 4 borrowed: the limit is reached


def test_own_quota_lent_to_another_team_is_not_free_now():
    mig = "nvidia.com/mig-1g.10gb"
    r = team_room(queues(data_science={("gpumig", mig): 10}, ml_research={("gpumig", mig): 11}),
                  "team-ml-research", "gpumig", mig)
    assert r.used > r.nominal and r.now == 0 and r.own_free == 0
    r = team_room(queues(data_science={("gpumig", mig): 3}, ml_research={("gpumig", mig): 7 + 7}),
                  "team-data-science", "gpumig", mig)  # ml-research borrows 7 of data-science's 11 unused
    assert r.own_free == 11 and r.now == 4 and r.lent


def test_unknown_stays_unknown():
    assert team_room({}, "team-data-science", "gput4", GPU) is None  # not read yet
    inactive = {"team-data-science": queue_facts(live("data-science", active=False))}
    assert team_room(inactive, "team-data-science", "gput4", GPU) is None  # Kueue says the queue is not active
    no_status = live("data-science")
    del no_status["status"]
    assert team_room({"team-data-science": queue_facts(no_status)}, "team-data-science", "gput4", GPU) is None
    assert team_room(queues(), "team-data-science", "nowhere", GPU) is None  # not a flavor of the queue
    # a cohort member not readable: the team's own numbers, but not what the cohort has to lend
    qs = {**queues(), "team-ml-research": queue_facts(live("ml-research", active=False))}
    r = team_room(qs, "team-data-science", "gput4", GPU)
    assert r.own_free == 8 and r.now is None and r.ceiling == 12
    garbled = live("data-science", {("gput4", GPU): "lots"})
    assert team_room({"team-data-science": queue_facts(garbled)}, "team-data-science", "gput4", GPU) is None


def test_quantities_and_pending_are_read_as_kueue_writes_them():
    facts = queue_facts(live("data-science", {("gput4", GPU): "3"}, pending=2))
    assert facts.cohort == "gpu" and facts.pending == 2 and facts.known
    assert facts.quotas["gput4", GPU] == Quota(8, 3, 4, None)
    assert facts.quotas["gput4", "cpu"].nominal == 7  # 7720m floored: quota is never overstated


quota = st.builds(Quota, st.integers(0, 64), st.integers(0, 96), st.none() | st.integers(0, 64),
                  st.none() | st.integers(0, 64))


@given(quota, st.booleans(), st.none() | st.lists(quota, max_size=5))
def test_room_is_never_negative_nor_above_quota_plus_borrowing(team, in_cohort, others):
    members = None if others is None else [team, *others]
    r = room(team, in_cohort, members)
    assert 0 <= r.own_free <= team.nominal
    for n in (r.now, r.ceiling, r.borrow_now, r.may_borrow):
        assert n is None or n >= 0
    if r.now is not None and r.ceiling is not None:
        assert r.now <= r.ceiling
    if r.ceiling is not None:
        assert team.used + r.ceiling <= max(team.used, team.nominal + (team.borrowing_limit or 0))
    if not in_cohort:
        assert r.now == r.own_free and r.may_borrow == 0  # nothing to borrow outside a cohort
    elif members is None:
        assert r.now is None  # the cohort's use unknown: no number made up
    else:  # the cohort cannot lend more than it has unused (its members' nominal quota less their use)
        assert r.now <= r.own_free + max(0, sum(m.nominal for m in members) - sum(m.used for m in members))


@given(quota, st.lists(quota, max_size=4), st.integers(0, 20))
def test_more_use_elsewhere_in_the_cohort_never_gives_the_team_more(team, others, more):
    if not others:
        return
    busier = [Quota(others[0].nominal, others[0].used + more, others[0].borrowing_limit, others[0].lending_limit),
              *others[1:]]
    assert room(team, True, [team, *busier]).now <= room(team, True, [team, *others]).now


# ------------------------------------------------------------------------------ the words
NOUN = "T4 time-slices"


def test_the_team_line_says_its_room_and_borrowing():
    r = room(Quota(8, 5, 4), True, [Quota(8, 5, 4), Quota(6, 0)])
    assert team_line("data-science", r, NOUN) == \
        "your team (data-science): 3 of 8 T4 time-slices free in quota, +4 by borrowing"
    r = room(Quota(8, 8, 4), True, None)
    assert team_line("data-science", r, NOUN) == ("your team (data-science): 0 of 8 T4 time-slices free in quota, up "
                                                  "to 4 more by borrowing if the cohort has room")
    r = room(Quota(8, 12, 4), True, [Quota(8, 12, 4), Quota(6, 0)])
    assert team_line("ds", r, NOUN) == \
        "your team (ds): 12 T4 time-slices in use, 8 of quota + 4 borrowed, borrowing limit reached"
    assert team_line("ds", room(Quota(2, 1), False, None), NOUN) == \
        "your team (ds): 1 of 2 T4 time-slices free in quota"
    assert team_line("ds", None, NOUN) == "your team (ds): team quota unknown"
    lender = room(Quota(0, 0), True, [Quota(0, 0), Quota(3, 0)])
    assert team_line("ds", lender, NOUN) == "your team (ds): no T4 time-slices in quota of its own, +3 by borrowing"


def test_a_team_at_its_quota_is_the_limit_even_with_free_slots_in_the_pool():
    full = room(Quota(8, 8), False, None)
    outlook, limit = team_outlook(full, 1, STARTS_NOW, pending=2)
    assert limit and "starts right away" not in outlook
    assert outlook == ("waits for your team's quota (8 of 8 in use): starts when one of your team's servers or jobs "
                       "on this pool stops — 2 waiting in your team's queue")
    # room in the quota: the pool's words stand
    assert team_outlook(room(Quota(8, 7), False, None), 1, STARTS_NOW) == (STARTS_NOW, False)
    # a 2-GPU server on a quota with 1 left
    assert team_outlook(room(Quota(8, 7), False, None), 2, STARTS_NOW)[1]
    # borrowing makes the room: it starts, on quota another team may take back
    outlook, limit = team_outlook(room(Quota(8, 8, 4), True, [Quota(8, 8, 4), Quota(6, 0)]), 1, STARTS_NOW)
    assert not limit and outlook.startswith("starts right away on quota borrowed")
    # its own quota lent out: Kueue takes it back
    lent = room(Quota(8, 2), True, [Quota(8, 2), Quota(0, 6)])
    assert team_outlook(lent, 1, STARTS_NOW) == (
        "waits a moment while Kueue takes back your team's quota lent to other teams", True)


def test_unknown_quota_never_promises_a_start():
    assert team_outlook(None, 1, STARTS_NOW) == ("starts right away if your team's quota has room", False)
    assert team_outlook(None, 1, "you will wait until someone else's server stops")[0] == \
        "you will wait until someone else's server stops"
    outlook, limit = team_outlook(room(Quota(8, 8, 4), True, None), 1, STARTS_NOW)
    assert limit and "unless the cohort has room to lend" in outlook


# ------------------------------------------------------------------------------ the card
T4 = next(p for p in CFG.profiles if p.slug == "t4-shared")


def pool_with_room() -> ProfileCapacity:
    return ProfileCapacity("t4-shared", GPU, 16, 5, 5, 0, 4, True, "5 of 16 T4 time-slices free", STARTS_NOW)


def test_the_card_of_a_team_at_its_quota_says_the_team_is_the_limit():
    r = team_room(queues(data_science={("gput4", GPU): 8}), "team-data-science", "gput4", GPU)
    entry = picker.profile_entry(CFG, T4, True, pool_with_room(), ["data-science"],
                                 team=TeamView("data-science", r, 1))["gpuhub"]
    assert entry["capacity"] == "5 of 16 T4 time-slices free"  # the pool has room ...
    assert entry["team_limit"] and entry["outlook"].startswith("waits for your team's quota (8 of 8 in use)")
    assert entry["team"] == ("your team (data-science): 0 of 8 T4 time-slices free in quota, none to borrow "
                             "in the cohort now")


def test_the_card_without_a_team_view_is_unchanged():
    entry = picker.profile_entry(CFG, T4, True, pool_with_room(), ["data-science"])["gpuhub"]
    assert "team" not in entry and entry["outlook"] == STARTS_NOW
    unknown = picker.profile_entry(CFG, T4, True, pool_with_room(), ["data-science"],
                                   team=TeamView("data-science", None))["gpuhub"]
    assert unknown["team"].endswith("team quota unknown") and unknown["team_unknown"]
    assert unknown["outlook"] == "starts right away if your team's quota has room"


json_like = st.recursive(st.none() | st.booleans() | st.integers(-5, 10) | st.text(max_size=4) | st.sampled_from(
    ["8", "500m", "-1", "NaN", "Active", "True", "gput4", GPU]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["spec", "status", "resourceGroups", "flavors", "resources", "name", "nominalQuota", "borrowingLimit",
         "lendingLimit", "flavorsReservation", "flavorsUsage", "total", "conditions", "type", "status",
         "cohortName", "pendingWorkloads"]), inner, max_size=4), max_leaves=20)


@given(st.dictionaries(st.sampled_from(["spec", "status", "metadata"]), json_like, max_size=3))
def test_a_garbled_queue_is_unknown_never_an_error(obj):
    facts = queue_facts(obj)
    for q in facts.quotas.values():
        assert q.nominal >= 0 and q.used >= 0
    r = team_room({"q": facts}, "q", "gput4", GPU)
    assert r is None or (r.now is None or r.now >= 0)
