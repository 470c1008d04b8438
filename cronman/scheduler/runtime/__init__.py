"""What every stage of a node shares: its clock (the cluster's reference time),
its lifecycle (stop signal, worker pools), its metrics, rate-limited logs, the
timer heap (the job table's timers, the dispatcher's due queue) and the C
heap's trim. Imports nothing of the scheduler."""
