"""Notifications: tell people when jobs fail, are lost, recover, or run late.

Rules (``rules``) come from a job's ``notify`` field and from namespace-wide
rules. The notifier (``notifier``), one per scheduler node and one active per
cluster (``leadership``), derives events from the run history in the
database (``detector``: failures and recoveries through ``detect``, late
fires through ``late``), places them in messages under the rate limit
(``limiter``) in the outbox -- written before anything is sent -- and sends
them by email or webhook (``email``, ``senders``, ``delivery``), retrying and
recording every attempt.

This package's ``__init__`` imports nothing: ``rules`` is used by the API's
validation, which the light client (``cronman jobs apply``) loads too.
"""
