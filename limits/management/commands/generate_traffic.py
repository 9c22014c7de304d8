"""Drive the demo gateway with traffic from the tenants of the rules (``gateway/traffic.py``)."""

from django.core.management.base import BaseCommand, CommandError

from gateway.traffic import DEFAULT_TENANTS, add_options, check_loopback, generate
from gateway.traffic import Plan as TrafficPlan
from limits.models import Tenant


class Command(BaseCommand):
    help = "Send skewed traffic through the demo gateway, so the dashboards have something to show."

    def add_arguments(self, parser):
        # Empty: the tenants of the rules, cheapest tier first, so the heaviest
        # senders are the ones with the lowest limits (the usual story).
        add_options(parser, tenants="")

    def handle(self, *args, **options):
        if not options["allow_remote"]:
            try:
                check_loopback(options["gateway"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        tenants = [t for t in options["tenants"].split(",") if t] or list(
            Tenant.objects.order_by("tier__position", "slug").values_list(
                "slug", flat=True
            )[:8]
        )
        plan = TrafficPlan(
            gateway=options["gateway"],
            rate=options["rate"],
            seconds=options["seconds"],
            workers=options["workers"],
            tenants=tenants or DEFAULT_TENANTS,
            seed=options["seed"],
        )
        self.stdout.write(
            f"{plan.rate:g} requests/s for {plan.seconds:g} s to {plan.gateway}"
        )
        self.stdout.write("\n".join(generate(plan).lines()))
