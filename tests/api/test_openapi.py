"""The OpenAPI schema and its documentation pages, served from local files."""

import re

import pytest
import yaml

pytestmark = pytest.mark.django_db


def test_schema__every_operation__stable_id_and_documented_errors(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    operations = [op for path in schema["paths"].values() for op in path.values()]
    ids = [op["operationId"] for op in operations]
    assert len(ids) == len(set(ids))
    for op in operations:
        assert {"400", "401", "403"} <= set(op["responses"]), op["operationId"]
    assert "412" in schema["paths"]["/api/v1/tiers/{slug}"]["patch"]["responses"]


@pytest.mark.parametrize("page", ["/api/docs/", "/api/redoc/"])
def test_docs_page__assets__served_locally_without_cdn(client, page):
    html = client.get(page).content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources
    assert all(not s.startswith(("http:", "https:", "//")) for s in sources), sources
    assert any("drf_spectacular_sidecar" in s for s in sources)
