"""Webhooks go to public addresses only, unless SLUICE_WEBHOOK_ALLOW_PRIVATE (limits.core.egress).

The suite runs with it on (receivers listen on 127.0.0.1); these tests turn it
off, as production settings do, and try what a careless or hostile URL would.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from limits.announcements.webhooks import webhook_post
from limits.core.egress import address_allowed, url_problem
from limits.models import WebhookEndpoint
from tests.factories import TenantFactory
from tests.limits.announce_fixtures import endpoint_for

#: Seconds a delivery may wait for the receiver (a thread of this process): what is
#: checked is whether the request is sent, not how fast a loaded machine answers it.
PATIENT = 120


@pytest.fixture
def private_refused(settings):
    settings.SLUICE_WEBHOOK_ALLOW_PRIVATE = False


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data/",  # a cloud metadata service
        "https://10.1.2.3/hook",
        "http://[::1]:6379/",
        "http://[::ffff:192.168.1.10]/hook",  # a private IPv4 written as IPv6
        "http://100.64.0.1/hook",  # shared address space (carrier-grade NAT)
        # IPv6 forms that reach an IPv4 address through a translator or tunnel
        "http://[64:ff9b::7f00:1]/hook",  # NAT64 of 127.0.0.1
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",  # NAT64 of the metadata service
        "http://[64:ff9b:1::a00:1]/hook",  # local-use NAT64 (RFC 8215)
        "http://[2002:a9fe:a9fe::1]/latest/meta-data/",  # 6to4 of 169.254.169.254
        "http://[2002:7f00:1::]/hook",  # 6to4 of 127.0.0.1
        "http://[::127.0.0.1]/hook",  # IPv4-compatible loopback
        "http://[::a9fe:a9fe]/latest/meta-data/",  # IPv4-compatible metadata service
        "http://[::ffff:169.254.169.254]/latest/meta-data/",  # IPv4-mapped
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",  # Teredo to 127.0.0.1
    ],
)
@pytest.mark.django_db
def test_endpoint_create__private_address__refused_on_the_url_field(
    private_refused, url
):
    # Given production settings; When support registers an endpoint at a private address
    with pytest.raises(ValidationError) as refused:
        endpoint_for(TenantFactory(), url)
    # Then the URL field says why, and nothing is stored
    assert "public addresses only" in refused.value.message_dict["url"][0]
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.django_db
def test_endpoint_create__public_address_or_host_name__accepted(private_refused):
    tenant = TenantFactory()
    for url in ("https://93.184.215.14/hook", "https://hooks.acme.test/x"):
        endpoint_for(tenant, url)
    assert WebhookEndpoint.objects.count() == 2


def test_webhook_post__connection_reaches_a_private_address__nothing_sent(
    private_refused, receiver
):
    # Given a URL that got past the save-time check (a host name that resolves,
    # or was re-pointed, to a private address: here the connection lands on loopback)
    # When a delivery is attempted
    result = webhook_post(
        url=receiver.url, body=b"{}", headers={"X-Test": "1"}, timeout=PATIENT
    )
    # Then the connection is dropped before a byte of the request is sent
    assert not result.ok
    assert "not a public address" in result.error
    assert receiver.requests == []


def test_webhook_post__private_allowed__delivered(settings, receiver):
    settings.SLUICE_WEBHOOK_ALLOW_PRIVATE = True
    result = webhook_post(url=receiver.url, body=b"{}", headers={}, timeout=PATIENT)
    assert result.ok
    assert len(receiver.requests) == 1


def test_address_allowed__public_and_private(private_refused):
    assert address_allowed("93.184.215.14")
    assert address_allowed("2606:4700:4700::1111")
    assert address_allowed("64:ff9b::5db8:d70e")  # NAT64 of a public IPv4 address
    assert address_allowed("2002:5db8:d70e::1")  # 6to4 of a public IPv4 address
    assert not address_allowed("192.168.0.1")
    assert not address_allowed("fe80::1%eth0")
    assert url_problem("https://hooks.example.test/x") is None
