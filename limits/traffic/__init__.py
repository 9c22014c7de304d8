"""What the gateways' traffic looks like: decisions rolled up, shown and exported.

``stats`` (the decision stream, aggregated into per-minute counts and a log of
rejections, exactly once), ``tally`` (one batch of events counted and written),
``dashboards`` (the reads behind the traffic pages), ``charts`` (inline SVG),
``metrics`` (``GET /metrics`` for Prometheus), ``tasks``.
"""
