"""Notifications outside JupyterLab: job events and cull warnings by e-mail and webhook, for users who opt in.

events.py (pure: state changes → events) · payloads.py (pure: e-mail, Slack, Teams bodies) · prefs.py
(channels the admin set, the users' choices, validated and stored) · send.py (delivery with backoff) ·
options.py (the admin's traitlets) · watch.py (gpu-jobs' loop over its job statuses) · web.py (the
preferences endpoint and the culler's warnings endpoint on gpu-jobs).
"""
