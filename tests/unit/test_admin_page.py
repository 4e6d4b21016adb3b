"""The admin console's handler in a real tornado app on a real port (services/admin/web.py), with HubOAuth as
the service runs it and only the hub's token lookup faked: an admin sees the profiles per group (sha256 and load
time), the live state (unknown until read, never 0), a user gets 403 on every method; the dry run is XSRF-checked,
bounded (256 KiB, a parse timeout), escaped, and names the servers a new file would strand; the doctor runs at most
once a minute and shows the fix of each ✗."""
from __future__ import annotations

import copy
import re
import sys
from urllib.parse import urlencode

import pytest
import yaml
from jupyterhub.services.auth import HubOAuth
from tornado import httpclient, web
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.services.admin import web as admin
from jupyterhub_gpu.services.admin.diff import checksum
from jupyterhub_gpu.services.admin.live import LiveReader, Read, pool_states

PREFIX = "/services/gpu-admin/"
SECRET = b"s" * 32
CLIENT = "service-gpu-admin"
ACCESS = "access:services!service=gpu-admin"
MODELS = {
    "boss-token": {"kind": "user", "name": "boss", "admin": True, "groups": [], "scopes": [ACCESS, "admin:users"]},
    # a user given access to the service by mistake still gets 403 from the page itself
    "alice-token": {"kind": "user", "name": "alice", "admin": False, "groups": [], "scopes": [ACCESS]},
    "bob-token": {"kind": "user", "name": "bob", "admin": False, "groups": [], "scopes": ["self"]},
}
NODES = [
    {"metadata": {"name": "t4-0", "labels": {"kubernetes.azure.com/agentpool": "gput4"}}, "spec": {},
     "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"nvidia.com/gpu": "4"}}},
    {"metadata": {"name": "t4-1", "labels": {"kubernetes.azure.com/agentpool": "gput4"}},
     "spec": {"unschedulable": True},
     "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"nvidia.com/gpu": "4"}}},
]
PODS = [{"spec": {"nodeName": "t4-0", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
         "status": {"phase": "Running"}}]
QUEUE = {"spec": {"resourceGroups": [{"flavors": [{"name": "gput4", "resources": [
    {"name": "cpu", "nominalQuota": "10"}, {"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]},
    "status": {"pendingWorkloads": 3, "flavorsUsage": [{"name": "gput4", "resources": [
        {"name": "nvidia.com/gpu", "total": "2"}]}]}}
#: Waiting in data-science's LocalQueue since 2026-01-01 (the page says how long, as of its read).
WAITING = {"metadata": {"name": "job-a", "namespace": "team-ds", "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"queueName": "data-science"}, "status": {"conditions": []}}


@pytest.fixture(autouse=True)
def hub_env(monkeypatch):
    for k, v in {"JUPYTERHUB_API_TOKEN": "service-token", "JUPYTERHUB_CLIENT_ID": CLIENT,
                 "JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api", "JUPYTERHUB_BASE_URL": "/",
                 "JUPYTERHUB_SERVICE_PREFIX": PREFIX, "JUPYTERHUB_SERVICE_NAME": "gpu-admin",
                 "JUPYTERHUB_OAUTH_ACCESS_SCOPES": f'["{ACCESS}"]',
                 "JUPYTERHUB_OAUTH_CALLBACK_URL": f"{PREFIX}oauth_callback"}.items():
        monkeypatch.setenv(k, v)

    def user_for_token(self, token, use_cache=True, session_id="", *, sync=True):
        model = copy.deepcopy(MODELS.get(token))
        if sync:
            return model

        async def answer():
            return model
        return answer()

    monkeypatch.setattr(HubOAuth, "user_for_token", user_for_token)
    HubOAuth.clear_instance()  # a fresh HubOAuth from this environment
    monkeypatch.setattr(admin.AdminPage, "_hub_auth", None)
    yield
    HubOAuth.clear_instance()


class Site:
    def __init__(self, console, port):
        self.console, self.url = console, f"http://127.0.0.1:{port}{PREFIX}"
        self.http = httpclient.AsyncHTTPClient()

    async def fetch(self, user: str | None, path: str = "", method: str = "GET", body: dict | bytes | None = None,
                    cookies: dict | None = None, **kw) -> httpclient.HTTPResponse:
        jar = dict(cookies or {})
        if user:
            jar[CLIENT] = web.create_signed_value(SECRET, CLIENT, f"{user}-token").decode()
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in jar.items())} if jar else {}
        if isinstance(body, dict):
            body = urlencode(body).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        return await self.http.fetch(self.url + path, method=method, body=body, headers=headers, raise_error=False,
                                     follow_redirects=False, **kw)

    async def form(self, user: str) -> tuple[str, dict]:
        """The page's XSRF field and cookie."""
        r = await self.fetch(user)
        value = re.search(r'name="_xsrf" value="([^"]+)"', r.body.decode()).group(1)
        cookie = next(c.split(";")[0] for c in r.headers.get_list("Set-Cookie") if c.startswith("_xsrf="))
        return value, {"_xsrf": cookie.split("=", 1)[1]}


@pytest.fixture
async def site(tmp_path):
    path = tmp_path / "profiles.yaml"
    path.write_text(EXAMPLE_PROFILES.read_text())
    loaded = admin.Loaded(str(path))
    calls = tmp_path / "doctor-runs"
    doctor = admin.Doctor([sys.executable, "-c", f"open({str(calls)!r}, 'a').write('x'); print('✓ pool a  nodes  "
                           "2 ready'); print('✗ kueue  ClusterQueue team-ds  missing <b>'); print('    fix: gpuhub "
                           "render kueue f | kubectl apply -f -'); print('2 checks: 1 ✓, 1 ✗')"], timeout=30)

    async def reads(cfg):
        return Read(NODES, PODS, {"data-science": QUEUE, "ml-research": None},
                    {"team-ds": [WAITING], "team-mlr": None, "jhub": []},
                    ["ClusterQueue team-ml-research: 403", "Workloads in team-mlr: 403"])

    async def users():
        return [{"name": "rita", "servers": {"": {"user_options": {"profile": "h100-full"}}}},
                {"name": "alice", "servers": {"": {"user_options": {"profile": "cpu"}}}}]

    console = admin.Console(loaded, LiveReader(loaded.cfg, reads), doctor, users=users)
    sock, port = bind_unused_port()
    server = HTTPServer(admin.make_app(console, PREFIX, SECRET), max_body_size=admin.MAX_REQUEST)
    server.add_sockets([sock])
    s = Site(console, port)
    s.calls = calls
    yield s
    server.stop()
    console.worker.kill()


async def test_an_admin_sees_the_profiles_per_group_and_the_live_state(site):
    r = await site.fetch("boss")
    page = r.body.decode()
    assert r.code == 200, page
    assert r.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert "<script" not in page
    assert checksum(EXAMPLE_PROFILES.read_text()) in page
    for group in ("data-science", "ml-research", "teaching"):
        assert f"<caption>Group {group}</caption>" in page
    assert "h100-full" in page and "30m" in page and "$" in page
    assert "Read never" in page and ">unknown<" in page  # nothing read yet: unknown, not 0
    await site.console.live.read_once()
    page = (await site.fetch("boss")).body.decode()
    assert "<tr><th scope='row'>gput4</th><td>1</td><td>1</td><td>0</td><td>0</td><td>8</td><td>1</td></tr>" in page
    assert "gput4 nvidia.com/gpu: 2 / 8 (borrowed 0)</td><td>3</td><td>" in page
    assert re.search(r"<th scope='row'>data-science</th>.*?<td>3</td><td>\d+ d \d+ h</td></tr>", page)
    assert ("<th scope='row'>ml-research</th><td>team-ml-research</td><td>unknown</td><td>unknown</td>"
            "<td>unknown</td></tr>") in page
    assert "GPU slots in use, last 24 h" in page and "peak 1 of 8 at" in page and "<script" not in page


async def test_users_get_403_on_every_method_and_strangers_are_sent_to_log_in(site):
    for user in ("alice", "bob"):
        assert (await site.fetch(user)).code == 403
        value, cookies = await site.form("boss")
        r = await site.fetch(user, "dry-run", "POST", {"_xsrf": value, "profiles": "x"}, cookies)
        assert r.code == 403
    r = await site.fetch(None)
    assert r.code == 302 and "/hub/api/oauth2/authorize" in r.headers["Location"]


async def test_the_dry_run_needs_the_xsrf_field(site):
    assert (await site.fetch("boss", "dry-run", "POST", {"profiles": EXAMPLE_PROFILES.read_text()})).code == 403
    value, cookies = await site.form("boss")
    r = await site.fetch("boss", "dry-run", "POST", {"_xsrf": value, "profiles": EXAMPLE_PROFILES.read_text()},
                         cookies)
    assert r.code == 200 and "No difference from the loaded file" in r.body.decode()
    assert "Nothing is applied here" in r.body.decode()


async def test_the_dry_run_shows_the_difference_and_the_servers_losing_their_profile(site):
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["profiles"] = [p for p in data["profiles"] if p["slug"] != "h100-full"]
    data["teams"]["ml-research"]["quota"].pop("gpuh100")
    value, cookies = await site.form("boss")
    r = await site.fetch("boss", "dry-run", "POST", {"_xsrf": value, "profiles": yaml.safe_dump(data, sort_keys=False)},
                         cookies)
    page = r.body.decode()
    assert r.code == 200, page
    assert "<h3>Group ml-research</h3><ul class='group-diff'><li>removed: h100-full</li></ul>" in page
    assert "<h3>Group data-science</h3>" not in page
    assert "changed: ClusterQueue team-ml-research" in page
    assert "<ul class='servers'><li>rita/ (h100-full)</li></ul>" in page


async def test_a_bad_file_lists_its_problems_escaped(site):
    value, cookies = await site.form("boss")
    text = "profiles:\n- slug: <script>alert(1)</script>\n  display_name: x\nfoo: 1\n"
    r = await site.fetch("boss", "dry-run", "POST", {"_xsrf": value, "profiles": text}, cookies)
    page = r.body.decode()
    assert r.code == 200 and "problem(s), as <code>gpuhub validate</code> lists them" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "foo: unknown key" in page


async def test_bodies_and_parse_time_are_bounded(site):
    value, cookies = await site.form("boss")
    big = "a" * (admin.MAX_BODY + 10)
    r = await site.fetch("boss", "dry-run", "POST", {"_xsrf": value, "profiles": big}, cookies)
    assert r.code == 413 and "nothing was compared" in r.body.decode()
    huge = b"profiles=" + b"a" * (admin.MAX_REQUEST + 10)
    r = await site.fetch("boss", "dry-run", "POST", huge, cookies)
    assert r.code in (400, 413) or r.code == 599  # refused by the server before it is read
    site.console.worker = admin.Worker(timeout=0.001)  # a parse that takes longer is stopped
    r = await site.fetch("boss", "dry-run", "POST", {"_xsrf": value, "profiles": EXAMPLE_PROFILES.read_text()},
                         cookies)
    assert r.code == 200 and "nothing was compared" in r.body.decode()


async def test_the_doctor_runs_at_most_once_a_minute_and_shows_each_fix(site):
    value, cookies = await site.form("boss")
    r = await site.fetch("boss", "doctor", "POST", {"_xsrf": value}, cookies)
    page = r.body.decode()
    assert r.code == 200, page
    assert "kueue ClusterQueue team-ds missing &lt;b&gt;" in page
    assert "fix: <code>gpuhub render kueue f | kubectl apply -f -</code>" in page
    assert "2 checks: 1 ✓, 1 ✗" in page and "at most once a minute" in page
    r = await site.fetch("boss", "doctor", "POST", {"_xsrf": value}, cookies)
    assert r.code == 200 and site.calls.read_text() == "x"  # not run again


def test_pools_are_unknown_when_the_nodes_cannot_be_read():
    from jupyterhub_gpu.model.profiles_file import load_profiles

    cfg = load_profiles(EXAMPLE_PROFILES)
    assert all(p.ready is None and p.slots_total is None for p in pool_states(cfg, None, None).values())
    known = pool_states(cfg, NODES, None)["gput4"]
    assert (known.ready, known.cordoned, known.slots_total, known.slots_used) == (1, 1, 8, None)


@pytest.mark.parametrize("off", ["off", "false", "0", "No"])
def test_configure_runs_the_console_for_admins_only_and_turns_it_off(monkeypatch, tmp_path, off):
    from traitlets.config import Config

    from jupyterhub_gpu.config import configure
    from jupyterhub_gpu.services.admin.hub import ROLE, SCOPES, admin_enabled

    monkeypatch.chdir(tmp_path)
    for var in ("GPUHUB_ADMIN_CONSOLE", "GPUHUB_ADMIN_URL", "GPUHUB_USAGE"):
        monkeypatch.delenv(var, raising=False)
    c = Config()
    configure(c, str(EXAMPLE_PROFILES), services_host="hub")
    services = {s["name"]: s for s in c.JupyterHub.services}
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    page = services["gpu-admin"]
    assert page["url"] == "http://hub:10104" and page["oauth_no_confirm"]
    assert page["command"][1:3] == ["-m", "jupyterhub_gpu.services.admin.web"]
    assert f"--profiles-file={EXAMPLE_PROFILES}" in page["command"] and "--activity-interval=300" in page["command"]
    assert roles[ROLE] == {"name": ROLE, "scopes": SCOPES, "services": ["gpu-admin"]}
    # no role but JupyterHub's admin role (access:services) reaches it
    assert not any("gpu-admin" in s for r in c.JupyterHub.load_roles for s in r.get("scopes", []))
    once = (list(c.JupyterHub.services), list(c.JupyterHub.load_roles))
    configure(c, str(EXAMPLE_PROFILES), services_host="hub")
    assert (c.JupyterHub.services, c.JupyterHub.load_roles) == once  # twice: the same
    monkeypatch.setenv("GPUHUB_ADMIN_CONSOLE", off)
    configure(c, str(EXAMPLE_PROFILES), services_host="hub")
    assert "gpu-admin" not in {s["name"] for s in c.JupyterHub.services}
    assert ROLE not in {r["name"] for r in c.JupyterHub.load_roles}
    assert admin_enabled(True, {"GPUHUB_ADMIN_CONSOLE": off}) and not admin_enabled(False, {})
    off_c = Config()
    monkeypatch.delenv("GPUHUB_ADMIN_CONSOLE")
    configure(off_c, str(EXAMPLE_PROFILES), admin=False)
    assert "gpu-admin" not in {s["name"] for s in off_c.JupyterHub.services}


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [data-science]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return EXAMPLE_PROFILES.read_text().replace("profiles:", "\n".join(lines) + "\nprofiles:", 1).replace(
        "groups: [data-science, ml-research]", f"groups: *a{levels}", 1)


async def test_an_alias_bomb_hits_the_workers_memory_limit_and_the_worker_is_replaced(site):
    import time
    value, cookies = await site.form("boss")
    text = alias_bomb()
    assert "groups: *a9" in text
    site.console.worker = admin.Worker(timeout=20, memory=128 * 2**20)  # the limit, smaller: a few seconds
    started = time.monotonic()
    r = await site.fetch("boss", "dry-run", "POST", {"_xsrf": value, "profiles": text}, cookies, request_timeout=30)
    page = r.body.decode()
    assert r.code == 413, page
    assert "the file is too large to check: " in page and time.monotonic() - started < 15
    r = await site.fetch("boss", "dry-run", "POST", {"_xsrf": value, "profiles": EXAMPLE_PROFILES.read_text()},
                         cookies)
    assert r.code == 200 and "No difference from the loaded file" in r.body.decode()  # a new worker


def test_the_worker_limits_its_address_space_and_still_parses_the_example():
    import multiprocessing
    import resource
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=admin.limit_memory,
                             initargs=(admin.WORKER_MEMORY,)) as pool:
        soft = pool.submit(resource.getrlimit, resource.RLIMIT_AS).result(30)[0]
        cfg = pool.submit(admin.load, EXAMPLE_PROFILES.read_text()).result(30)
    assert soft != resource.RLIM_INFINITY and soft > admin.WORKER_MEMORY
    assert cfg.profiles


async def test_deep_nesting_overflow_and_other_crashes_are_answered_not_500(site, monkeypatch):
    value, cookies = await site.form("boss")
    r = await site.fetch("boss", "dry-run", "POST", {"_xsrf": value, "profiles": "[" * 5000}, cookies)
    assert r.code == 200 and "not valid YAML (nested too deeply)" in r.body.decode()
    text = EXAMPLE_PROFILES.read_text().replace("cpu: 2\n", 'cpu: "1e999999999"\n', 1)
    assert text != EXAMPLE_PROFILES.read_text()
    r = await site.fetch("boss", "dry-run", "POST", {"_xsrf": value, "profiles": text}, cookies)
    assert r.code == 200 and ".cpu: " in r.body.decode() and "problem(s)" in r.body.decode()

    async def broken(*args):
        raise KeyError("surprise")
    monkeypatch.setattr(site.console.worker, "run", broken)
    r = await site.fetch("boss", "dry-run", "POST", {"_xsrf": value, "profiles": "x: 1"}, cookies)
    assert r.code == 400 and "could not be checked: KeyError" in r.body.decode()


async def test_the_dry_run_reads_the_file_as_sent(site):
    value, cookies = await site.form("boss")
    text = EXAMPLE_PROFILES.read_text() + "# a bell \x07\n"
    r = await site.fetch("boss", "dry-run", "POST", {"_xsrf": value, "profiles": text}, cookies)
    assert r.code == 200 and "not valid YAML" in r.body.decode()
    body = f"_xsrf={value}&profiles=".encode() + b"%ff%fe"
    r = await site.fetch("boss", "dry-run", "POST", body, cookies)
    assert r.code == 400 and "not UTF-8" in r.body.decode()


async def test_the_doctor_runs_once_at_a_time_without_the_hubs_secrets_and_its_output_is_capped(tmp_path):
    import asyncio
    import time

    calls = tmp_path / "runs"
    child = (f"import os, time; open({str(calls)!r}, 'a').write('x'); time.sleep(1); "
             "print('token:', os.environ.get('JUPYTERHUB_API_TOKEN', 'none'), os.environ.get('JUPYTERHUB_API_URL'))")
    doctor = admin.Doctor([sys.executable, "-c", child], timeout=30, every=0)  # the minute's gap: not the guard here
    first = asyncio.ensure_future(doctor.run())
    await asyncio.sleep(0.3)
    assert doctor.running and await doctor.run() is None  # in flight: skipped, not a second child
    assert "A run is in progress" in admin.render.doctor_section("", doctor.result, doctor.wait(), doctor.running)
    result = await first
    assert calls.read_text() == "x" and not doctor.running
    assert "token: none http://127.0.0.1:9/hub/api" in result["output"]  # the URL kept, the token not passed

    flood = admin.Doctor([sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('y' * 65536)"], timeout=30)
    started = time.monotonic()
    result = await flood.run()
    assert time.monotonic() - started < 10 and "output over 64 KiB: stopped" in result["output"]
    assert len(result["output"]) < admin.MAX_OUTPUT + 100
