"""`cronman scheduler` refuses a database whose schema is not current."""

from __future__ import annotations

import pytest

from tests.support.processes import Processes

pytestmark = [pytest.mark.postgres]


def test_scheduler_refuses_an_unmigrated_database(tmp_path, fresh_pg_url):
    with Processes(tmp_path) as procs:
        p = procs.scheduler(fresh_pg_url, "nope", wait=False)
        rc = p.wait(30)
    assert rc == 1
    log = p.log_text()
    assert "no cronman schema" in log and "cronman migrate" in log
    assert "Traceback" not in log


def test_scheduler_exits_at_once_on_an_unusable_url(tmp_path):
    with Processes(tmp_path) as procs:
        p = procs.start("bad", ["scheduler", "--database-url", "mysql://x/y"])
        rc = p.wait(30)
    assert rc == 1
    assert "cannot use the database URL" in p.log_text()
    assert "Traceback" not in p.log_text()
