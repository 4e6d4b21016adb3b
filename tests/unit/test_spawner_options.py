"""Options inside GPU profiles (KubeSpawner `profile_options`): the picker, the checks (403 before any pod),
the pod they make, and the admin's KubeSpawner settings under a profile — through KubeSpawner's real code."""
from __future__ import annotations

import textwrap
from urllib.parse import parse_qsl

import pytest
from kubernetes_asyncio.client import ApiClient

from jupyterhub_gpu.hub.render_pod import make_spawner
from jupyterhub_gpu.hub.spawner import ProfileNotAllowed
from jupyterhub_gpu.model.choices import ChoiceError, choose
from jupyterhub_gpu.model.profiles_file import cached_profiles
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles_text

PROFILES = """
pools:
  t4:
    node_selector: {agentpool: t4}
    taints: [{key: sku, value: gpu, effect: NoSchedule}]
    gpu: {model: T4, count_per_node: 1}
    instance_type: Standard_NC8as_T4_v3
profiles:
  - {slug: plain, display_name: Plain, default: true}
  - slug: t4
    display_name: T4
    pool: t4
    gpu: {kind: full}
    cpu: 2
    memory: 8Gi
    shm: 1Gi
    image: reg.example/base:1
    options:
      image:
        display_name: Environment
        choices:
          pytorch:
            display_name: PyTorch 2.4
            default: true
            kubespawner_override: {image: reg.example/pytorch:2.4, environment: {FRAMEWORK: torch}}
          tensorflow: {display_name: TensorFlow, kubespawner_override: {image: reg.example/tf:2.16}}
          nightly: {display_name: Nightly, groups: [ml-research], kubespawner_override: {image: reg.example/nightly:1}}
        unlisted_choice:
          groups: [ml-research]
          display_name: Your image
          validation_regex: 'reg\\.example/[a-z0-9-]+:[a-z0-9.-]+'
          validation_message: an image from reg.example, with a tag
teams:
  ds: {namespace: team-ds, default: true, quota: {t4: 1}}
"""
ML = ["ml-research"]


@pytest.fixture
def profiles_file(tmp_path):
    path = tmp_path / "profiles.yaml"
    path.write_text(PROFILES)
    return path


@pytest.fixture
async def spawner(profiles_file):
    made = []

    def make(user="alice", groups=(), **traits):
        sp = make_spawner(profiles_file, user, list(groups), **traits)
        made.append(sp)
        return sp

    yield make
    for sp in made:
        await sp.api.api_client.close()


async def pod_for(sp, user_options):
    sp.user_options = user_options
    await sp.load_user_options()
    pod = await sp.get_pod_manifest()
    async with ApiClient() as client:
        return client.sanitize_for_serialization(pod)


def env_of(pod):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


# ---------------------------------------------------------------- what the picker offers
async def test_picker_offers_the_choices_of_the_users_groups(spawner):
    for groups, choices, unlisted in (([], ["pytorch", "tensorflow"], False),
                                      (ML, ["pytorch", "tensorflow", "nightly"], True)):
        sp = spawner("u", groups)
        t4 = next(p for p in await sp.profile_list(sp) if p["slug"] == "t4")
        option = t4["profile_options"]["image"]
        assert list(option["choices"]) == choices
        assert [k for k, c in option["choices"].items() if c["default"]] == ["pytorch"]
        assert option["unlisted_choice"]["enabled"] is unlisted
        page = await sp._render_options_form_dynamically(sp)
        assert 'name="profile-option-t4--image"' in page and ">TensorFlow</option>" in page
        assert ('name="profile-option-t4--image--unlisted-choice"' in page) is unlisted
        assert ('value="nightly"' in page) is unlisted
        assert "whole GPU · 16 GB GPU memory — 2 CPU · 8 GiB RAM" in page  # the card's facts line, with the options


# ---------------------------------------------------------------- the pod a choice makes
async def test_default_choice_sets_image_and_env_and_tells_gpu_submit(spawner):
    pod = await pod_for(spawner("alice"), {"profile": "t4"})
    c = pod["spec"]["containers"][0]
    assert c["image"] == "reg.example/pytorch:2.4"
    env = env_of(pod)
    assert env["FRAMEWORK"] == "torch"
    assert dict(parse_qsl(env["GPUHUB_PROFILE_OPTIONS"])) == {"image": "pytorch"}
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"


async def test_listed_and_typed_choices(spawner):
    pod = await pod_for(spawner("alice"), {"profile": "t4", "image": "tensorflow"})
    assert pod["spec"]["containers"][0]["image"] == "reg.example/tf:2.16"
    assert "FRAMEWORK" not in env_of(pod)
    pod = await pod_for(spawner("rita", ML), {"profile": "t4", "image--unlisted-choice": "reg.example/mine:0.3"})
    assert pod["spec"]["containers"][0]["image"] == "reg.example/mine:0.3"
    assert dict(parse_qsl(env_of(pod)["GPUHUB_PROFILE_OPTIONS"])) == {"image--unlisted-choice": "reg.example/mine:0.3"}


async def test_profile_without_options_keeps_its_own_image(spawner):
    pod = await pod_for(spawner("alice", image="admin/default:7"), {"profile": "plain"})
    assert pod["spec"]["containers"][0]["image"] == "admin/default:7"
    assert "GPUHUB_PROFILE_OPTIONS" not in env_of(pod)


# ---------------------------------------------------------------- forged or unlisted: 403 before any pod
@pytest.mark.parametrize("user, groups, options, message", [
    ("alice", [], {"image": "nightly"}, "'nightly' is for members of ml-research, not alice; choose one of: "
                                        "pytorch, tensorflow"),
    ("alice", [], {"image": "evil"}, "there is no choice 'evil'"),
    ("alice", [], {"image": ["pytorch"]}, "there is no choice ['pytorch']"),
    ("alice", [], {"image--unlisted-choice": "reg.example/mine:1"}, "typed values are for members of ml-research"),
    ("rita", ML, {"image--unlisted-choice": "docker.io/evil/miner:1"},
     "'docker.io/evil/miner:1' is not allowed: an image from reg.example, with a tag"),
    ("rita", ML, {"image--unlisted-choice": "reg.example/mine:1\n"}, "is not allowed"),  # fullmatch, not match
    ("rita", ML, {"image--unlisted-choice": "reg.example/" + "a" * 600 + ":1"}, "is not allowed"),
    ("rita", ML, {"image--unlisted-choice": 42}, "42 is not allowed"),
    ("rita", ML, {"image": "pytorch", "image--unlisted-choice": "reg.example/mine:1"}, "not both"),
    ("rita", ML, {"image": "unlisted-choice"}, "typed none"),
    ("alice", [], {"gpu": "8"}, "Unknown server option(s) 'gpu' for profile 't4': its options: image"),
])
async def test_forged_choices_get_403_before_any_pod(spawner, user, groups, options, message):
    sp = spawner(user, groups)
    sp.user_options = {"profile": "t4", **options}
    with pytest.raises(ProfileNotAllowed) as e:
        await sp.load_user_options()
    assert e.value.status_code == 403
    assert message in e.value.log_message
    assert getattr(sp, "gpu_profile", None) is None  # nothing was applied, no pod built


async def test_a_flood_of_unknown_options_gets_a_short_answer(spawner):
    sp = spawner("alice")
    sp.user_options = {"profile": "t4", **{f"k{i}": "x" * 1000 for i in range(10000)}}
    with pytest.raises(ProfileNotAllowed) as e:
        await sp.load_user_options()
    assert "and 9995 more for profile 't4'" in e.value.log_message and len(e.value.log_message) < 1000


async def test_option_of_a_profile_without_options_is_refused(spawner):
    sp = spawner("alice")
    sp.user_options = {"profile": "plain", "image": "pytorch"}
    with pytest.raises(ProfileNotAllowed, match=r"Unknown server option\(s\) 'image' for profile 'plain': it takes "
                                                r"no options besides 'profile'"):
        await sp.load_user_options()


async def test_form_without_javascript_sends_the_field_that_was_meant(spawner):
    rita = spawner("rita", ML)
    form = {"profile": ["t4"], "profile-option-t4--image": ["unlisted-choice"],
            "profile-option-t4--image--unlisted-choice": ["reg.example/mine:2"]}
    assert rita.options_from_form(form) == {"profile": "t4", "image--unlisted-choice": "reg.example/mine:2"}
    form["profile-option-t4--image"] = ["tensorflow"]  # switched back to a listed image; the text stays behind
    assert rita.options_from_form(form) == {"profile": "t4", "image": "tensorflow"}
    form = {"profile": ["t4"], "profile-option-t4--image": ["tensorflow"],
            "profile-option-t4--image--unlisted-choice": [""]}
    assert rita.options_from_form(form) == {"profile": "t4", "image": "tensorflow"}
    alice = spawner("alice")
    with pytest.raises(ProfileNotAllowed, match="typed values are for members of ml-research") as e:
        alice.options_from_form({"profile": ["t4"], "profile-option-t4--image": ["unlisted-choice"],
                                 "profile-option-t4--image--unlisted-choice": ["reg.example/mine:2"]})
    assert e.value.status_code == 403


async def test_saved_choices_are_preselected_on_the_form(spawner):
    sp = spawner("rita", ML)
    sp.user_options = {"profile": "t4", "image--unlisted-choice": "reg.example/mine:3"}
    page = await sp._render_options_form_dynamically(sp)
    assert 'value="unlisted-choice" selected' in page and 'value="reg.example/mine:3"' in page
    sp.user_options = {"profile": "t4", "image": "tensorflow"}
    page = await sp._render_options_form_dynamically(sp)
    assert 'value="tensorflow" selected' in page and 'value="pytorch" selected' not in page


# ---------------------------------------------------------------- the admin's KubeSpawner settings under a profile
ADMIN = dict(cpu_guarantee=0.5, cpu_limit=4, mem_guarantee="2G", mem_limit="16G", image="admin/notebook:9",
             environment={"TEAM_BUCKET": "s3://x"}, node_selector={"zone": "a"},
             volumes=[{"name": "home", "emptyDir": {}}], volume_mounts=[{"name": "home", "mountPath": "/home/jovyan"}])


async def test_what_a_profile_does_not_set_comes_from_the_admin(spawner):
    pod = await pod_for(spawner("alice", **ADMIN), {"profile": "plain"})
    c, spec = pod["spec"]["containers"][0], pod["spec"]
    assert c["resources"]["requests"] == {"cpu": 0.5, "memory": 2 * 2**30}
    assert c["resources"]["limits"] == {"cpu": 4.0, "memory": 16 * 2**30}
    assert c["image"] == "admin/notebook:9"
    assert env_of(pod)["TEAM_BUCKET"] == "s3://x" and env_of(pod)["GPUHUB_PROFILE"] == "plain"
    assert spec["nodeSelector"] == {"zone": "a"}
    assert [v["name"] for v in spec["volumes"]] == ["home", "dshm"]


async def test_a_profiles_explicit_values_win(spawner):
    pod = await pod_for(spawner("alice", **ADMIN), {"profile": "t4", "image": "tensorflow"})
    c, spec = pod["spec"]["containers"][0], pod["spec"]
    # cpu 2 and memory 8Gi + shm 1Gi are the profile's; the admin's larger limit stays a limit
    assert c["resources"]["requests"]["cpu"] == 2.0 and c["resources"]["limits"]["cpu"] == 4.0
    assert c["resources"]["requests"]["memory"] == 9 * 2**30 and c["resources"]["limits"]["memory"] == 16 * 2**30
    assert c["image"] == "reg.example/tf:2.16"  # the choice, over the profile's and the admin's image
    assert spec["nodeSelector"] == {"zone": "a", "agentpool": "t4"}
    assert env_of(pod)["TEAM_BUCKET"] == "s3://x"
    pod = await pod_for(spawner("alice", cpu_limit=1, mem_limit="1G"), {"profile": "t4"})
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"]["cpu"] == 2.0  # an admin limit below the profile's guarantee: the guarantee
    assert c["resources"]["limits"]["memory"] == 9 * 2**30


async def test_picker_size_line_shows_what_the_server_gets(spawner):
    sp = spawner("alice", **ADMIN)
    cards = {p["slug"]: p["gpuhub"]["size"] for p in await sp.profile_list(sp)}
    assert cards["plain"] == "0.5 CPU · 2 GiB RAM · 1 GiB /dev/shm"
    assert cards["t4"] == "2 CPU · 8 GiB RAM · 1 GiB /dev/shm"


async def test_profile_form_template_is_honoured(spawner):
    sp = spawner("rita", ML, profile_form_template=(
        "<ul>{% for p in profile_list %}<li>{{ p.slug }}:{{ p.profile_options.image.choices|list|join(',') "
        "if p.profile_options else '' }}</li>{% endfor %}</ul>"))
    page = await sp._render_options_form_dynamically(sp)
    assert page == "<ul><li>plain:</li><li>t4:pytorch,tensorflow,nightly</li></ul>"


# ---------------------------------------------------------------- the profiles file: options validated
def problems(text: str) -> list[str]:
    with pytest.raises(ProfilesError) as e:
        parse_profiles_text(textwrap.dedent(text))
    return [str(p) for p in e.value.problems]


def test_option_problems_are_listed_with_paths():
    got = problems("""
        profiles:
          - slug: p
            display_name: P
            options:
              image:
                display_name: Image
                choices:
                  a: {display_name: A, groups: [x], kubespawner_override: {image: a:1, tolerations: []}}
                  b: {display_name: B, default: true}
                  c: {display_name: C, default: true}
                unlisted_choice: {groups: [], validation_regex: "(", kubespawner_override: {image: "{valu}"}}
              profile: {display_name: P, choices: {}}
              x--y: {display_name: X, choices: {a: {display_name: A}}}
        """)
    assert "profiles[0].options.image.choices.a.kubespawner_override.tolerations: unknown key 'tolerations'; valid " \
           "keys: image, image_pull_policy, environment, default_url" in got
    assert "profiles[0].options.image.unlisted_choice.groups: [] must not be empty" in got
    assert "profiles[0].options.profile.choices: {} must not be empty" in got
    got = problems("""
        profiles:
          - slug: p
            display_name: P
            options:
              image:
                display_name: Image
                choices:
                  a: {display_name: A, default: true, groups: [x]}
                  b: {display_name: B, default: true}
                unlisted_choice: {groups: [g], validation_regex: "(", kubespawner_override: {image: "{valu}"}}
              x--y: {display_name: X, choices: {a: {display_name: A}}}
        """)
    assert got == [
        "profiles[0].options.image.choices.b.default: only one choice may be the default; 'a' already is",
        "profiles[0].options.image.choices.a.groups: 'a' is the default choice, so everyone allowed the profile must "
        "be able to pick it; remove its groups or make another choice the default",
        "profiles[0].options.image.unlisted_choice.validation_regex: '(' is not a regular expression: missing ), "
        "unterminated subpattern at position 0",
        "profiles[0].options.image.unlisted_choice.kubespawner_override: unknown placeholder {valu}; the only "
        "placeholder is {value}",
        "profiles[0].options.x--y: 'x--y' is not a valid option name: 'profile' and names with '--' are "
        "KubeSpawner's own form keys",
    ]


def test_a_choice_may_not_set_what_the_server_was_given():
    """gpuhub's own variables (the GPU check reads GPUHUB_DRA_DEVICES, GPUHUB_GPU_COUNT...), the NVIDIA runtime's
    (NVIDIA_VISIBLE_DEVICES would hand the container GPUs nothing allocated) and what the GPU check reads are not a
    choice's."""
    got = problems("""
        profiles:
          - slug: p
            display_name: P
            options:
              env:
                display_name: Env
                choices:
                  a: {display_name: A, kubespawner_override: {environment: {GPUHUB_DRA_DEVICES: "full:8"}}}
                  b: {display_name: B, kubespawner_override: {environment: {NVIDIA_VISIBLE_DEVICES: all}}}
                  c: {display_name: C, kubespawner_override: {environment: {"BAD NAME": x}}}
                  d: {display_name: D, kubespawner_override: {environment: {TEAM: x, team_2: y}}}
                  e: {display_name: E, kubespawner_override: {environment: {NVIDIA_DRIVER_CAPABILITIES: compute}}}
                  f: {display_name: F, kubespawner_override: {environment: {CUDA_VISIBLE_DEVICES: ""}}}
        """)
    at = "profiles[0].options.env.choices"
    assert [g for g in got if g.startswith(at)] == [
        f"{at}.a.kubespawner_override.environment: GPUHUB_DRA_DEVICES is gpuhub's or the GPU runtime's to set (what "
        "the server was given), not a choice's",
        f"{at}.b.kubespawner_override.environment: NVIDIA_VISIBLE_DEVICES is gpuhub's or the GPU runtime's to set "
        "(what the server was given), not a choice's",
        f"{at}.c.kubespawner_override.environment: 'BAD NAME' is not an environment variable name (letters, digits, "
        "_; at most 128)",
        f"{at}.e.kubespawner_override.environment: NVIDIA_DRIVER_CAPABILITIES is gpuhub's or the GPU runtime's to "
        "set (what the server was given), not a choice's",  # it could hide nvidia-smi from the GPU check
        f"{at}.f.kubespawner_override.environment: CUDA_VISIBLE_DEVICES is gpuhub's or the GPU runtime's to set "
        "(what the server was given), not a choice's"], got


def test_typed_value_must_reach_the_override():
    assert problems("""
        profiles:
          - slug: p
            display_name: P
            options:
              image:
                display_name: Image
                choices: {a: {display_name: A}}
                unlisted_choice: {groups: [g], validation_regex: ".+", kubespawner_override: {image: fixed:1}}
        """) == ["profiles[0].options.image.unlisted_choice.kubespawner_override: never uses the typed value; "
                 "write {value} where it goes, e.g. image: '{value}'"]


def test_choose_is_the_one_rule_for_hub_and_jobs(profiles_file):
    cfg = cached_profiles(profiles_file)
    assert choose(cfg, "alice", [], {"profile": "t4"}).image == "reg.example/pytorch:2.4"
    assert choose(cfg, "alice", [], {}).profile.slug == "plain"
    assert choose(cfg, "rita", ML, {"profile": "t4", "image": "nightly"}).image == "reg.example/nightly:1"
    with pytest.raises(ChoiceError, match="is not available|is for members"):
        choose(cfg, "alice", [], {"profile": "t4", "image": "nightly"})


# ---------------------------------------------------------------- %gpu_submit runs in the server's image
NB = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def job_image(cfg, user, groups, options):
    from jupyterhub_gpu.services.jobs.submission import plan_submission

    body = {"profile": "t4", "notebook_path": "nb.ipynb", "notebook": NB}
    if options is not None:
        body["options"] = options
    job, _ = plan_submission(cfg, user, groups, body, 0)
    return job["spec"]["template"]["spec"]["containers"][0]["image"]


def test_jobs_run_in_the_image_the_server_runs_unless_another_allowed_one_is_picked(profiles_file):
    from jupyterhub_gpu.builders.jobs import JobRequestError

    cfg = cached_profiles(profiles_file)
    assert job_image(cfg, "alice", [], None) == "reg.example/pytorch:2.4"  # the profile's default choice
    assert job_image(cfg, "alice", [], {"image": "tensorflow"}) == "reg.example/tf:2.16"
    assert job_image(cfg, "rita", ML, {"image--unlisted-choice": "reg.example/mine:4"}) == "reg.example/mine:4"
    for user, groups, options, needle in (("alice", [], {"image": "nightly"}, "is for members of ml-research"),
                                          ("alice", [], {"image--unlisted-choice": "reg.example/x:1"}, "typed values"),
                                          ("rita", ML, {"image--unlisted-choice": "evil:1"}, "is not allowed"),
                                          ("rita", ML, "image=x", "options must be a JSON object")):
        with pytest.raises(JobRequestError, match=needle):
            job_image(cfg, user, groups, options)


def test_the_kernel_sends_the_servers_own_choices(monkeypatch):
    from jupyterhub_gpu.singleuser.client import job_options

    env = {"GPUHUB_PROFILE": "t4", "GPUHUB_PROFILE_OPTIONS": "image--unlisted-choice=reg.example%2Fmine%3A4"}
    assert job_options("t4", None, env) == {"image--unlisted-choice": "reg.example/mine:4"}
    assert job_options("t4", {"image": "tensorflow"}, env) == {"image": "tensorflow"}  # the user's pick instead
    assert job_options("other", None, env) == {}  # another profile: its own defaults
    assert job_options("t4", None, {}) == {}


def test_gpu_submit_option_flag():
    from jupyterhub_gpu.singleuser.magic import UsageError, parse_submit_args

    assert parse_submit_args("--profile t4 -o image=tensorflow")["options"] == {"image": "tensorflow"}
    assert parse_submit_args("--profile t4")["options"] == {}
    with pytest.raises(UsageError, match="write NAME=CHOICE"):
        parse_submit_args("--profile t4 --option tensorflow")
