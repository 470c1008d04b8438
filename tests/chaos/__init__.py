"""The fault suite: a seeded nemesis applies faults to a real cluster while it
fires a steady load with herds; a checker accounts for every fire owed.

- ``checker``: pure; from the fires owed, the receiver's log, the run table
  and the API writes answered 2xx, decides each fire's outcome and the
  violations, and prints each with the faults and log lines around it.
- ``nemesis``: the seeded fault schedule (pure) and its application to a
  ``tests.cluster.harness.Cluster`` (SIGSTOP/SIGCONT, SIGKILL + restart of a
  node, of the API, of ``cronman worker`` or of the container agent, a slow
  receiver, a node restarted with its clock off, partitions, slow and lossy
  links, a Redis Sentinel failover, a PostgreSQL outage, a Patroni failover).
- ``proxy``: the TCP proxy in front of the receiver and of the partition
  node's backends that makes them slow, cut or lossy.
- ``netns``: the partition node's network namespace.
- ``services``: Redis under Sentinel that fails over again and again, the
  database on a Patroni cluster that does too, the database outage,
  ``cronman worker`` and the container agent.
- ``run``: one chaos run end to end (shared by ``test_chaos`` and
  ``cronman bench --scenario chaos``).
"""
