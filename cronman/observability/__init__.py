"""What an SRE reads: log format and context (``logs``), the scheduler's
health and metrics port (``node_endpoints``), bounded per-namespace series
(``namespace_series``) and ``cronman_build_info`` (``build_info``)."""
