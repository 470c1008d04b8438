"""Prometheus metrics of the notifier (registered in the node's registry)."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge


class NotifierMetrics:
    """The notifier's counters and gauges; ``registry=None`` registers nothing (tests)."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        r = registry
        self.active = Gauge("cronman_notifier_active",
                            "1 while this process is the cluster's active notifier",
                            registry=r)
        self.events = Counter("cronman_notification_events",
                              "Events found for a rule (each counted once), by event",
                              ("event",), registry=r)
        self.dropped = Counter("cronman_notification_events_dropped",
                               "Events not notified, by reason: too old when found (a notifier "
                               "back after a long absence), or late fires passed over while "
                               "catching up", ("reason",), registry=r)
        self.messages = Counter("cronman_notifications_created",
                                "Messages put in the outbox, by kind (event, digest)",
                                ("kind",), registry=r)
        self.attempts = Counter("cronman_notification_attempts",
                                "Delivery attempts, by channel and outcome (sent, retry, "
                                "failed: given up)", ("channel", "outcome"), registry=r)
        self.backlog = Gauge("cronman_notifications_backlog",
                             "Messages waiting to be sent (pending or being sent)", registry=r)
        self.overdue = Gauge("cronman_notifications_overdue",
                             "Messages waiting more than a minute past their time", registry=r)
        self.watched = Gauge("cronman_notifier_late_watched",
                             "(job, rule) pairs watched for late fires", registry=r)
