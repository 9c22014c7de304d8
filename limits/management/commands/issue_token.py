"""Issue a gateway token or an API token from the command line; prints the secret once."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import ApiToken, GatewayToken


class Command(BaseCommand):
    help = "Issue a token and print its secret (shown once, stored hashed)."

    def add_arguments(self, parser):
        parser.add_argument(
            "name", help="What will use it, e.g. gw-eu-1 or ci-publisher."
        )
        kind = parser.add_mutually_exclusive_group(required=True)
        kind.add_argument(
            "--gateway", action="store_true", help="A gateway token (read snapshots)."
        )
        kind.add_argument(
            "--user", help="An API token acting as this user, with the user's role."
        )

    def handle(self, *args, name: str, gateway: bool, user: str | None, **options):
        if gateway:
            token = GatewayToken(name=name)
        else:
            owner = get_user_model().objects.filter(username=user).first()
            if owner is None:
                raise CommandError(f"There is no user {user!r}.")
            token = ApiToken(user=owner, name=name)
        secret = token_create(token=token, actor=Actor.system("issue_token"))
        self.stdout.write(secret)
