""""May this user use this profile?" has one answer (model/choices.py choose_profile), given alike by the
hub's spawner, the gpu-jobs submission planner, the Job builder and `gpuhub render`. The expected answers
come from the example file's raw YAML (who is listed in `groups`), not from the model."""
from __future__ import annotations

import itertools
import json

import pytest
import yaml

from jupyterhub_gpu.builders.jobs import JobRequestError, build_job
from jupyterhub_gpu.model.choices import ChoiceError, choose, choose_profile
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.services.jobs.submission import plan_submission

RAW = {p["slug"]: p for p in yaml.safe_load(EXAMPLE_PROFILES.read_text())["profiles"]}
GROUP_SETS = [[], ["data-science"], ["ml-research"], ["data-science", "ml-research"], ["someone-else"]]
NB = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def may_use(groups: list[str], slug: str) -> bool:
    listed = RAW[slug].get("groups")
    return listed is None or bool(set(listed) & set(groups))


CASES = list(itertools.product(range(len(GROUP_SETS)), [*RAW, "no-such"]))


@pytest.mark.parametrize("gi, slug", CASES)
def test_every_caller_gives_the_same_answer(cfg, gi, slug, tmp_path, capsys):
    groups = GROUP_SETS[gi]
    ok = slug in RAW and may_use(groups, slug)
    gpu_ok = ok and "gpu" in RAW[slug]
    answers = {}

    def outcome(name, call, errors):
        try:
            call()
            answers[name] = "ok"
        except errors as e:
            answers[name] = str(e)

    outcome("hub", lambda: choose(cfg, "ana", groups, {"profile": slug}), ChoiceError)
    outcome("model", lambda: choose_profile(cfg, "ana", groups, slug), ChoiceError)
    assert (answers["hub"] == "ok") is ok and answers["hub"] == answers["model"]
    # GPU jobs: the same rule, GPU profiles only; planner, builder and CLI agree word for word
    outcome("jobs", lambda: plan_submission(cfg, "ana", groups, {"profile": slug, "notebook_path": "a.ipynb",
                                                                 "notebook": NB}, 0), JobRequestError)
    if slug in RAW:
        outcome("builder", lambda: build_job(cfg, cfg.by_slug[slug], "ana", groups, "a.ipynb", NB), JobRequestError)
    if (answers["jobs"] == "ok") != gpu_ok:
        # allowed, but refused for a reason after the profile check (e.g. no team): never an access reason
        assert gpu_ok and "not available" not in answers["jobs"] and "no GPU" not in answers["jobs"]
    if not gpu_ok:
        assert answers["jobs"] != "ok" and answers.get("builder", answers["jobs"]) == answers["jobs"]
    from jupyterhub_gpu.tools.cli import main

    nb = tmp_path / "a.ipynb"
    nb.write_text(json.dumps(NB))
    argv = ["render", "job", str(EXAMPLE_PROFILES), "--profile", slug, "--user", "ana", "--notebook", str(nb),
            *[a for g in groups for a in ("--group", g)]]
    rc = main(argv)
    if not gpu_ok:
        assert rc == 2 and answers["jobs"] in capsys.readouterr().err


def test_reasons(cfg):
    with pytest.raises(ChoiceError, match=r"^Profile 'h100-full' is not available to ana: it is for members of "
                                          r"ml-research\. Choose one of: cpu, t4-shared, a100-mig-1g10gb\.$"):
        choose_profile(cfg, "ana", ["data-science"], "h100-full")
    with pytest.raises(ChoiceError, match=r"^There is no profile 'x'\. Choose one of: t4-shared\.$"):
        choose_profile(cfg, "ana", [], "x", gpu=True)
    with pytest.raises(ChoiceError, match=r"^Profile 'cpu' has no GPU\. GPU jobs need one of: t4-shared\.$"):
        choose_profile(cfg, "ana", [], "cpu", gpu=True)
    with pytest.raises(ChoiceError, match=r"^Name a GPU profile\. Choose one of: t4-shared\.$"):
        choose_profile(cfg, "ana", [], None, gpu=True, required=True)
    with pytest.raises(ChoiceError, match=r"^There is no profile \['a'\]"):
        choose_profile(cfg, "ana", [], ["a"])  # hostile JSON: a list where a slug belongs
    long = "x" * 10_000
    with pytest.raises(ChoiceError) as e:
        choose_profile(cfg, "ana", [], long)
    assert len(str(e.value)) < 200  # a forged slug is not echoed in full


def test_no_slug_is_the_users_default(cfg):
    assert choose_profile(cfg, "ana", [], None).slug == "cpu"  # `default: true`
    assert choose_profile(cfg, "ana", [], "").slug == "cpu"
    assert choose_profile(cfg, "ana", [], None, gpu=True).slug == "t4-shared"  # the first GPU one they may use


def test_no_profile_at_all(cfg):
    only_ml = cfg.model_copy(update={"profiles": [p for p in cfg.profiles if p.groups == ["ml-research"]]})
    with pytest.raises(ChoiceError, match="^No profile is available to ana; ask an admin to add you to a group"):
        choose_profile(only_ml, "ana", ["data-science"], "h100-full")
    with pytest.raises(ChoiceError, match="^No GPU profile is available to ana"):
        choose_profile(only_ml, "ana", [], None, gpu=True)
