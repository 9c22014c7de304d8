"""docker-compose.yml, kept correct by reading: its services, commands and variables
against the settings module and the README (Docker does not run on the build machines)."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SETTINGS = (ROOT / "controlplane" / "settings.py").read_text()
README = (ROOT / "README.md").read_text()
GATEWAY = (ROOT / "gateway" / "demo.py").read_text()
APP_SERVICES = ("web", "worker", "beat")


def _settings_variables() -> set[str]:
    """Every environment variable the settings module reads."""
    calls = re.findall(
        r'(?:os\.environ\.get|env_\w+)\(\s*"([A-Z][A-Z0-9_]*)"', SETTINGS
    )
    return set(calls)


def test_compose__services__the_whole_system():
    assert set(COMPOSE["services"]) >= {"postgres", "redis", *APP_SERVICES, "gateway"}


def test_compose__app_services__same_settings_known_to_the_settings_module():
    known = _settings_variables()
    for name in APP_SERVICES:
        environment = COMPOSE["services"][name]["environment"]
        assert set(environment) <= known, name
        assert {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "SECRET_KEY"} <= set(
            environment
        )
        assert environment["DEBUG"] == "0"  # production settings, hence the SECRET_KEY


def test_compose__urls__point_at_the_compose_services():
    environment = COMPOSE["services"]["web"]["environment"]
    assert "@postgres:5432/" in environment["DATABASE_URL"]
    assert environment["REDIS_URL"].startswith("redis://redis:6379/")
    postgres = COMPOSE["services"]["postgres"]["environment"]
    admin = COMPOSE["services"]["migrate"]["environment"]["DATABASE_ADMIN_URL"]
    assert (
        f"postgres://postgres:{postgres['POSTGRES_PASSWORD']}@postgres:5432/" in admin
    )


def test_compose__database_roles__migrate_as_owner_run_as_the_runtime_role():
    # The one-shot migrate service sets up both roles and migrates as the owner
    migrate = COMPOSE["services"]["migrate"]
    assert "manage.py db_roles" in migrate["command"]
    assert "manage.py migrate" in migrate["command"]
    urls = migrate["environment"]
    owner = urls["DATABASE_MIGRATE_URL"].split("@")[0].split("//")[1].split(":")[0]
    runtime = urls["DATABASE_URL"].split("@")[0].split("//")[1].split(":")[0]
    assert len({"postgres", owner, runtime}) == 3
    # The application services connect as the runtime role alone, once it is done
    for name in APP_SERVICES:
        service = COMPOSE["services"][name]
        assert service["environment"]["DATABASE_URL"] == urls["DATABASE_URL"]
        assert not {"DATABASE_ADMIN_URL", "DATABASE_MIGRATE_URL"} & set(
            service["environment"]
        )
        assert service["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
        assert "manage.py migrate" not in str(service.get("command", ""))


def test_compose__commands__run_modules_that_exist():
    commands = {
        name: str(svc.get("command", "")) for name, svc in COMPOSE["services"].items()
    }
    assert "gunicorn controlplane.wsgi" in commands["web"]
    assert "celery -A controlplane worker" in commands["worker"]
    assert "celery -A controlplane beat" in commands["beat"]
    assert "python -m gateway.demo" in commands["gateway"]
    assert (ROOT / "controlplane" / "wsgi.py").exists()
    assert (ROOT / "gateway" / "demo.py").exists()


def test_compose__gateway__variables_the_demo_gateway_reads_and_the_token_web_writes():
    gateway = COMPOSE["services"]["gateway"]
    for variable in gateway["environment"]:
        assert variable in GATEWAY, variable
    token_file = gateway["environment"]["SLUICE_GATEWAY_TOKEN_FILE"]
    assert f"--gateway-token-file {token_file}" in str(
        COMPOSE["services"]["web"]["command"]
    )
    assert gateway["environment"]["SLUICE_CONTROL_PLANE_URL"] == "http://web:8000"


def test_readme__configuration_table__lists_every_setting_variable():
    table = set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)`", README, flags=re.MULTILINE))
    assert _settings_variables() <= table, _settings_variables() - table


def test_compose__web__healthy_when_ready_and_logs_json():
    web = COMPOSE["services"]["web"]
    assert "/readyz" in " ".join(web["healthcheck"]["test"])
    assert web["environment"]["SLUICE_LOG_FORMAT"] == "json"
    gateway = COMPOSE["services"]["gateway"]
    assert gateway["depends_on"]["web"] == {"condition": "service_healthy"}


def test_dockerfile__manage_py_at_build__given_a_key():
    # DEBUG is off by default, so the settings refuse to load without a SECRET_KEY
    dockerfile = (ROOT / "Dockerfile").read_text()
    runs = [
        line
        for line in dockerfile.splitlines()
        if "python manage.py" in line and not line.lstrip().startswith("#")
    ]
    assert runs
    assert all("SECRET_KEY=" in command for command in runs), runs
