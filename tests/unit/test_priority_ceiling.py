"""Priority ceilings in the profiles file (pure): who may pick which priority on which profile, what a job
or server gets when nobody picks one, and the validation of the settings."""
from __future__ import annotations

import pytest
import yaml

from jupyterhub_gpu.builders.pods import spawner_overrides
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles_text


def example(**top) -> dict:
    data = yaml.safe_load(open(EXAMPLE_PROFILES).read())
    data.update(top)
    return data


def parse(data: dict):
    return parse_profiles_text(yaml.safe_dump(data, sort_keys=False))


def profile(data: dict, slug: str) -> dict:
    return next(p for p in data["profiles"] if p["slug"] == slug)


def test_default_ceiling_is_the_profiles_own_priority_and_groups_raise_it():
    cfg = parse(example(group_max_priority={"leads": "high"}))
    spot, mig = cfg.by_slug["a100-spot"], cfg.by_slug["a100-mig-1g10gb"]
    assert cfg.allowed_priorities(spot, ["ml-research"]) == ["low"]
    assert cfg.allowed_priorities(spot, ["ml-research", "leads"]) == ["low", "normal", "high"]
    assert cfg.allowed_priorities(mig, ["data-science"]) == ["low", "normal", "high"]  # max_priority: high
    assert cfg.max_priority_for(cfg.by_slug["cpu"], []) == "normal"


def test_every_profile_has_an_explicit_priority_for_jobs_and_servers():
    data = example()
    cfg = parse(data)
    assert cfg.effective_priority(cfg.by_slug["cpu"]) == "normal"  # names none: the file's default
    assert spawner_overrides(cfg, cfg.by_slug["cpu"])["priority_class_name"] == "gpuhub-normal"
    assert spawner_overrides(cfg, cfg.by_slug["a100-spot"])["priority_class_name"] == "gpuhub-low"
    cfg = parse(example(default_priority="high"))
    assert spawner_overrides(cfg, cfg.by_slug["cpu"])["priority_class_name"] == "gpuhub-high"
    custom = example(priorities={"batch": 10, "interactive": 500})
    for p in custom["profiles"]:
        p.pop("priority", None), p.pop("max_priority", None)
    cfg = parse(custom)
    assert cfg.effective_priority(cfg.by_slug["cpu"]) == "batch"  # no `normal`: the lowest, still explicit


@pytest.mark.parametrize("change,path,needle", [
    (lambda d: d.update(default_priority="urgent"), "default_priority", "'urgent' is not a priority; valid: low"),
    (lambda d: d.update(group_max_priority={"leads": "urgent"}), "group_max_priority.leads", "not a priority"),
    (lambda d: d.update(group_max_priority=["leads"]), "group_max_priority", "must map a JupyterHub group"),
    (lambda d: profile(d, "h100-full").update(max_priority="low"), "profiles[3].max_priority",
     "'low' is below the profile's own priority 'high'; valid: high"),
    (lambda d: profile(d, "cpu").update(max_priority="top"), "profiles[0].max_priority", "'top' is not a priority"),
])
def test_bad_ceilings_are_refused_with_path_and_fix(change, path, needle):
    data = example()
    change(data)
    with pytest.raises(ProfilesError) as e:
        parse(data)
    assert [str(p) for p in e.value.problems if p.path == path and needle in p.message], str(e.value)
