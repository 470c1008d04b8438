"""Schema migrations (Alembic, in ``migrations/`` at the repository root).

Alembic is configured in code, so no alembic.ini is needed. The scripts are
found at ``<repo>/migrations`` relative to this package, which holds for the
editable install (``pip install -e .``, what ops/setup does); elsewhere set
``CRONMAN_MIGRATIONS_DIR`` to the directory holding ``env.py``.

``upgrade`` brings a database to the newest revision and, on PostgreSQL,
creates the daily partitions from today on. Processes that start against a
database call ``check_schema_current`` and refuse to run against a schema
that is missing, older, or newer than this code knows.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError

from cronman.config import DEFAULT_HISTORY_RETENTION_DAYS, DEFAULT_PARTITIONS_AHEAD_DAYS
from cronman.errors import CronmanError
from cronman.store.engine import Database
from cronman.timeutil import utcnow

# pg_advisory_xact_lock key serialising concurrent upgrades ("cmmigr").
MIGRATION_LOCK_KEY = 0x636D_6D69_6772
_PARTITION_CHILD_PREFIX = "scheduled_jobs_"
# One upgrade per process at a time, from its first connection to its last:
# Alembic keeps its running context in module globals, and on a new SQLite
# file two connections switching it to WAL at once can deadlock: one fails
# at once with "database is locked" instead of waiting out the busy timeout.
_UPGRADE_LOCK = threading.Lock()


class SchemaNotCurrent(CronmanError):
    """The database schema is not the one this code was written for."""

    code = "schema_not_current"
    http_status = 503


@dataclass
class UpgradeReport:
    """What ``upgrade`` found and did."""

    before: str | None
    after: str | None
    partitions_created: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.before != self.after


def migrations_dir() -> Path:
    """The Alembic migrations: ``CRONMAN_MIGRATIONS_DIR``, else the repository's
    ``migrations/`` (a source tree or an editable install), else the copy a wheel
    carries (``cronman/_migrations``, made by setup.py)."""
    configured = os.environ.get("CRONMAN_MIGRATIONS_DIR")
    here = Path(__file__).resolve()
    candidates = ([Path(configured)] if configured
                  else [here.parents[2] / "migrations", here.parents[1] / "_migrations"])
    for path in candidates:
        if (path / "env.py").is_file():
            return path
    raise RuntimeError(
        f"Alembic migrations not found at {' or '.join(map(str, candidates))}: install "
        "cronman from its repository, or set CRONMAN_MIGRATIONS_DIR to the migrations "
        "directory"
    )


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()).replace("%", "%%"))
    cfg.attributes["database_url"] = database_url
    return cfg


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Autogenerate filter: partitions of scheduled_jobs are not model tables."""
    if type_ == "table" and name and name.startswith(_PARTITION_CHILD_PREFIX):
        return False
    return True


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(database_url: str) -> str | None:
    """The revision the database is at (None: not migrated)."""
    db = Database(database_url, pool_size=1)
    try:
        with db.read() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        db.dispose()


def upgrade(database_url: str, *, days_ahead: int = DEFAULT_PARTITIONS_AHEAD_DAYS,
            retention_days: int = DEFAULT_HISTORY_RETENTION_DAYS,
            node_id: str = "migrate") -> UpgradeReport:
    """Upgrade to head (idempotent), then on PostgreSQL create partitions
    for today .. today + ``days_ahead``."""
    from cronman.store.partitions import PgPartitions

    with _UPGRADE_LOCK:
        before = current_revision(database_url)
        try:
            command.upgrade(alembic_config(database_url), "head")
        except CommandError as exc:  # e.g. a revision this code does not know
            raise SchemaNotCurrent(f"cannot upgrade: {exc}") from exc
        report = UpgradeReport(before=before, after=current_revision(database_url))
    db = Database(database_url, pool_size=1)
    try:
        if db.is_postgres:
            parts = PgPartitions(db, node_id=node_id, retention_days=retention_days,
                                 purge_tombstones=lambda _cutoff: 0)
            report.partitions_created = parts.ensure_partitions(utcnow(), days_ahead)
    finally:
        db.dispose()
    return report


def check_schema_current(database_url: str) -> str:
    """The database's revision if it is this code's head; else ``SchemaNotCurrent``."""
    script = ScriptDirectory.from_config(alembic_config(database_url))
    head = script.get_current_head()
    rev = current_revision(database_url)
    if rev == head:
        return rev or ""
    if rev is None:
        raise SchemaNotCurrent("the database has no cronman schema: run `cronman migrate`")
    try:
        known = script.get_revision(rev) is not None
    except CommandError:
        known = False
    if not known:
        raise SchemaNotCurrent(
            f"the database schema is at revision {rev!r}, unknown to this cronman "
            f"(head {head!r}): it was migrated by a newer version; upgrade cronman"
        )
    raise SchemaNotCurrent(
        f"the database schema is at revision {rev!r}, older than {head!r}: run `cronman migrate`"
    )
