"""A demo API gateway: sample backends behind Sluice's enforcement client (``gateway.demo``)."""
