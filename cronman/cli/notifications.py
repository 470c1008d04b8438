"""``cronman notifications ...``: what was sent, and namespace-wide rules.

    cronman notifications list --status failed          # what could not be sent, and why
    cronman notifications get ID -o yaml                # one message and its events
    cronman notifications rules create -f oncall.yaml   # a rule for a whole namespace
    cronman notifications rules list -n billing

A job's own rules are its ``notify`` field (``cronman jobs create/update``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from cronman.cli.documents import DocumentError, load_definitions
from cronman.cli.group import cli
from cronman.cli.options import client_command, collect, first_page_only, more_hint
from cronman.cli.output import _short, emit, format_table
from cronman.client import PAGE_MAX, CronmanClient

STATUSES = ("pending", "sending", "sent", "failed")
EVENTS = ("failed", "lost", "recovered", "late", "paused", "digest")
RULE_SERVER_KEYS = ("id", "created_at", "updated_at")


@cli.group("notifications")
def notifications() -> None:
    """Notifications sent, waiting or failed; namespace-wide notification rules."""


# -- output ----------------------------------------------------------------------------


def channel_text(channel: Mapping[str, Any] | None) -> str:
    channel = channel or {}
    if channel.get("kind") == "email":
        return "email: " + ", ".join(channel.get("to") or [])
    return f"{channel.get('kind')}: {channel.get('url')}"


def _what(note: Mapping[str, Any]) -> str:
    return "digest" if note.get("kind") == "digest" else str(note.get("event"))


def notifications_table(notes: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("ID", "JOB", "WHAT", "EVENTS", "STATUS", "ATTEMPTS", "DUE", "SENT", "LAST ERROR"),
        [(n["id"], f"{n['namespace']}/{n['job_name']}", _what(n), n["event_count"],
          n["status"], n["attempts"], n["due_at"], n.get("sent_at"),
          _short(n.get("last_error"), 50)) for n in notes])


def notifications_wide(notes: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("ID", "JOB ID", "JOB", "RULE", "CHANNEL", "WHAT", "EVENTS", "STATUS", "ATTEMPTS",
         "CREATED", "DUE", "NEXT ATTEMPT", "SENT", "LAST ERROR"),
        [(n["id"], n["job_id"], f"{n['namespace']}/{n['job_name']}", n["rule"],
          channel_text(n.get("channel")), _what(n), n["event_count"], n["status"],
          n["attempts"], n["created_at"], n["due_at"], n["next_attempt_at"], n.get("sent_at"),
          n.get("last_error")) for n in notes])


def notification_details(note: Mapping[str, Any]) -> str:
    rows = [(k, channel_text(v) if k == "channel" else v)
            for k, v in note.items() if k != "events"]
    text = format_table(("FIELD", "VALUE"), rows)
    events = note.get("events") or []
    if events:
        text += "\n\nEvents\n" + format_table(
            ("EVENT", "OCCURRED", "SCHEDULED FOR", "RUN ID", "ERROR"),
            [(e["event"], e["occurred_at"], e.get("scheduled_for"), e.get("run_id"),
              _short((e.get("detail") or {}).get("error"), 50)) for e in events])
    return text


def rules_table(rules: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("ID", "NAMESPACE", "NAME", "ON", "LATE AFTER", "CHANNEL", "DIGEST S", "VERSION"),
        [(r["id"], r["namespace"], r["name"], ",".join(r["events"]), r.get("late_after"),
          channel_text(r.get("channel")), r.get("digest_interval"), r.get("version"))
         for r in rules])


def rules_wide(rules: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("ID", "NAMESPACE", "NAME", "ON", "LATE AFTER", "CHANNEL", "DIGEST S", "VERSION",
         "CREATED", "UPDATED"),
        [(r["id"], r["namespace"], r["name"], ",".join(r["events"]), r.get("late_after"),
          channel_text(r.get("channel")), r.get("digest_interval"), r.get("version"),
          r.get("created_at"), r.get("updated_at")) for r in rules])


# -- notifications ------------------------------------------------------------------------


@notifications.command("list")
@click.option("--namespace", "-n", default=None)
@click.option("--job", "job_id", metavar="JOB", default=None,
              help="only this job's: an id, namespace/name, or a name (in -n NAMESPACE)")
@click.option("--status", "statuses", multiple=True, type=click.Choice(STATUSES),
              help="repeatable")
@click.option("--event", "events", multiple=True, type=click.Choice(EVENTS),
              help="repeatable; digest: the digests")
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=100, show_default=True)
@click.option("--all", "follow", is_flag=True, help="follow next_cursor to the end")
@click.option("--cursor", default=None, help="start at this next_cursor of a previous page")
@client_command
def notifications_list(client: CronmanClient, fmt: str, namespace: str | None,
                       job_id: str | None, statuses: tuple[str, ...], events: tuple[str, ...],
                       limit: int, follow: bool, cursor: str | None) -> None:
    """Notifications, newest first."""
    args: dict[str, Any] = {"namespace": namespace, "job_id": job_id, "statuses": statuses,
                            "events": events}
    if follow:
        first_page_only(cursor)
        items: list[Any] = collect(client.iter_notifications(**args, page_size=limit),
                                   "notifications", limit)
        cursor = None
    else:
        page = client.list_notifications(**args, limit=limit, cursor=cursor)
        items, cursor = list(page.items), page.next_cursor
    emit(fmt, {"items": items, "next_cursor": cursor}, lambda: notifications_table(items),
         lambda: notifications_wide(items))
    more_hint(fmt, "notifications", cursor)


@notifications.command("get")
@click.argument("notification_id")
@client_command
def notifications_get(client: CronmanClient, fmt: str, notification_id: str) -> None:
    """One notification and its events."""
    note = client.get_notification(notification_id)
    emit(fmt, note, lambda: notification_details(note))


# -- namespace rules -------------------------------------------------------------------------


@notifications.group("rules")
def rules() -> None:
    """Notification rules for every job of a namespace."""


def _rule_file(path: str) -> dict[str, Any]:
    try:
        found = load_definitions([path])
    except DocumentError as exc:
        raise click.BadParameter(str(exc), param_hint="-f") from None
    if len(found) != 1:
        raise click.BadParameter(f"{path}: one rule per file, found {len(found)}",
                                 param_hint="-f")
    return {k: v for k, v in found[0].spec.items() if k not in RULE_SERVER_KEYS}


@rules.command("list")
@click.option("--namespace", "-n", default=None)
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=100, show_default=True)
@click.option("--all", "follow", is_flag=True, help="follow next_cursor to the end")
@click.option("--cursor", default=None, help="start at this next_cursor of a previous page")
@client_command
def rules_list(client: CronmanClient, fmt: str, namespace: str | None, limit: int,
               follow: bool, cursor: str | None) -> None:
    """Namespace rules."""
    if follow:
        first_page_only(cursor)
        items: list[Any] = collect(client.iter_notification_rules(namespace=namespace,
                                                                  page_size=limit),
                                   "rules", limit)
        cursor = None
    else:
        page = client.list_notification_rules(namespace=namespace, limit=limit,
                                               cursor=cursor)
        items, cursor = list(page.items), page.next_cursor
    emit(fmt, {"items": items, "next_cursor": cursor}, lambda: rules_table(items),
         lambda: rules_wide(items))
    more_hint(fmt, "rules", cursor)


@rules.command("get")
@click.argument("rule_id")
@client_command
def rules_get(client: CronmanClient, fmt: str, rule_id: str) -> None:
    """One namespace rule."""
    rule = client.get_notification_rule(rule_id)
    emit(fmt, rule, lambda: rules_table([rule]), lambda: rules_wide([rule]))


@rules.command("create")
@click.option("-f", "--file", "path", required=True,
              help="JSON or YAML: one rule with its name (and namespace) ('-': stdin)")
@click.option("--namespace", "-n", default=None, help="for a rule that names none")
@client_command
def rules_create(client: CronmanClient, fmt: str, path: str, namespace: str | None) -> None:
    """Create a namespace rule."""
    spec = _rule_file(path)
    if namespace is not None:
        spec.setdefault("namespace", namespace)
    rule = client.create_notification_rule(spec)
    emit(fmt, rule, lambda: rules_table([rule]), lambda: rules_wide([rule]))


@rules.command("update")
@click.argument("rule_id")
@click.option("-f", "--file", "path", required=True,
              help="JSON or YAML: the whole rule ('-': stdin)")
@click.option("--if-version", type=int, default=None,
              help="refuse unless the rule is at this version")
@client_command
def rules_update(client: CronmanClient, fmt: str, rule_id: str, path: str,
                 if_version: int | None) -> None:
    """Replace a namespace rule (redacted webhook headers read back keep their value)."""
    spec = _rule_file(path)
    version = if_version if if_version is not None else spec.pop("version", None)
    spec.pop("version", None)
    rule = client.replace_notification_rule(rule_id, spec, version=version)
    emit(fmt, rule, lambda: rules_table([rule]), lambda: rules_wide([rule]))


@rules.command("delete")
@click.argument("rule_id")
@client_command
def rules_delete(client: CronmanClient, fmt: str, rule_id: str) -> None:
    """Delete a namespace rule."""
    client.delete_notification_rule(rule_id)
    if fmt in ("json", "yaml"):
        emit(fmt, {"deleted": rule_id}, lambda: "")
    else:
        click.echo(f"deleted notification rule {rule_id}")
