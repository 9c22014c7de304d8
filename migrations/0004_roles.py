"""The product, support and viewer groups with their permissions."""

from django.contrib.auth.management import create_permissions
from django.db import migrations


def create_role_groups(apps, schema_editor):
    from limits.core.roles import sync_role_groups

    for app_config in apps.get_app_configs():  # permissions are otherwise made after migrate
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    sync_role_groups(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0003_default_policy"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(create_role_groups, migrations.RunPython.noop)]
