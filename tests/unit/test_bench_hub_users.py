"""bench/hub_users.py's plain hub gets the example profiles as a static profile_list (no cluster, no hub)."""
from bench.hub_users import groups, static_profile_list
from gpu_spawner.model.profiles_file import EXAMPLE_PROFILES, load_profiles


def test_static_profile_list_is_the_example_profiles():
    cfg = load_profiles(EXAMPLE_PROFILES)
    plain = static_profile_list()
    assert [p["slug"] for p in plain] == [p.slug for p in cfg.profiles]
    assert all(p["display_name"] and p["kubespawner_override"] == {} for p in plain)
    assert "data-science" in groups()
