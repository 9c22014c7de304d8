"""nginx enforcing with Sluice's Lua module, for ``make run``: the demo backends on 10004.

``python -m gateway.nginx`` writes ``var/nginx/nginx.conf`` from
``docs/gateways/nginx-module.conf`` with this machine's values (the control
plane's address, the Redis of ``REDIS_URL``, the client package's folder, the
demo token), then runs nginx on it in the foreground. Settings come from the
environment, like the demo gateway's: ``SLUICE_CONTROL_PLANE_URL``,
``SLUICE_REDIS_URL``, ``SLUICE_GATEWAY_TOKEN_FILE``, ``SLUICE_GATEWAY_ID``,
``SLUICE_NGINX_PORT`` (10004), ``SLUICE_REDIS_TIMEOUT`` (seconds),
``SLUICE_NGINX_PREFIX`` (nginx's folder, ``var/nginx``), ``SLUICE_BACKENDS_PORT``
(8090, the demo backends: ``gateway.backends``), ``SLUICE_PUBLIC_KEYS`` (the keys
bundles must be signed with; by default the development key's, as the demo
gateway does: ``gateway.demo``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.parse
from pathlib import Path

import sluice
from sluice.signing import KeyRing, dev_signing_key

__all__ = ["main", "render"]

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "docs" / "gateways" / "nginx-module.conf"
#: The control plane's development key (``limits.core.signing``), made on first use.
DEV_KEY_PATH = ROOT / ".sluice" / "signing-key.pem"


def render(
    *,
    control_plane: str,
    redis_url: str,
    gateway_id: str,
    port: int,
    backends: int,
    prefix: Path,
    redis_timeout_ms: int,
    public_keys: Path,
) -> str:
    """The documented configuration with this machine's values in place of its examples."""
    redis = urllib.parse.urlsplit(redis_url)
    database = (redis.path or "/0").strip("/") or "0"
    client = Path(sluice.__file__).resolve().parent.parent
    text = TEMPLATE.read_text()
    replacements = {
        '"http://127.0.0.1:8000"': f'"{control_plane}"',
        '"nginx-module-1"': f'"{gateway_id}"',
        'cache = "sluice-rules.json"': f'cache = "{prefix}/sluice-rules.json"',
        'public_keys = "sluice-keys.json"': f'public_keys = "{public_keys}"',
        "poll_interval = 5,": "poll_interval = 2,",
        'redis = "127.0.0.1:6379",': (
            f'redis = "{redis.hostname or "127.0.0.1"}:{redis.port or 6379}", '
            f"redis_db = {database},"
        ),
        "redis_timeout = 50,": f"redis_timeout = {redis_timeout_ms},",
        "listen 127.0.0.1:10004;": f"listen 127.0.0.1:{port};",
        "server 127.0.0.1:8090;": f"server 127.0.0.1:{backends};",
        "/opt/sluice/client/": f"{client}/",
    }
    for example, value in replacements.items():
        if example not in text:
            raise RuntimeError(f"{TEMPLATE} no longer says {example!r}")
        text = text.replace(example, value)
    return text


def _public_keys(prefix: Path) -> Path:
    """``SLUICE_PUBLIC_KEYS``, or the development key's set written in ``prefix``."""
    given = os.environ.get("SLUICE_PUBLIC_KEYS")
    if given:
        return Path(given).resolve()
    path = prefix / "sluice-keys.json"
    path.write_text(json.dumps(KeyRing([dev_signing_key(DEV_KEY_PATH)]).to_json()))
    return path


def main() -> None:
    prefix = Path(os.environ.get("SLUICE_NGINX_PREFIX", ROOT / "var" / "nginx"))
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    prefix.chmod(
        0o777
    )  # run as root, nginx's workers are nobody: they write the rules here
    config = prefix / "nginx.conf"
    config.write_text(
        render(
            control_plane=os.environ.get(
                "SLUICE_CONTROL_PLANE_URL", "http://127.0.0.1:8000"
            ),
            redis_url=os.environ.get("SLUICE_REDIS_URL", "redis://127.0.0.1:6379/0"),
            gateway_id=os.environ.get("SLUICE_GATEWAY_ID", "nginx-demo"),
            port=int(os.environ.get("SLUICE_NGINX_PORT", "10004")),
            backends=int(os.environ.get("SLUICE_BACKENDS_PORT", "8090")),
            prefix=prefix,
            redis_timeout_ms=round(
                1000 * float(os.environ.get("SLUICE_REDIS_TIMEOUT", "0.05"))
            ),
            public_keys=_public_keys(prefix),
        )
    )
    token_file = os.environ.get("SLUICE_GATEWAY_TOKEN_FILE")
    if token_file:
        os.environ["SLUICE_GATEWAY_TOKEN"] = Path(token_file).read_text().strip()
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    command = [nginx, "-p", str(prefix), "-e", "stderr", "-c", str(config)]
    sys.stdout.flush()
    os.execv(nginx, command)


if __name__ == "__main__":
    main()
