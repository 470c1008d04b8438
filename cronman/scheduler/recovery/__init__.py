"""Recovery: what a node carries on besides its own fires: the leases of the
runs it holds, runs whose node stopped renewing theirs (``sweeper``), runs
the API asked for (``requested``), the daily run partitions
(``maintenance``), and the work queues' expiry (``work_leases``). May import ``dispatch``, ``record``, ``jobs`` and the
shared modules.
"""
