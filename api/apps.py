from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The REST API: thin DRF views over the services of ``limits``."""

    name = "api"
    verbose_name = "API"
