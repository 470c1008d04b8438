"""Jobs: which this node owns and when they fire next.

Membership (join, heartbeat, the live members, their view key), ownership
kept in step with the database (``sync``: first load, the change feed,
polling, membership changes; ``gains`` prepared ahead), the job table
(owned jobs, their timers, misfire counting), the calendars' book, and the
``JobSource`` the later stages read jobs through. May import ``fires``,
``policies`` and ``runtime`` only.
"""
