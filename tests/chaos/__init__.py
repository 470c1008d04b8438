"""The fault suite: a seeded nemesis applies faults to a real cluster while it
fires a steady load with herds; a checker accounts for every fire owed.

- ``checker``: pure; from the fires owed, the receiver's log, the run table
  and the API writes answered 2xx, decides each fire's outcome and the
  violations, and prints each with the faults and log lines around it.
- ``nemesis``: the seeded fault schedule (pure) and its application to a
  ``tests.cluster.harness.Cluster`` (SIGSTOP/SIGCONT, SIGKILL + restart of a
  node or of the API, a slow receiver, a node restarted with its clock off).
- ``proxy``: the TCP proxy in front of the receiver that makes it slow.
- ``run``: one chaos run end to end (shared by ``test_chaos`` and
  ``cronman bench --scenario chaos``).
"""
