"""GPUSpawner: KubeSpawner whose profiles come from the admin's profiles file.

It only plugs into KubeSpawner's own extension points: `profile_list` (a callable filtered by the
user's groups), `options_from_form` / `load_user_options` (refuse a profile the user may not
use, before anything is created) and `get_pod_manifest` (a last guard on tolerations).
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kubespawner import KubeSpawner
from kubespawner.clients import shared_client
from tornado import web
from traitlets import Bool, Unicode, default

from gpu_spawner.hub import progress as explain
from gpu_spawner.hub import metrics
from gpu_spawner.hub import picker
from gpu_spawner.builders import pods as podspec
from gpu_spawner.hub.capacity import ClusterState
from gpu_spawner.hub.informers import CapacityInformers
from gpu_spawner.model.profiles import Profile, ProfilesConfig
from gpu_spawner.model.profiles_file import cached_profiles, profiles_path

#: Trait values that are lists: a profile adds to what the admin configured instead of replacing it.
_APPENDED_LISTS = ("volumes", "volume_mounts", "tolerations")


class SpawnImpossible(web.HTTPError):
    """Waiting is pointless: no node could ever fit the pod (409), or its GPU is not usable (503)."""

    def __init__(self, message: str, status: int = 409):
        super().__init__(status, log_message=message, reason="Server cannot start")
        self.jupyterhub_message = message

    def __str__(self) -> str:  # JupyterHub shows str(e) to the user: the sentence, not "HTTP 409: ..."
        return self.log_message


class ProfileNotAllowed(web.HTTPError, ValueError):
    """A choice this user may not make: 403 from the form and the REST API, before anything is created."""

    def __init__(self, message: str):
        super().__init__(403, log_message=message, reason="Profile not allowed")
        self.jupyterhub_message = message


class GPUSpawner(KubeSpawner):
    """Spawns single-user servers onto GPU pools described by a profiles file."""

    profiles_file = Unicode(
        config=True,
        help="""Path of the profiles file (pools, profiles, teams).

        Defaults to $GPUHUB_PROFILES, else the example file shipped with jupyterhub-gpu.
        The hub refuses to start when the file has problems; `gpuhub validate FILE` lists them.
        """,
    )

    @default("profiles_file")
    def _profiles_file_default(self) -> str:
        return str(profiles_path())

    live_capacity = Bool(
        True,
        config=True,
        help="""Show live free capacity in the profile picker and explain Pending spawns with it.

        Uses one shared watch of nodes and pods per hub (never an API call per page render); the
        hub's service account needs list/watch on nodes and pods cluster-wide.
        """,
    )

    _informers: CapacityInformers | None = None
    _informers_lock: asyncio.Lock | None = None

    @property
    def profiles(self) -> ProfilesConfig:
        return cached_profiles(self.profiles_file)

    @default("profile_list")
    def _profile_list_default(self):
        return GPUSpawner.allowed_profile_list

    @default("additional_profile_form_template_paths")
    def _template_paths_default(self):
        return [str(Path(__file__).parent / "templates")]

    _form_env = None

    def _render_options_form(self, profile_list):
        """KubeSpawner's form render, with the template compiled once per process instead of per page."""
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

    async def cluster_state(self) -> ClusterState | None:
        """The hub's shared ClusterState, started on first use (None when live capacity is off)."""
        if not self.live_capacity:
            return None
        cls = GPUSpawner
        if cls._informers_lock is None:
            cls._informers_lock = asyncio.Lock()
        async with cls._informers_lock:
            inf = cls._informers
            if inf is None or inf.state.cfg is not self.profiles:
                if inf is not None:
                    await inf.stop()
                inf = CapacityInformers(self.profiles, shared_client("CoreV1Api"))
                await inf.start()
                cls._informers = inf
                metrics.watch_state(lambda: cls._informers.state if cls._informers else None)
        return inf.state

    # ------------------------------------------------------------------ who may use what
    def user_groups(self) -> list[str]:
        groups = getattr(self.user, "groups", None) or []
        return [getattr(g, "name", g) for g in groups]

    def allowed_profiles(self) -> list[Profile]:
        return self.profiles.profiles_for(self.user_groups())

    @staticmethod
    async def allowed_profile_list(spawner: "GPUSpawner") -> list[dict[str, Any]]:
        """KubeSpawner's `profile_list`: this user's profiles, with live capacity for the picker."""
        chosen = getattr(spawner, "_loading_options", None)
        if chosen is not None:
            # starting a server: only the (already checked) choice matters, and no capacity is needed
            return [picker.profile_entry(spawner.profiles, chosen, True, None)]
        allowed = spawner.allowed_profiles()
        has_default = any(p.default for p in allowed)
        state = await spawner.cluster_state()
        return [
            picker.profile_entry(spawner.profiles, p, p.default or (not has_default and i == 0),
                                 state.profile_capacity(p) if state else None)
            for i, p in enumerate(allowed)
        ]

    def check_profile_choice(self, user_options: dict[str, Any]) -> Profile:
        """The profile these options choose, if this user may use it; else ValueError saying why."""
        unknown = sorted(k for k in user_options if k != "profile")
        if unknown:
            raise ValueError(f"Unknown server option(s) {', '.join(map(repr, unknown))}: profiles of this hub "
                             "take no options besides 'profile'.")
        allowed = self.allowed_profiles()
        if not allowed:
            raise ValueError(f"No profile is available to {self.user.name}; ask an admin to add you to a group.")
        slug = user_options.get("profile")
        if not slug:
            return next((p for p in allowed if p.default), allowed[0])
        if not isinstance(slug, str) or slug not in self.profiles.by_slug:
            raise ValueError(f"There is no profile {slug!r}. Choose one of: "
                             f"{', '.join(p.slug for p in allowed)}.")
        profile = self.profiles.by_slug[slug]
        if profile not in allowed:
            raise ValueError(f"Profile {slug!r} is not available to {self.user.name}: it is for members of "
                             f"{', '.join(profile.groups or [])}. Choose one of: "
                             f"{', '.join(p.slug for p in allowed)}.")
        return profile

    # ------------------------------------------------------------------ KubeSpawner hooks
    def _options_from_form(self, formdata):
        options = super()._options_from_form(formdata)
        try:
            self.check_profile_choice(options)
        except ValueError as e:
            raise ProfileNotAllowed(str(e)) from None
        return options

    async def load_user_options(self):
        try:
            self.gpu_profile = self.check_profile_choice(self.user_options or {})
        except ProfileNotAllowed:
            raise
        except ValueError as e:
            raise ProfileNotAllowed(str(e)) from None
        before = {k: list(getattr(self, k)) for k in _APPENDED_LISTS}
        self._loading_options = self.gpu_profile
        self.user_options = {**(self.user_options or {}), "profile": self.gpu_profile.slug}
        try:
            await super().load_user_options()
        finally:
            self._loading_options = None
        for key in _APPENDED_LISTS:
            added = getattr(self, key)
            if added is not before[key]:
                setattr(self, key, before[key] + [v for v in added if v not in before[key]])

    async def get_pod_manifest(self):
        pod = await super().get_pod_manifest()
        self.add_readiness_probe(pod)
        return self.guard_pod(pod)

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
        pool = self.profiles.pool_of(profile)
        own = {(t.key, t.value, t.effect) for t in (pool.effective_taints if pool else [])}
        foreign = [t for t in self.profiles.gpu_taints() if (t.key, t.value, t.effect) not in own]
        tols = pod.spec.tolerations or []
        as_dict = [t if isinstance(t, dict) else t.to_dict() for t in tols]
        pod.spec.tolerations = [t for t, d in zip(tols, as_dict)
                                if not any(podspec.tolerates(d, taint) for taint in foreign)] or None
        return pod

    # ------------------------------------------------------------------ progress in plain language
    async def progress(self):
        state = await self.cluster_state()
        profile = getattr(self, "gpu_profile", None)
        async for event in super().progress():
            raw = event.get("raw_event")
            if raw:
                plain = explain.explain_event(raw, profile, state)
                if plain:
                    event = {**event, "message": plain}
            yield event

    def is_pod_running(self, pod):
        """KubeSpawner polls this until the pod runs; raising ends the wait early with a clear message."""
        if super().is_pod_running(pod):
            return True
        failure = explain.container_failure(pod)
        if failure:
            raise SpawnImpossible(failure, status=503)
        profile = getattr(self, "gpu_profile", None)
        inf = GPUSpawner._informers
        if pod and profile and inf and not (pod.get("spec") or {}).get("nodeName") and any(
            e.get("reason") == "FailedScheduling" for e in self.events
        ):
            reason = explain.never_fits(profile, inf.state)
            if reason:
                raise SpawnImpossible(reason)
        return False
