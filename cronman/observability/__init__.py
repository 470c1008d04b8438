"""What an SRE reads: log format and context (``logs``), the scheduler's
health and metrics port (``node_endpoints``), bounded per-namespace series
(``namespace_series``), the cluster's members as one process sees them
(``members``) and ``cronman_build_info`` (``build_info``)."""
