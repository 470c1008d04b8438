"""How each process of cronman is put together (SPEC §1): the one place that
imports the layers side by side -- API, scheduler, store, coordination,
callbacks -- and wires them. Nothing below imports from here.

- ``standalone``: the API, one scheduler node (and a ``process`` agent) on
  SQLite, in one process;
- ``scheduler``: one scheduler node of a cluster;
- ``api``: the API app with its backends (gunicorn, ``wsgi.py``);
- ``agent``: a worker agent;
- ``notifier``, ``audit``: the notifier and the audit exporter beside a node.
"""
