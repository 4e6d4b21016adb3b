"""The admin's notification settings (traitlets, read by the gpu-jobs service): which channels exist.

In `jupyterhub_config.py` (secrets through the service's environment, not its command line):

    configure(c, options={"gpu-jobs": {"Notifications.smtp_host": "smtp.example.org",
                                       "Notifications.smtp_from": "jupyterhub@example.org",
                                       "Notifications.email_template": "{username}@example.org",
                                       "Notifications.hub_url": "https://hub.example.org"}},
              environment={"gpu-jobs": {"GPUHUB_SMTP_PASSWORD": "...",
                                        "GPUHUB_NOTIFY_WEBHOOKS": '{"ml-team": "teams:https://..."}'}})
"""
from __future__ import annotations

import json
import os

from traitlets import Dict, Enum, Float, Int, List, Unicode, default
from traitlets.config import Configurable

from jupyterhub_gpu.services.notify.outbox import Outbox
from jupyterhub_gpu.services.notify.prefs import Channels, PreferenceStore, parse_webhooks
from jupyterhub_gpu.services.notify.send import Notifier, Smtp

ENV_WEBHOOKS, ENV_SMTP_PASSWORD, ENV_DB = "GPUHUB_NOTIFY_WEBHOOKS", "GPUHUB_SMTP_PASSWORD", "GPUHUB_NOTIFY_DB"


class Notifications(Configurable):
    """E-mail and webhook notifications of job events and cull warnings, for users who opt in."""

    hub_url = Unicode("", help="The hub's public URL (https://hub.example.org): messages link to the job's "
                               "output notebook and to the hub. Empty: no links.").tag(config=True)
    smtp_host = Unicode("", help="Mail server for e-mail notifications. Empty: no e-mail channel.").tag(config=True)
    smtp_port = Int(587, help="Mail server port (587 with STARTTLS, 465 with implicit TLS).").tag(config=True)
    smtp_security = Enum(["starttls", "tls", "none"], "starttls",
                         help="starttls: upgrade the connection (required); tls: implicit TLS; none: plain "
                              "(a relay on the same network only).").tag(config=True)
    smtp_username = Unicode("", help="Mail server login; empty: no login.").tag(config=True)
    smtp_password = Unicode(help=f"Mail server password (default ${ENV_SMTP_PASSWORD}; keep it out of the command "
                                 "line).").tag(config=True)
    smtp_from = Unicode("", help="The From address of the e-mails (required with smtp_host).").tag(config=True)
    email_template = Unicode("", help="A user's address from their hub name: '{username}@example.org'. Empty: "
                                      "users give their own (see email_domains).").tag(config=True)
    email_domains = List(Unicode(), help="Domains in which users may give their own address (e.g. ['example.org']); "
                                         "empty: only the template's address.").tag(config=True)
    webhooks = Dict(help=f"Named webhooks users may opt into: name → 'slack:URL' (Slack incoming webhook) or "
                         f"'teams:URL' (Teams Workflows webhook). Only admins set URLs; users pick a name. "
                         f"Default: JSON in ${ENV_WEBHOOKS}.").tag(config=True)
    webhook_groups = Dict(help="name → comma-separated hub groups that may use that webhook (a team's channel); "
                               "a webhook not listed: everyone.").tag(config=True)
    retries = Int(5, min=0, max=20, help="Retries of a failed delivery (then it is logged and dropped).").tag(
        config=True)
    backoff = Float(2.0, help="Seconds before the first retry; doubled for each next one.").tag(config=True)
    backoff_max = Float(300.0, help="Longest wait between two retries (s).").tag(config=True)
    timeout = Float(20.0, help="Seconds one delivery attempt may take.").tag(config=True)
    max_pending = Int(1000, min=1, help="Deliveries that may wait at once; more are dropped and logged.").tag(
        config=True)
    max_per_user_hour = Int(30, min=0, help="Deliveries one user's events may make per hour, over all channels; "
                                             "more are dropped and logged. 0: no limit.").tag(config=True)
    max_confirmations_hour = Int(3, min=1, help="Confirmation mails (the link that makes an address a user's own) "
                                                "one user may have sent per hour; more are refused (429).").tag(
        config=True)
    preferences_file = Unicode(help=f"SQLite file of the users' choices and of the notifications not yet sent "
                                    f"(default ${ENV_DB}, else gpu-jobs-notifications.sqlite in the working "
                                    "directory). On a persistent volume when gpu-jobs runs in its own pod: "
                                    "events while gpu-jobs is down are sent after it is back.").tag(config=True)

    @default("smtp_password")
    def _smtp_password(self):
        return os.environ.get(ENV_SMTP_PASSWORD, "")

    @default("webhooks")
    def _webhooks(self):
        raw = os.environ.get(ENV_WEBHOOKS, "")
        try:
            found = json.loads(raw) if raw else {}
        except ValueError:
            raise SystemExit(f"gpu-jobs: ${ENV_WEBHOOKS} is not JSON") from None
        if not isinstance(found, dict):
            raise SystemExit(f"gpu-jobs: ${ENV_WEBHOOKS}: a JSON object of name → 'slack:URL' / 'teams:URL'")
        return found

    @default("preferences_file")
    def _preferences_file(self):
        return os.environ.get(ENV_DB, "gpu-jobs-notifications.sqlite")

    def channels(self) -> Channels:
        """The channels as set; a bad setting stops the service with its name."""
        if self.smtp_host and not self.smtp_from:
            raise SystemExit("gpu-jobs: Notifications.smtp_from is required with smtp_host")
        try:
            hooks = parse_webhooks(self.webhooks, self.webhook_groups)
        except ValueError as e:
            raise SystemExit(f"gpu-jobs: Notifications.webhooks: {e}") from None
        return Channels(email=bool(self.smtp_host), email_template=self.email_template,
                        email_domains=tuple(self.email_domains), webhooks=hooks)

    def notifier(self) -> Notifier | None:
        """The notifier, or None when the admin turned on no channel (then nothing is stored either)."""
        channels = self.channels()
        if not channels.email and not channels.webhooks:
            return None
        smtp = Smtp(self.smtp_host, self.smtp_port, self.smtp_security, self.smtp_username, self.smtp_password,
                    self.smtp_from, self.timeout) if self.smtp_host else None
        return Notifier(channels, PreferenceStore(self.preferences_file), smtp, retries=self.retries,
                        backoff=self.backoff, backoff_max=self.backoff_max, timeout=self.timeout,
                        max_pending=self.max_pending, max_per_user_hour=self.max_per_user_hour,
                        max_confirmations_hour=self.max_confirmations_hour, hub_url=self.hub_url,
                        outbox=Outbox(self.preferences_file))  # the same file: events survive a restart
