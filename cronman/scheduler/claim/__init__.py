"""Claiming: fires due soon leave the job table and are claimed, the
coordinator's lock first and the run row's uniqueness behind it (``batch``);
the ``claimer`` runs the batches and hands winners to the dispatcher; fires
lost to a replica are watched (``standby``) and taken over only from a gone
or stalled holder, as its ``pulse`` says. May import ``dispatch``,
``record``, ``jobs`` and the shared modules.
"""
