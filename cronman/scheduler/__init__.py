"""One scheduler node, by stage: the path of a fire from its job to its run row.

Stages, in the order a fire crosses them (``node.py`` composes them):

- ``jobs/``: which jobs this node owns and when they fire next (membership,
  sync with the database, the job table and its timers, gains, calendars);
- ``claim/``: due fires taken from the table in batches and claimed (the
  coordinator lock, then the database fence); a replica's standby, pulses;
- ``dispatch/``: each claimed run started at its time through its target
  (due and wait queues, gates, admission, start marks, the finisher's
  retries and dead letters);
- ``record/``: run rows written in batches, outcomes marked in the
  coordinator;
- ``recovery/``: what a node carries on when another stopped, or when the
  API asked (leases, the sweeper, requested runs, partition upkeep).

Shared by all: ``fires`` (``Fire``, ``Cursor``, ``ActiveRun``: what flows
between the stages), ``policies`` (retry, misfire, concurrency: pure) and
``runtime/`` (clock, lifecycle, metrics, the timer heap, rate-limited logs).

Imports go down this list only (checked by ``lint-imports`` in ``ops/test``):
``node`` > ``recovery`` | ``claim`` > ``dispatch`` > ``record`` | ``jobs`` >
``fires``, ``policies``, ``runtime``. A stage that must tell one above it
(or a sibling) something does so through a ``Protocol`` of its own module,
handed in at construction (``node``'s docstring lists them).
"""
