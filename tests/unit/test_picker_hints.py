"""Right-sizing hints on the picker's cards (hub/usage_hints.py): the user's own hint per profile from the
store's lifetimes and DCGM use, never another user's, none on thin data; read once per ttl off the event loop,
nothing on a failed read; shown escaped in the card's description, not in the radio's name."""
from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone

from jinja2 import Environment, FileSystemLoader
from test_picker_markup import TEMPLATES, Walk  # same folder (rootdir-less test modules)

from jupyterhub_gpu.hub import picker
from jupyterhub_gpu.hub.usage_hints import PickerHints, StoreAndPrometheus, picker_hints
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage.store import UsageStore

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)
UNTIL = T0 + timedelta(days=7)
CFG = load_profiles(EXAMPLE_PROFILES)
RULES, _ = acc.rules_and_teams(CFG)


def sessions(user, profile, n, peak_mib, busy):
    """`n` two-hour servers of `user`, each `busy` (0..1) of its time at work, peaking at `peak_mib`."""
    lts, used = [], {}
    for i in range(n):
        start = T0 + timedelta(hours=3 * i)
        lt = acc.Lifetime(f"{user}-{profile}-{i}", "server", "jhub", f"jupyter-{user}-{i}", user, "", profile, "",
                          RULES[profile].gpus, RULES[profile].hourly_cost, start, start + timedelta(hours=2))
        lts.append(lt)
        used[("jhub", lt.pod)] = acc.PodUse(2.0 * lt.gpus * busy, peak_mib)
    return lts, used


def test_the_users_own_hint_per_profile():
    lts, used = sessions("alice", "h100-full", 4, 7 * 1024, 0.10)
    got = picker_hints(lts, used, CFG, "alice", T0, UNTIL)
    assert got == {"h100-full": "Your last 4 sessions here peaked at 7 GB, 10 % — "
                                f"“{CFG.profile('a100-mig-1g10gb').display_name}” would do, $6.46/h cheaper"}


def test_another_users_rows_are_never_used():
    # bob's four oversized sessions would make a hint; alice has two (too few), and bob's never add to hers
    bob, used_bob = sessions("bob", "h100-full", 4, 7 * 1024, 0.10)
    alice, used_alice = sessions("alice", "h100-full", 2, 7 * 1024, 0.10)
    lts, used = bob + alice, {**used_bob, **used_alice}
    assert picker_hints(lts, used, CFG, "alice", T0, UNTIL) == {}
    assert list(picker_hints(lts, used, CFG, "bob", T0, UNTIL)) == ["h100-full"]
    assert picker_hints(lts, used, CFG, "carol", T0, UNTIL) == {}


def test_thin_data_well_sized_or_unreachable_suggestion_gives_none():
    lts, used = sessions("alice", "h100-full", 4, 7 * 1024, 0.10)
    assert picker_hints(lts, {}, CFG, "alice", T0, UNTIL) == {}  # no DCGM samples
    no_mem = {k: acc.PodUse(u.used_hours, None) for k, u in used.items()}
    assert picker_hints(lts, no_mem, CFG, "alice", T0, UNTIL) == {}
    fit, used_fit = sessions("alice", "h100-full", 4, 70 * 1024, 0.8)  # needs the H100
    assert picker_hints(fit, used_fit, CFG, "alice", T0, UNTIL) == {}
    # the cheaper profile is not on this user's picker: no hint naming it
    assert picker_hints(lts, used, CFG, "alice", T0, UNTIL, allowed={"h100-full"}) == {}


class Reads:
    """A hints source: the store's rows of the asked user (`asked`), Prometheus' answer (`calls` reads)."""

    def __init__(self, rows=(), used=None, error=None):
        self.rows, self.answer, self.error = list(rows), used or {}, error
        self.calls, self.threads, self.asked = 0, [], []

    def lifetimes(self, user, since, until):
        self.asked.append(user)
        self.threads.append(threading.current_thread())
        assert until - since == timedelta(days=30)
        return [lt for lt in self.rows if lt.user == user]

    def used(self, since, until):
        self.calls += 1
        self.threads.append(threading.current_thread())
        assert until - since == timedelta(days=30)
        if self.error:
            raise self.error
        return self.answer


def test_one_read_per_ttl_off_the_event_loop_cached_per_user():
    lts, used = sessions("alice", "h100-full", 4, 7 * 1024, 0.10)
    read, clock = Reads(lts, used), [0.0]
    shared = PickerHints(lambda: CFG, read, ttl=300, size=2, clock=lambda: clock[0], now=lambda: UNTIL)

    async def go():
        loop_thread = threading.current_thread()
        first = await asyncio.gather(*(shared.for_user(u) for u in ("alice", "alice", "bob")))
        assert read.calls == 1 and loop_thread not in read.threads and read.asked == ["alice", "bob"]
        assert first[0] == first[1] and "h100-full" in first[0] and first[2] == {}
        await shared.for_user("carol")  # a third user: the cache keeps at most two
        assert len(shared.users) == 2 and read.calls == 1
        clock[0] = 301.0
        assert "h100-full" in await shared.for_user("alice")
        assert read.calls == 2

    asyncio.run(go())


def test_a_failed_read_means_no_hints_and_is_not_retried_per_render():
    lts, _ = sessions("alice", "h100-full", 4, 7 * 1024, 0.10)
    bob, _ = sessions("bob", "h100-full", 4, 7 * 1024, 0.10)
    read, clock = Reads(lts + bob, error=OSError("unreadable")), [0.0]
    shared = PickerHints(lambda: CFG, read, ttl=300, clock=lambda: clock[0], now=lambda: UNTIL)

    async def go():
        assert await shared.for_user("alice") == {}
        assert await shared.for_user("bob") == {}
        assert read.calls == 1

    asyncio.run(go())


def test_the_hubs_source_with_no_store_reads_nothing_and_creates_nothing(tmp_path):
    missing = tmp_path / "gpuhub-usage"
    source = StoreAndPrometheus(str(missing), "http://127.0.0.1:9", 30.0)  # nothing listens there
    shared = PickerHints(lambda: CFG, source, now=lambda: UNTIL)
    assert source.lifetimes("alice", T0, UNTIL) == [] and not missing.exists()
    UsageStore(missing)  # an empty store: no lifetimes, so Prometheus is not asked either
    assert asyncio.run(shared.for_user("alice")) == {} and "all" not in shared.snapshot


def test_a_render_reads_only_the_users_own_rows_never_the_whole_store(tmp_path):
    lts, used = sessions("alice", "h100-full", 4, 7 * 1024, 0.10)
    others = [lt for u in range(200) for lt in sessions(f"user{u}", "t4-shared", 3, 1024, 0.5)[0]]
    UsageStore(tmp_path).append_finished(lts + others)
    source = StoreAndPrometheus(str(tmp_path), "http://127.0.0.1:9", 30.0)
    source.used = lambda since, until: used  # Prometheus' answer
    rows, real = [], source.reader.finished
    source.reader.finished = lambda *a: rows.append((threading.current_thread(), real(*a))) or rows[-1][1]
    shared = PickerHints(lambda: CFG, source, ttl=300, now=lambda: UNTIL)

    async def go():
        loop_thread = threading.current_thread()
        got = [await shared.for_user(u) for u in ("alice", *(f"user{u}" for u in range(50)))]
        assert "h100-full" in got[0] and not any(got[1:])
        # one range query per render, in a thread, of that user's rows only (4 of alice's, 3 of each other's)
        assert [len(r) for _, r in rows] == [4] + [3] * 50 and loop_thread not in {t for t, _ in rows}
        assert all({lt.user for lt in r} == {u} for (_, r), u in zip(rows, ["alice", *(f"user{u}" for u in range(50))]))

    asyncio.run(go())


def test_the_card_describes_the_hint_escaped_and_the_radio_name_stays_short():
    hint = "Your last 4 sessions here peaked at 7 GB, 12 % — “<b>A100</b> & co” would do, $6.46/h cheaper"
    entries = [picker.profile_entry(CFG, p, i == 0, None, hint=hint if p.slug == "h100-full" else None)
               for i, p in enumerate(CFG.profiles)]
    page = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True).get_template(
        "form.html").render(profile_list=entries, user_options={})
    assert "<b>A100</b>" not in page and "“&lt;b&gt;A100&lt;/b&gt; &amp; co”" in page
    assert page.count('class="gpuhub-hint"') == 1
    start = page.index('id="profile-about-h100-full"')
    about = page[start:page.index("</div>", start)]
    assert 'id="profile-hint-h100-full"' in about and "peaked at 7 GB" in about  # part of the description
    walk = Walk()
    walk.feed(page)
    assert walk.problems == []
    radio = next(r for r in walk.radios if r["id"] == "profile-item-h100-full")
    assert "peaked" not in radio["aria-label"] and "peaked" not in walk.labels[radio["id"]]
    assert radio["aria-describedby"] == "profile-about-h100-full"


async def test_the_spawners_picker_shows_the_logged_in_users_hint(monkeypatch):
    """Through KubeSpawner's own form render: alice's card has her hint, bob's picker has none."""
    from jupyterhub_gpu.hub.render_pod import make_spawner
    from jupyterhub_gpu.hub.spawner import GPUSpawner

    lts, used = sessions("alice", "h100-full", 4, 7 * 1024, 0.10)
    read = Reads(lts, used)
    monkeypatch.setenv("GPUHUB_USAGE_PROMETHEUS_URL", "http://prometheus.invalid:9090")
    monkeypatch.setattr(GPUSpawner, "_usage_hints", PickerHints(lambda: CFG, read, now=lambda: UNTIL))
    pages = {}
    for user in ("alice", "bob"):
        sp = make_spawner(EXAMPLE_PROFILES, user, ["ml-research"])
        try:
            pages[user] = await sp._render_options_form_dynamically(sp)
        finally:
            await sp.api.api_client.close()
    card = pages["alice"][pages["alice"].index('data-profile="h100-full"'):]
    card = card[:card.index('class="gpuhub-card"')]
    assert 'id="profile-hint-h100-full"' in card and "Your last 4 sessions here peaked at 7 GB, 10 %" in card
    assert pages["alice"].count('class="gpuhub-hint"') == 1
    assert 'class="gpuhub-hint"' not in pages["bob"] and read.calls == 1


