"""Dispatch: each claimed run started at its time through its target.

The ``dispatcher`` holds the runs (``duequeue`` until due, ``waitqueue``
while every slot is busy), passes their ``gates`` (calendars, upstream jobs)
and ``admission`` (still wanted, concurrency), holds the fires of jobs with an
overlap buffer while a run is in flight (``buffers``), marks them started
(``start_marks``), holds them to their limits (``limits``, read by
``limit_book``), calls the target within its ``deadlines`` and ends each
attempt (``finisher``: final status, retries, ``dead_letters``);
``signing_book`` keeps the namespaces' signing keys. May import ``record``,
``jobs`` and the shared modules.
"""
