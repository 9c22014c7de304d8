from datetime import UTC, datetime, timedelta

import pytest

from limits.enforcement import Dimension, Limit, Policy, Route, Rules


@pytest.fixture
def rules_with_override():
    expires_at = datetime(2026, 12, 1, tzinfo=UTC) + timedelta(days=1)
    per_tenant = Limit(Dimension.TENANT, 10, 1, 20)
    rules = Rules(
        tiers={"pro": "Pro"},
        tenants={"acme": "pro"},
        routes={"search": Route("search", ("GET",), "/v1/search")},
        policies=(
            Policy("default", "*", (per_tenant,)),
            Policy("tier:pro", "search", (Limit(Dimension.TENANT, 50, 1, 100),)),
            Policy(
                "tenant:acme",
                "search",
                (Limit(Dimension.TENANT, 500, 1, 1000),),
                expires_at=expires_at,
            ),
        ),
    )
    return rules, expires_at
