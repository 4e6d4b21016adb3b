"""An `Event` as each channel wants it (pure): an e-mail, a Slack or a Microsoft Teams webhook body.

Slack: an incoming webhook takes `{"text", "blocks"}` (mrkdwn; `&`, `<`, `>` escaped, links `<url|text>`).
Teams: a Workflows "post to a channel when a webhook request is received" webhook (what replaces the
retired Office 365 connectors, which took the same body) takes a message with one Adaptive Card attachment.
"""
from __future__ import annotations

from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from jupyterhub_gpu.services.notify.events import Event, is_failure

SUBJECT_PREFIX = "[JupyterHub GPU]"
ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"
WEBHOOK_KINDS = ("slack", "teams")


def email_message(event: Event, to: str, sender: str) -> EmailMessage:
    """A plain-text e-mail (no HTML: nothing from a job name or a message can become markup)."""
    msg = EmailMessage()
    msg["From"], msg["To"] = sender, to
    msg["Subject"] = f"{SUBJECT_PREFIX} {event.title}"
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    msg["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies to this
    lines = [event.text, ""]
    lines += [f"{k}: {v}" for k, v in event.facts]
    if event.link:
        lines += ["", f"{event.link_text}: {event.link}"]
    if event.to is None:  # a confirmation mail says why it came in its own text
        lines += ["", "You get this because you asked for it in your GPU notification settings "
                      "(JupyterLab: GPU jobs panel → Notifications)."]
    msg.set_content("\n".join(lines))
    return msg


def slack_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_payload(event: Event) -> dict:
    """An incoming-webhook body: `text` (the notification's fallback) and Block Kit blocks."""
    head = f"*{slack_escape(event.title)}* (for {slack_escape(event.user)})"
    text = f"{head}\n{slack_escape(event.text)}"
    blocks: list[dict] = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    if event.facts:  # a section takes at most 10 fields
        fields = [{"type": "mrkdwn", "text": f"*{slack_escape(k)}*\n{slack_escape(v)}"} for k, v in event.facts[:10]]
        blocks.append({"type": "section", "fields": fields})
    if event.link:
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"<{event.link}|{slack_escape(event.link_text)}>"}]})
    # the fallback text is mrkdwn too: unescaped, a name or message could be <!channel> or <url|text>
    return {"text": slack_escape(f"{event.title} (for {event.user}): {event.text}"), "blocks": blocks}


def _runs(*parts: tuple[str, bool]) -> dict:
    """A RichTextBlock of TextRuns ((text, bold) each): Teams shows a TextRun as it is, never as Markdown."""
    return {"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": text, **({"weight": "Bolder"} if bold
                                                                                     else {})} for text, bold in parts]}


def teams_payload(event: Event) -> dict:
    """A Teams message with one Adaptive Card (title, text, facts, a button to the output). TextBlock text and
    FactSet values are Markdown to Teams (`[text](url)` is a link), so every string from a user (a hub name,
    a notebook path, a job's message) goes in TextRuns; the title is the service's own words and job name."""
    body: list[dict] = [
        {"type": "TextBlock", "text": event.title, "weight": "Bolder", "size": "Medium", "wrap": True,
         **({"color": "Attention"} if is_failure(event.kind) else {})},
        _runs((f"For {event.user}: {event.text}", False))]
    body += [_runs((f"{k}: ", True), (v, False)) for k, v in event.facts]
    card = {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard",
            "version": "1.4", "body": body}
    if event.link:
        card["actions"] = [{"type": "Action.OpenUrl", "title": event.link_text, "url": event.link}]
    return {"type": "message", "attachments": [{"contentType": ADAPTIVE_CARD, "contentUrl": None, "content": card}]}


def webhook_payload(kind: str, event: Event) -> dict:
    if kind == "slack":
        return slack_payload(event)
    if kind == "teams":
        return teams_payload(event)
    raise ValueError(f"unknown webhook kind {kind!r} (one of {', '.join(WEBHOOK_KINDS)})")
