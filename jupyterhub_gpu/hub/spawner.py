"""GPUSpawner: KubeSpawner whose profiles come from the admin's profiles file.

It only plugs into KubeSpawner's own extension points: `profile_list` (a callable filtered by the
user's groups, with each profile's `options` as KubeSpawner `profile_options`), `options_from_form` /
`load_user_options` (refuse a profile or choice the user may not make, before anything is created) and
`get_pod_manifest` (a last guard on tolerations). Without a profiles file it is exactly KubeSpawner.
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from kubespawner import KubeSpawner
from kubespawner.clients import shared_client
from tornado import web
from traitlets import Bool, Unicode, default

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.builders import pods as podspec
from jupyterhub_gpu.builders.hardening import server_container_security_context, server_pod_security_context
from jupyterhub_gpu.builders.identity import pod_identity, server_annotations
from jupyterhub_gpu.builders.kueue import server_queue_labels
from jupyterhub_gpu.builders.storage import home_folder_container
from jupyterhub_gpu.contract import ENV_PROFILE_OPTIONS
from jupyterhub_gpu.hub import metrics, picker
from jupyterhub_gpu.hub import progress as explain
from jupyterhub_gpu.hub.capacity import ClusterState
from jupyterhub_gpu.hub.device_claim import add_device_claim
from jupyterhub_gpu.hub.gpu_faults import AvoidFailingGPUs, avoid_nodes
from jupyterhub_gpu.hub.informers import CapacityInformers
from jupyterhub_gpu.hub.pod_reflector import SharedPodReflector
from jupyterhub_gpu.hub.pool_history_file import HistoryFile
from jupyterhub_gpu.hub.pool_wait_estimate import PoolHistory, progress_line
from jupyterhub_gpu.hub.preemption import PreemptionMixin, StopReasons
from jupyterhub_gpu.hub.queued_spawn import QueuedSpawnMixin, is_patience, merged
from jupyterhub_gpu.hub.usage_hints import SCRAPE_INTERVAL, PickerHints, StoreAndPrometheus
from jupyterhub_gpu.model.choices import UNLISTED_FORM_VALUE, UNLISTED_SUFFIX, ChoiceError, Chosen, choose
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig
from jupyterhub_gpu.model.profiles_file import cached_profiles, profiles_path
from jupyterhub_gpu.services.usage import hub as usage_env

#: Trait values a profile adds to instead of replacing what the admin configured. KubeSpawner >= 7 takes each
#: as a list or as a dict of name -> entry (z2jh writes dicts); the admin's form is kept (see `appended`).
_APPENDED_LISTS = ("volumes", "volume_mounts", "tolerations")
#: Keys of the entries a profile adds to a dict-form setting (KubeSpawner sorts dict values by key).
APPENDED_KEY_PREFIX = "gpuhub-"
#: Our picker template (form.html), used unless the admin sets `profile_form_template`.
FORM_TEMPLATES = Path(__file__).parent / "templates"
#: The admin's KubeSpawner settings a profile falls back to when it does not set them (see README).
_ADMIN_RESOURCES = ("cpu_guarantee", "cpu_limit", "mem_guarantee", "mem_limit")


def appended(admin: list | dict, added: list | dict) -> list | dict:
    """The admin's volumes / mounts / tolerations plus what a profile adds, in the admin's form: a list grows by
    the new entries; a dict (z2jh's form) gets them under `gpuhub-<n>` keys. An entry already there is not
    added twice."""
    if isinstance(admin, dict) and isinstance(added, dict):
        return {**admin, **added}  # both by name: KubeSpawner's own merge of a dict override
    new = list(added.values()) if isinstance(added, dict) else list(added)
    if not isinstance(admin, dict):
        return list(admin) + [v for v in new if v not in admin]
    merged, have = dict(admin), list(admin.values())
    for entry in new:
        if entry not in have:
            have.append(entry)
            key = next(k for k in (f"{APPENDED_KEY_PREFIX}{i}" for i in range(len(merged) + 1)) if k not in merged)
            merged[key] = entry
    return merged


def chart_empty_profile_list(profile_list) -> bool:
    """True for the empty list a chart writes when its admin set no profiles (z2jh's `singleuser.profileList:
    []`): that is "unset", not a list that competes with the profiles file."""
    return isinstance(profile_list, (list, tuple)) and not profile_list


def profile_list_conflict(profiles_file, profile_list) -> str | None:
    """Why a profiles file and an admin's `profile_list` cannot be configured together (None if they are not)."""
    if not profiles_file or not profile_list:
        return None
    return (f"both GPUSpawner.profiles_file ({profiles_file}, also $GPUHUB_PROFILES) and KubeSpawner.profile_list "
            "are set. The profiles file makes the profile list; move your profiles into the file (options inside "
            "a profile map onto KubeSpawner's profile_options) or unset one of the two settings.")


def _copied(value: list | dict) -> list | dict:
    return dict(value) if isinstance(value, dict) else list(value)


class SpawnImpossible(web.HTTPError):
    """Waiting is pointless: no node could ever fit the pod (409), or its GPU is not usable (503).
    `html`: the spawn page's version of the message (JupyterHub's jupyterhub_html_message)."""

    def __init__(self, message: str, status: int = 409, html: str | None = None):
        super().__init__(status, log_message=message, reason="Server cannot start")
        self.jupyterhub_message = message
        if html:
            self.jupyterhub_html_message = html

    def __str__(self) -> str:  # JupyterHub shows str(e) to the user: the sentence, not "HTTP 409: ..."
        return self.log_message


class ProfileNotAllowed(web.HTTPError, ValueError):
    """A choice this user may not make: 403 from the form and the REST API, before anything is created."""

    def __init__(self, message: str):
        super().__init__(403, log_message=message, reason="Profile not allowed")
        self.jupyterhub_message = message


class GPUSpawner(QueuedSpawnMixin, PreemptionMixin, AvoidFailingGPUs, KubeSpawner):
    """Spawns single-user servers onto GPU pools described by a profiles file."""

    profiles_file = Unicode(
        config=True,
        help="""Path of the profiles file (pools, profiles, teams).

        Defaults to $GPUHUB_PROFILES. Without one GPUSpawner is exactly a KubeSpawner (its own
        `profile_list` and every other option). The hub refuses to start when the file has problems
        (`gpuhub validate FILE` lists them) or when `profile_list` is set as well.
        """,
    )

    gpu_check_init_container = Bool(
        True,
        config=True,
        help="""Run the GPU health check as an init container of GPU profiles' pods (`gpuhub-gpu-check`:
        `gpuhub-singleuser --gpu-check-only` in the server's image, no home mounted), so that no file of
        the user's can forge its verdict; only that verdict marks a node's GPU as failing.

        Needs `gpuhub-singleuser` in every GPU profile's image (the singleuser image has it). False: no
        init container, and no failed check ever marks a node.
        """,
    )
    create_home_folders = Bool(
        True,
        config=True,
        help="""Create the server's home folder on the share (its subPath) as the server's own user, in an init
        container (`gpuhub-home-folder`), before the kubelet mounts it: a kubelet makes a missing subPath folder
        owned by root, and a new user's server (uid 1000) then crash-loops on a home it cannot write. Needs the
        share's top folder writable by the users (docs/admin-guide.md, step 6). Off: the admin creates homes.""",
    )

    pool_history_file = Unicode(
        "gpuhub-pool-history.json",
        config=True,
        help="""Where the full pools' wait history (the picker's "usually frees in ~12 min") is kept across
        hub restarts, relative to the hub's working folder (z2jh: /srv/jupyterhub, the hub-db volume).

        Written at most once a minute after a change; "" keeps it in memory only (after a restart the
        picker says "no estimate yet" until enough servers have waited again).
        """,
    )

    @default("profiles_file")
    def _profiles_file_default(self) -> str:
        return str(profiles_path() or "")

    live_capacity = Bool(
        True,
        config=True,
        help="""Show live free capacity in the profile picker and explain Pending spawns with it.

        Uses one shared watch of nodes and pods per hub (never an API call per page render); the
        hub's service account needs list/watch on nodes and pods cluster-wide.
        """,
    )

    _informers: CapacityInformers | None = None
    _pool_history: PoolHistory | None = None  # full pools' wait estimate: a view of the same pod watch
    _informers_lock: asyncio.Lock | None = None
    _said_plain = False  # the "no profiles file" line is logged once per process

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        metrics.guard_loop()  # the hub's loop: its stalls at /hub/metrics (a spawner is made on it)
        if not self.profiles_file:
            if not GPUSpawner._said_plain:
                GPUSpawner._said_plain = True
                self.log.info("GPUSpawner: no profiles file (GPUSpawner.profiles_file, $GPUHUB_PROFILES): running "
                              "as a plain KubeSpawner")
            return
        if chart_empty_profile_list(self.profile_list):
            self.profile_list = GPUSpawner.allowed_profile_list  # z2jh's `profileList: []`: the file makes the list
        self.refuse_admin_profile_list()

    @property
    def profiles(self) -> ProfilesConfig:
        return cached_profiles(self.profiles_file)

    @default("profile_list")
    def _profile_list_default(self):
        return GPUSpawner.allowed_profile_list if self.profiles_file else []  # KubeSpawner's own default

    def refuse_admin_profile_list(self) -> None:
        """A profiles file and an admin's `profile_list` together: fail loudly, never accept-then-refuse."""
        if self.trait_has_value("profile_list") and self.profile_list is not GPUSpawner.allowed_profile_list:
            message = profile_list_conflict(self.profiles_file, self.profile_list)
            if message:
                raise ValueError(message)

    # Servers pass Pod Security `restricted`, like Job pods (the same hardening): KubeSpawner and z2jh set the
    # uid (1000) and no privilege escalation, not these. An admin's own context replaces them (KubeSpawner merges
    # these keys over uid, fs_gid and allow_privilege_escalation).
    @default("container_security_context")
    def _container_security_context_default(self):
        return server_container_security_context() if self.profiles_file else {}

    @default("pod_security_context")
    def _pod_security_context_default(self):
        return server_pod_security_context() if self.profiles_file else {}

    @default("additional_profile_form_template_paths")
    def _template_paths_default(self):
        return [str(FORM_TEMPLATES)] if self.profiles_file else []

    _form_env = None

    def _render_options_form(self, profile_list):
        """KubeSpawner's form render, with our template compiled once per process instead of per page;
        KubeSpawner's own when there is no profiles file or the admin set `profile_form_template`."""
        if not self.profiles_file or self.profile_form_template:
            return super()._render_options_form(profile_list)
        from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PackageLoader

        cls = GPUSpawner
        if cls._form_env is None:
            cls._form_env = Environment(loader=ChoiceLoader([
                FileSystemLoader(self.additional_profile_form_template_paths),
                PackageLoader("kubespawner", "templates")]), autoescape=True)
        profile_list = self._get_initialized_profile_list(profile_list)
        user_options = self.user_options or {}
        try:
            self._validate_user_options(profile_list)
        except ValueError:
            user_options = {}  # stale or forged: do not pre-select from it
        return cls._form_env.get_template("form.html").render(profile_list=profile_list, user_options=user_options)

    async def capacity_informers(self) -> CapacityInformers:
        """The hub's one node + pod watch (`CapacityInformers`), started on first use; after a change of
        the profiles file it is refilled for the new pools, never restarted from nothing."""
        cls = GPUSpawner
        if cls._informers_lock is None:
            cls._informers_lock = asyncio.Lock()
        async with cls._informers_lock:
            inf = cls._informers
            if inf is None:
                inf = cls._informers = CapacityInformers(self.profiles, shared_client("CoreV1Api"),
                                                         custom=shared_client("CustomObjectsApi"),
                                                         resource=shared_client("ResourceV1Api"))
                cls._pool_history = PoolHistory(lambda: cls._informers.state.cfg)
                if self.pool_history_file:  # read back before the relist: the pods of most of it are gone
                    await HistoryFile(self.pool_history_file).load(cls._pool_history)
                cls._pool_history.watch(inf)  # a view of the same pod and node watches: no request of its own
                cls.stop_reasons = StopReasons()  # Kueue's stops (preemptions), another view
                inf.attach(cls.stop_reasons)
                metrics.watch_state(lambda: cls._informers.state if cls._informers else None)
                await inf.start()  # not synced in time: the picker says "unknown" until it is
            elif inf.state.cfg is not self.profiles:
                inf.reconfigure(self.profiles)
        return inf

    async def cluster_state(self) -> ClusterState | None:
        """The hub's shared ClusterState (None when live capacity is off). It may be stale: its
        `profile_capacity` then says unknown."""
        if not self.live_capacity or not self.profiles_file:
            return None
        return (await self.capacity_informers()).state

    async def _start_watching_pods(self, replace=False):
        """KubeSpawner's pod reflector, as a view of the shared pod informer: one pod watch per hub."""
        if not self.live_capacity or not self.profiles_file:
            return await super()._start_watching_pods(replace)
        informers = await self.capacity_informers()
        return await self._start_reflector(kind="pods", reflector_class=SharedPodReflector, replace=replace,
                                           labels={"component": self.component_label},
                                           omit_namespace=self.enable_user_namespaces, informers=informers)

    # ------------------------------------------------------------------ who may use what
    def user_groups(self) -> list[str]:
        groups = getattr(self.user, "groups", None) or []
        return [getattr(g, "name", g) for g in groups]

    def allowed_profiles(self) -> list[Profile]:
        return self.profiles.profiles_for(self.user_groups())

    def admin_resources(self) -> dict[str, Any]:
        """The admin's CPU and memory settings, before any profile applies (what a profile does not set)."""
        return {k: getattr(self, k) for k in _ADMIN_RESOURCES}

    @staticmethod
    async def allowed_profile_list(spawner: "GPUSpawner") -> list[dict[str, Any]]:
        """KubeSpawner's `profile_list`: this user's profiles and option choices, with live capacity for the picker."""
        groups, admin = spawner.user_groups(), spawner.admin_resources()
        chosen = getattr(spawner, "_loading_options", None)
        if chosen is not None:
            # starting a server: only the (already checked) choice matters, and no capacity is needed
            return [picker.profile_entry(spawner.profiles, chosen.profile, True, None, groups, admin)]
        allowed = spawner.allowed_profiles()
        has_default = any(p.default for p in allowed)
        state = await spawner.cluster_state()
        history = GPUSpawner._pool_history if state else None
        teams = GPUSpawner._informers.teams if state else None  # the ClusterQueue watch: queued profiles' team line
        hints = await spawner.usage_hints({p.slug for p in allowed})
        return [
            picker.profile_entry(spawner.profiles, p, p.default or (not has_default and i == 0),
                                 state.profile_capacity(p) if state else None, groups, admin,
                                 eta=history.picker_eta(p) if history else None,
                                 degraded=spawner.pool_failing_note(p.pool), hint=hints.get(p.slug),
                                 team=teams.view(spawner.profiles, p, groups) if teams else None)
            for i, p in enumerate(allowed)
        ]

    _usage_hints: PickerHints | None = None

    async def usage_hints(self, allowed: set[str]) -> dict[str, str]:
        """This user's right-sizing line per profile (`PickerHints`), when the usage store and Prometheus are
        configured as for the usage page; {} otherwise or on any failure."""
        env = os.environ
        prometheus = usage_env.prometheus_url(env)
        if not prometheus or not usage_env.usage_enabled(None, env):
            return {}
        cls = GPUSpawner
        if cls._usage_hints is None:
            store = os.path.abspath(env.get(usage_env.ENV_STORE) or "gpuhub-usage")
            cls._usage_hints = PickerHints(lambda path=self.profiles_file: cached_profiles(path),
                                           StoreAndPrometheus(store, prometheus, SCRAPE_INTERVAL))
        try:
            return await cls._usage_hints.for_user(self.user.name, allowed)
        except Exception as e:  # never fail the picker over a hint
            self.log.warning("right-sizing hints: %s: %s", type(e).__name__, e)
            return {}

    def check_profile_choice(self, user_options: dict[str, Any]) -> Chosen:
        """The profile and option choices these options make, if this user may make them; else ValueError."""
        return choose(self.profiles, self.user.name, self.user_groups(), user_options)

    # ------------------------------------------------------------------ KubeSpawner hooks
    def _options_from_form(self, formdata):
        options = super()._options_from_form(formdata)
        if not self.profiles_file:
            return options
        # without JavaScript the form sends both an option's <select> and its text field: keep the one meant
        for key in [k for k in options if k.endswith(UNLISTED_SUFFIX)]:
            option = key[: -len(UNLISTED_SUFFIX)]
            if options.get(option) == UNLISTED_FORM_VALUE and options[key]:
                del options[option]
            elif options.get(option) is not None or not options[key]:
                del options[key]
        try:
            self.check_profile_choice(options)
        except ChoiceError as e:
            raise ProfileNotAllowed(str(e)) from None
        return options

    async def load_user_options(self):
        if not self.profiles_file:
            return await super().load_user_options()
        self.refuse_admin_profile_list()
        try:
            chosen = self.check_profile_choice(self.user_options or {})
        except ChoiceError as e:
            raise ProfileNotAllowed(str(e)) from None
        self.gpu_profile, self.gpu_choices = chosen.profile, chosen
        before = {k: _copied(getattr(self, k)) for k in _APPENDED_LISTS}
        self._loading_options = chosen
        self.user_options = {**chosen.options, "profile": chosen.profile.slug}
        try:
            await super().load_user_options()
        finally:
            self._loading_options = None
        for key in _APPENDED_LISTS:
            added = getattr(self, key)
            if added != before[key]:
                setattr(self, key, appended(before[key], added))
        if chosen.options:  # `%gpu_submit` in this server runs its jobs with the same choices (same image);
            # a query string: KubeSpawner expands {braces} in env values
            self.environment = {**self.environment, ENV_PROFILE_OPTIONS: urlencode(chosen.options)}

    async def get_pod_manifest(self):
        pod = await super().get_pod_manifest()
        if not self.profiles_file:
            return pod
        self.add_readiness_probe(pod)
        add_device_claim(self.profiles, getattr(self, "gpu_profile", None), pod)  # before the GPU check: it copies
        # the server's resources, and so its claim
        self.add_gpu_check(pod)
        self.add_home_folder(pod)  # after the check: a server whose GPU is missing creates nothing
        self.add_queue_labels(pod)
        self.add_preemption_notice(pod)  # after the labels: a preemptible server's grace period and env
        self.add_team_identity(pod)
        return avoid_nodes(self.guard_pod(pod), *self.nodes_to_avoid())  # nodes whose GPU check just failed

    def add_queue_labels(self, pod):
        """A GPU server waits in its team's Kueue queue (the admin's choice per profile or pool): Kueue's
        pod integration gates it until its team's quota, borrowing included, has room, at its priority."""
        profile = getattr(self, "gpu_profile", None)
        labels = server_queue_labels(self.profiles, profile, self.user_groups()) if profile else {}
        if labels:
            pod.metadata.labels = {**(pod.metadata.labels or {}), **labels}

    def add_team_identity(self, pod):
        """The user's team's workload identity, if it has one (builders/identity.py): its ServiceAccount, no
        Kubernetes API token, the webhook's label; an admin's `service_account` stays for teams without one."""
        ident = pod_identity(self.profiles, self.user_groups())
        if ident is not None:
            pod.spec.service_account_name, pod.spec.automount_service_account_token = ident.service_account, False
            pod.metadata.labels = {**(pod.metadata.labels or {}), **ident.labels}
            pod.metadata.annotations = {**(pod.metadata.annotations or {}), **server_annotations()}

    def add_gpu_check(self, pod):
        """GPU profiles: the GPU check runs first, as an init container with no home mounted,
        so its verdict (its own termination message, read in is_pod_running) is out of the user's reach."""
        from kubernetes_asyncio.client import V1Container
        from kubespawner.utils import get_k8s_model

        profile = getattr(self, "gpu_profile", None)
        if profile is None or profile.gpu is None or not self.gpu_check_init_container:
            return
        server = self.api.api_client.sanitize_for_serialization(pod.spec.containers[0])
        check = get_k8s_model(V1Container, podspec.gpu_check_container(server))
        pod.spec.init_containers = [*(pod.spec.init_containers or []), check]

    def add_home_folder(self, pod):
        """A new user's home folder on the share, made as the server's user (builders/storage.py)."""
        from kubernetes_asyncio.client import V1Container
        from kubespawner.utils import get_k8s_model

        if not self.create_home_folders:
            return
        sanitize = self.api.api_client.sanitize_for_serialization
        made = home_folder_container(sanitize(pod.spec.containers[0]), sanitize(pod.spec.volumes or []))
        if made is not None:
            pod.spec.init_containers = [*(pod.spec.init_containers or []), get_k8s_model(V1Container, made)]

    def add_readiness_probe(self, pod):
        """Ready only once Jupyter answers: the GPU health check runs before it, so a pod whose GPU is
        missing never looks ready, and its exit message reaches the user (see is_pod_running)."""
        from kubernetes_asyncio.client import V1HTTPGetAction, V1Probe

        server = getattr(self, "server", None)
        container = pod.spec.containers[0]
        if container.readiness_probe is None and server is not None:
            container.readiness_probe = V1Probe(
                http_get=V1HTTPGetAction(path=f"{server.base_url}api", port=self.port),
                period_seconds=2, timeout_seconds=2, failure_threshold=3)

    def guard_pod(self, pod):
        """Tolerate exactly the chosen pool's taints: no admin default or wildcard may let a pod (and never a
        CPU pod) onto another GPU pool."""
        profile = getattr(self, "gpu_profile", None)
        if profile is None:
            return pod
        pools = dra.placement_choices(self.profiles, profile) if profile.gpu else [self.profiles.pool_of(profile)]
        own = {(t.key, t.value, t.effect) for pool in pools if pool for t in pool.effective_taints}
        foreign = [t for t in self.profiles.gpu_taints() if (t.key, t.value, t.effect) not in own]
        tols = pod.spec.tolerations or []
        as_dict = [t if isinstance(t, dict) else t.to_dict() for t in tols]
        pod.spec.tolerations = [t for t, d in zip(tols, as_dict)
                                if not any(podspec.tolerates(d, taint) for taint in foreign)] or None
        return pod

    # ------------------------------------------------------------------ progress in plain language
    async def progress(self):
        if not self.profiles_file:
            async for event in super().progress():
                yield event
            return
        state = await self.cluster_state()
        profile = getattr(self, "gpu_profile", None)
        async for event in merged(super().progress(), self.queue_events()):
            raw = event.get("raw_event")
            if raw:
                plain = explain.explain_event(raw, profile, state)
                if plain and raw.get("reason") == "FailedScheduling":
                    plain = progress_line(plain, self.pool_eta(profile, state))
                if plain:
                    event = {**event, "message": plain}
            elif is_patience(event) and not (event := explain.node_add_event(state, profile, self.namespace,
                                                                             self.pod_name)):
                continue  # KubeSpawner's "Please be patient": the page shows the time waited itself
            self._headline = event.get("message") or self._headline
            yield event

    def pool_eta(self, profile, state):
        """The wait estimate of this server's waiting pod when its pool is full (`PoolHistory`), else None."""
        history = GPUSpawner._pool_history
        if history is None or profile is None or state is None or not state.profile_capacity(profile).full:
            return None
        pod = self.pod_reflector.pods.get(f"{self.namespace}/{self.pod_name}") if self.pod_reflector else None
        return history.pod_eta(((pod or {}).get("metadata") or {}).get("uid"), profile)

    def is_pod_running(self, pod):
        """KubeSpawner polls this until the pod runs; raising ends the wait early with a clear message."""
        running = super().is_pod_running(pod)
        if running and self.profiles_file:
            self.gpu_check_passed(pod)  # a node that failed before works again
        if running or not self.profiles_file:
            return running
        if gpu := explain.gpu_check_failure(pod):  # the init container's verdict: short message first, node kept
            text, page = self.record_gpu_failure(pod, gpu)
            raise SpawnImpossible(text, status=503, html=page)
        failure = explain.container_failure(pod)
        if failure:
            raise SpawnImpossible(failure, status=503)
        self.check_deadlines(pod)
        profile = getattr(self, "gpu_profile", None)
        inf = GPUSpawner._informers
        if pod and profile and inf and not inf.stale and not (pod.get("spec") or {}).get("nodeName") and any(
            e.get("reason") == "FailedScheduling" for e in self.events
        ):
            reason = explain.never_fits(profile, inf.state)
            if reason:
                raise SpawnImpossible(reason)
        return False
