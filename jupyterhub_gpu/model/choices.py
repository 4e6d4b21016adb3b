"""Which profile and option choices a user's `user_options` make, checked against the user's groups (pure).

One rule for the hub (a forged or unlisted choice is a 403 before any pod exists) and for the gpu-jobs
service (a job runs in the server's image unless the user picks another allowed one). The keys are
KubeSpawner's own: `profile`, `<option>` (a choice's key) and `<option>--unlisted-choice` (a typed value).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from jupyterhub_gpu.contract import UNLISTED_CHOICE_SUFFIX
from jupyterhub_gpu.model.profiles import Profile, ProfileOption, ProfilesConfig

UNLISTED_SUFFIX = UNLISTED_CHOICE_SUFFIX
#: What the option's <select> sends for "Other..." (KubeSpawner's form uses the same value).
UNLISTED_FORM_VALUE = "unlisted-choice"
#: Longest typed value accepted (an image reference is far shorter).
MAX_VALUE_LENGTH = 512


class ChoiceError(ValueError):
    """A choice this user may not make; the hub answers 403, the gpu-jobs service 400."""


@dataclass(frozen=True)
class Chosen:
    profile: Profile
    #: option → choice key, or `<option>--unlisted-choice` → typed value; every option of the profile
    options: dict[str, str] = field(default_factory=dict)
    #: KubeSpawner traits the choices set, in option order (later options win)
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def image(self) -> str | None:
        """The image the server runs, when the profile or a choice names one (else the admin's default)."""
        return self.overrides.get("image") or self.profile.image


def _shorten(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _format(value: Any, typed: str) -> Any:
    """KubeSpawner's `{value}` substitution into every string of an override."""
    if isinstance(value, str):
        return value.format(value=typed)
    if isinstance(value, dict):
        return {k: _format(v, typed) for k, v in value.items()}
    return value


def default_choice_for(option: ProfileOption, groups: list[str]) -> str:
    """The option's default if this user may pick it, else the first choice they may pick."""
    allowed = option.choices_for(groups)
    return option.default_choice if option.default_choice in allowed else next(iter(allowed))


def _check_option(profile: Profile, name: str, option: ProfileOption, user: str, groups: list[str],
                  options: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(user_options key, value, traits) for one option of the chosen profile."""
    key_unlisted = name + UNLISTED_SUFFIX
    picked, typed = options.get(name), options.get(key_unlisted)
    where = f"option {name!r} of profile {profile.slug!r}"
    if picked == UNLISTED_FORM_VALUE:
        if typed in (None, ""):
            raise ChoiceError(f"{where}: you chose a value of your own but typed none")
        picked = None
    elif picked is not None and typed is not None:
        raise ChoiceError(f"{where}: give either {name!r} or {key_unlisted!r}, not both")
    if typed is not None:
        unlisted = option.unlisted_for(groups)
        if unlisted is None:
            if option.unlisted_choice is None:
                raise ChoiceError(f"{where} takes no typed value; choose one of: "
                                  f"{', '.join(option.choices_for(groups))}")
            raise ChoiceError(f"{where}: typed values are for members of {', '.join(option.unlisted_choice.groups)}, "
                              f"not {user}; choose one of: {', '.join(option.choices_for(groups))}")
        if not isinstance(typed, str) or not typed or len(typed) > MAX_VALUE_LENGTH \
                or not re.fullmatch(unlisted.validation_regex, typed):
            hint = unlisted.validation_message or f"it must match {unlisted.validation_regex}"
            raise ChoiceError(f"{where}: {_shorten(typed)} is not allowed: {hint}")
        return key_unlisted, typed, _format(unlisted.kubespawner_override.traits(), typed)
    allowed = option.choices_for(groups)
    if picked is None:
        picked = default_choice_for(option, groups)
    if not isinstance(picked, str) or picked not in option.choices:
        raise ChoiceError(f"{where}: there is no choice {_shorten(picked)}; choose one of: {', '.join(allowed)}")
    if picked not in allowed:
        raise ChoiceError(f"{where}: {picked!r} is for members of {', '.join(option.choices[picked].groups or [])}, "
                          f"not {user}; choose one of: {', '.join(allowed)}")
    return name, picked, option.choices[picked].kubespawner_override.traits()


def check_options(profile: Profile, user: str, groups: list[str], options: dict[str, Any]) -> Chosen:
    """The choices `options` (user_options without `profile`) make on `profile`, or ChoiceError saying why not."""
    if not isinstance(options, dict):
        raise ChoiceError(f"options must be a JSON object of option name to choice; got {_shorten(options)}")
    known = set(profile.options) | {n + UNLISTED_SUFFIX for n in profile.options}
    unknown = sorted(str(k) for k in options if k not in known)
    if unknown:
        takes = f"its options: {', '.join(profile.options)}" if profile.options else "it takes no options"
        shown = ", ".join(map(_shorten, unknown[:5])) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise ChoiceError(f"Unknown server option(s) {shown} for profile "
                          f"{profile.slug!r}: {takes} besides 'profile'.")
    chosen: dict[str, str] = {}
    traits: dict[str, Any] = {}
    for name, option in profile.options.items():
        key, value, option_traits = _check_option(profile, name, option, user, groups, options)
        chosen[key] = value
        for trait, v in option_traits.items():
            traits[trait] = {**traits[trait], **v} if isinstance(v, dict) and isinstance(traits.get(trait), dict) else v
    return Chosen(profile, chosen, traits)


def choose_profile(cfg: ProfilesConfig, user: str, groups: list[str], slug: Any, *, gpu: bool = False,
                   required: bool = False) -> Profile:
    """May this user use this profile? The one answer for the hub, gpu-jobs, the Job builder and the CLI:
    the profile `slug` names, or ChoiceError with the reason to show the user. No slug: the user's default
    profile (unless `required`); `gpu`: only GPU profiles count (GPU jobs)."""
    allowed = [p for p in cfg.profiles_for(groups) if p.is_gpu or not gpu]
    kind = "GPU profile" if gpu else "profile"
    names = ", ".join(p.slug for p in allowed)
    if not allowed:
        raise ChoiceError(f"No {kind} is available to {user}; ask an admin to add you to a group.")
    if slug in (None, ""):
        if required:
            raise ChoiceError(f"Name a {kind}. Choose one of: {names}.")
        return next((p for p in allowed if p.default), allowed[0])
    if not isinstance(slug, str) or slug not in cfg.by_slug:
        raise ChoiceError(f"There is no profile {_shorten(slug)}. Choose one of: {names}.")
    profile = cfg.by_slug[slug]
    if not profile.allowed_for(groups):
        raise ChoiceError(f"Profile {slug!r} is not available to {user}: it is for members of "
                          f"{', '.join(profile.groups or [])}. Choose one of: {names}.")
    if gpu and profile.gpu is None:
        raise ChoiceError(f"Profile {slug!r} has no GPU. GPU jobs need one of: {names}.")
    return profile


def choose(cfg: ProfilesConfig, user: str, groups: list[str], user_options: dict[str, Any]) -> Chosen:
    """The profile and choices `user_options` pick for this user (no profile: the default), or ChoiceError."""
    if not isinstance(user_options, dict):
        raise ChoiceError("server options must be a JSON object")
    profile = choose_profile(cfg, user, groups, user_options.get("profile"))
    return check_options(profile, user, groups, {k: v for k, v in user_options.items() if k != "profile"})
