"""``cronman bench``: cronman and APScheduler side by side, measured at a receiver.

Modules: ``receiver`` (private nginx, its log parsed into arrivals),
``services`` (scratch PostgreSQL database, private redis-server),
``procs`` (processes started and stopped by PID, CPU and peak RSS from /proc),
``workload`` (the jobs and the fires they owe), ``peer`` (APScheduler 3.x),
``harness`` (one measured phase), ``report`` (figures, table, JSON),
``scenarios`` (their shared parts, and steady), a module per other scenario
(``max_rate``, ``herd``, ``million``, ``kill``, ``overload``, ``priority_herd``,
``skew``) and ``runners`` (every scenario by name). See ops/bench/README.md.
"""

from __future__ import annotations
