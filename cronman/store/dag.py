"""The job graph (``job_edges``), kept in the transaction of each job write.

A job's upstream jobs are the ids in its ``depends_on`` entries and in its
``after`` schedule; the store calls in here from ``create_jobs``,
``update_job`` and ``delete_job``, inside their transaction:

- ``record_created`` / ``record_changed``: every upstream must be a live job
  (its row is locked ``FOR SHARE`` until the commit, so a concurrent delete
  of it waits and then finds the new edge), none the job itself, and the
  graph must stay acyclic. Writes that add edges take one cluster-wide
  advisory lock first, so two writes cannot each add half of a cycle.
  Errors are ``ValidationError`` naming the reference (``depends_on[1].job``,
  ``schedule.jobs[0]``; ``jobs[3].`` in front for a bulk create); a cycle
  names its jobs in order.
- ``record_deleted``: a job live jobs still depend on is refused
  (``Conflict`` naming them) unless forced; the deleted job's own edges and
  pending trigger events go. Its row is already locked by the delete's
  UPDATE, so an edge to it being added concurrently is either seen here or
  finds the job gone.

SQLite serialises writers: the locks are PostgreSQL's only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import delete, insert, select

from cronman.errors import Conflict, ValidationError
from cronman.store.dialect import advisory_xact_lock, for_share
from cronman.store.engine import Tx
from cronman.store.tables import job_edges, jobs
from cronman.store.triggers import forget_downstream
from cronman.vocabulary import EdgeKind

# Advisory lock key serialising writes that add edges ("cmdag").
DAG_LOCK_KEY = 0x636D_6461_67
MAX_GRAPH_WALK = 100_000  # jobs looked at when checking for a cycle
_CHUNK = 500

# (upstream id, kind, the field naming it relative to the job)
Link = tuple[str, str, str]


def links_of(spec: Mapping[str, Any]) -> list[Link]:
    """The upstream links a job definition (normalised: ids) declares."""
    out: list[Link] = []
    for i, entry in enumerate(spec.get("depends_on") or ()):
        out.append((str(entry["job"]), EdgeKind.DEPENDS_ON.value, f"depends_on[{i}].job"))
    schedule = spec.get("schedule") or {}
    if schedule.get("kind") == "after":
        for i, job_id in enumerate(schedule.get("jobs") or ()):
            out.append((str(job_id), EdgeKind.AFTER.value, f"schedule.jobs[{i}]"))
    return out


def _prefixed(prefix: str, field: str) -> str:
    return f"{prefix}.{field}" if prefix else field


def record_created(tx: Tx, rows: Sequence[Mapping[str, Any]]) -> None:
    """Edges of newly inserted jobs (already in the table, this transaction)."""
    count = len(rows)
    wanted: dict[str, tuple[list[Link], str]] = {
        str(row["id"]): ([], "" if count == 1 else f"jobs[{i}]") for i, row in enumerate(rows)}
    total = 0
    for row in rows:
        found = links_of(row)
        wanted[str(row["id"])][0].extend(found)
        total += len(found)
    if total:
        _add(tx, {job_id: (links, prefix) for job_id, (links, prefix) in wanted.items()
                  if links})


def record_changed(tx: Tx, job_id: str, spec: Mapping[str, Any]) -> None:
    """Edges of a job after an update that may have changed them."""
    new = links_of(spec)
    old = {(up, kind) for up, kind in tx.conn.execute(
        select(job_edges.c.upstream_id, job_edges.c.kind)
        .where(job_edges.c.downstream_id == job_id))}
    if old == {(up, kind) for up, kind, _ in new}:
        return
    tx.conn.execute(delete(job_edges).where(job_edges.c.downstream_id == job_id))
    after = [up for up, kind, _ in new if kind == EdgeKind.AFTER]
    forget_downstream(tx, job_id, keep_upstreams=after)
    if new:
        added = [link for link in new if (link[0], link[1]) not in old]
        _add(tx, {job_id: (new, "")}, check=bool(added))


class DependencyCycle(ValidationError):
    """A write would close a cycle; ``path`` is its (namespace, name) in
    order, the first job again at the end. The API names only the jobs the
    caller may see (``message_for``)."""

    def __init__(self, path: Sequence[tuple[str, str]], *, field: str | None = None) -> None:
        self.path = list(path)
        super().__init__(cycle_message(self.path), field=field)

    def prefixed(self, prefix: str) -> DependencyCycle:
        return DependencyCycle(self.path, field=f"{prefix}.{self.field}" if self.field
                               else prefix)

    def shown_to(self, allows: Callable[[str], bool]) -> ValidationError:
        """The same error naming only jobs of the namespaces ``allows``."""
        return ValidationError(cycle_message(self.path, allows), field=self.field)


HIDDEN_JOB = "(a job of another namespace)"


def cycle_message(path: Sequence[tuple[str, str]],
                  allows: Callable[[str], bool] = lambda _: True) -> str:
    shown = " → ".join(f"{ns}/{name}" if allows(ns) else HIDDEN_JOB for ns, name in path)
    return f"would make a cycle of dependencies: {shown} (each job depends on the one before it)"


class DependentsExist(Conflict):
    """A job live jobs depend on was to be deleted; ``dependents`` are their
    (namespace, name, kind), the first ``MAX_NAMED`` of them."""

    def __init__(self, dependents: list[tuple[str, str, str]], more: bool) -> None:
        self.dependents = dependents
        self.more = more
        super().__init__(dependents_message(dependents, more))


MAX_NAMED = 10


def dependents_message(dependents: list[tuple[str, str, str]], more: bool,
                       hidden: int = 0) -> str:
    shown = ", ".join(f"{ns}/{name} ({kind})" for ns, name, kind in dependents)
    if hidden:
        shown = (shown + ", " if shown else "") + f"{hidden} in other namespaces"
    # Neutral on how to force: the API names its ``force`` parameter in the
    # error's field, the CLI its ``--force``.
    return (f"other jobs depend on this job: {shown}{' and more' if more else ''}; delete "
            "them or their dependency first, or force the delete (they are left as "
            "they are)")


def record_deleted(tx: Tx, job_id: str, *, force: bool) -> None:
    """A deleted job's edges; refused while live jobs depend on it, unless forced."""
    dependents = tx.conn.execute(
        select(jobs.c.namespace, jobs.c.name, job_edges.c.kind)
        .select_from(job_edges.join(jobs, jobs.c.id == job_edges.c.downstream_id))
        .where(job_edges.c.upstream_id == job_id, job_edges.c.downstream_id != job_id,
               jobs.c.deleted_at.is_(None))
        .order_by(jobs.c.namespace, jobs.c.name).limit(MAX_NAMED + 1)).all()
    if dependents and not force:
        raise DependentsExist([(ns, name, kind) for ns, name, kind in dependents[:MAX_NAMED]],
                              len(dependents) > MAX_NAMED)
    tx.conn.execute(delete(job_edges).where(job_edges.c.downstream_id == job_id))
    forget_downstream(tx, job_id)


def _add(tx: Tx, wanted: dict[str, tuple[list[Link], str]], *, check: bool = True) -> None:
    """Insert the links of each job (``prefix`` in front of error fields);
    with ``check``, after checking their upstreams and the graph's shape."""
    if check:
        advisory_xact_lock(tx.conn, DAG_LOCK_KEY)
        ups = sorted({up for links, _ in wanted.values() for up, _, _ in links})
        live = _live(tx, ups)
        for job_id, (links, prefix) in wanted.items():
            for up, _, field in links:
                if up == job_id:
                    raise ValidationError("a job cannot depend on itself",
                                          field=_prefixed(prefix, field))
                if up not in live:
                    raise ValidationError(f"{up!r} names no job (deleted meanwhile?)",
                                          field=_prefixed(prefix, field))
    rows = [{"downstream_id": job_id, "upstream_id": up, "kind": kind}
            for job_id, (links, _) in wanted.items()
            for up, kind in dict.fromkeys((up, kind) for up, kind, _ in links)]
    tx.conn.execute(insert(job_edges), rows)
    if check:
        _refuse_cycles(tx, wanted)


def _live(tx: Tx, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` are live jobs (PostgreSQL: their rows locked FOR SHARE)."""
    found: set[str] = set()
    for start in range(0, len(ids), _CHUNK):
        stmt = select(jobs.c.id).where(jobs.c.id.in_(list(ids[start:start + _CHUNK])),
                                       jobs.c.deleted_at.is_(None)).order_by(jobs.c.id)
        found.update(tx.conn.execute(for_share(stmt, tx.dialect)).scalars())
    return found


def _refuse_cycles(tx: Tx, wanted: dict[str, tuple[list[Link], str]]) -> None:
    """A cycle through an edge just added passes through its downstream job:
    walk upstream from those jobs (one query per level), then look for a path
    from one of them back to itself."""
    up: dict[str, set[str]] = {}
    frontier = set(wanted)
    while frontier and len(up) < MAX_GRAPH_WALK:
        batch = sorted(frontier)
        frontier = set()
        for start in range(0, len(batch), _CHUNK):
            rows = tx.conn.execute(
                select(job_edges.c.downstream_id, job_edges.c.upstream_id)
                .where(job_edges.c.downstream_id.in_(batch[start:start + _CHUNK]))).all()
            for down, parent in rows:
                up.setdefault(down, set()).add(parent)
        for down in batch:
            up.setdefault(down, set())
        frontier = {p for down in batch for p in up[down] if p not in up}
    for job_id, (links, prefix) in wanted.items():
        path = _path_back(up, job_id)
        if path is None:
            continue
        names = _names(tx, path)
        first_up = path[1] if len(path) > 1 else job_id
        field = next((f for u, _, f in links if u == first_up), links[0][2])
        raise DependencyCycle([names.get(j, ("", j)) for j in reversed(path)],
                              field=_prefixed(prefix, field))


def _path_back(up: Mapping[str, Iterable[str]], start: str) -> list[str] | None:
    """[start, u1, ..., start] following upstream links, or None."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for parent in sorted(up.get(node, ())):
            if parent == start:
                return [*path, start]
            if parent not in seen:
                seen.add(parent)
                stack.append((parent, [*path, parent]))
    return None


def _names(tx: Tx, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    rows = tx.conn.execute(select(jobs.c.id, jobs.c.namespace, jobs.c.name)
                           .where(jobs.c.id.in_(sorted(set(ids))))).all()
    return {job_id: (ns, name) for job_id, ns, name in rows}
