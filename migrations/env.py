"""Alembic environment of cronman.

The database URL comes from ``config.attributes["database_url"]`` (set by
``cronman.store.migrate``), else from ``sqlalchemy.url`` in alembic.ini, else
from ``CRONMAN_DATABASE_URL``. Engines are made by ``cronman.store.engine``
(psycopg2 for ``postgresql://``, the URL read by ``cronman.store.connect``; SQLite in WAL mode with ``BEGIN IMMEDIATE``
so the whole upgrade is one transaction). On PostgreSQL a transaction-level
advisory lock makes concurrent upgrades (several processes starting at once)
run one after the other; the later ones then find nothing to do.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import text

from cronman.config import DEFAULT_DATABASE_URL
from cronman.store.connect import normalise_url
from cronman.store.engine import make_engine
from cronman.store.migrate import MIGRATION_LOCK_KEY, include_name
from cronman.store.tables import metadata

config = context.config
if config.config_file_name and not config.attributes.get("skip_logging_config"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    return (config.attributes.get("database_url")
            or config.get_main_option("sqlalchemy.url")
            or os.environ.get("CRONMAN_DATABASE_URL")
            or DEFAULT_DATABASE_URL)


def run_offline() -> None:
    context.configure(url=normalise_url(_url()), target_metadata=metadata, literal_binds=True,
                      include_name=include_name, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    url = normalise_url(_url())
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if url.get_backend_name() == "sqlite":
                conn = conn.execution_options(cronman_begin="IMMEDIATE")
            # SQLite DDL is transactional too once SQLAlchemy issues BEGIN itself
            # (cronman.store.engine), so the whole upgrade is one transaction.
            context.configure(connection=conn, target_metadata=metadata,
                              include_name=include_name, compare_type=True,
                              transactional_ddl=True,
                              render_as_batch=url.get_backend_name() == "sqlite")
            with context.begin_transaction():
                if url.get_backend_name() == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"),
                                 {"k": MIGRATION_LOCK_KEY})
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
