"""The notification outbox's pure part: its records (``records``) and the rate
limit that places events in messages (``limiter``). The notifier makes what
goes in, the store keeps it; neither is imported here.
"""
