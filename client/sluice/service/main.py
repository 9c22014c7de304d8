"""``sluice-decide``: the decision service, one process, both protocols.

::

    sluice-decide --control-plane http://cp:8000 --token-file /run/secrets/gw \\
        --redis redis://redis:6379/0 --gateway-id envoy-eu-1

It polls the control plane exactly as an embedded client does
(:class:`~sluice.source.SnapshotSource`: ETag, jitter, the last good bundle on
disk, the fleet report under ``--gateway-id``), decides with
:class:`~sluice.aio.AsyncLimiter`, writes decision events to the control
plane's stream, and serves Envoy's RLS over gRPC (``--grpc``) and forward-auth
over HTTP (``--http``, uvicorn) on one asyncio loop (uvloop's, when installed)
per worker: ``--workers`` processes, one per core by default, share the ports
(:mod:`.workers`). ``docs/gateways/`` has the options, the mappings and each
gateway's configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from sluice import protocol
from sluice.aio import AsyncLimiter
from sluice.bucket import connect, connect_async
from sluice.metrics import DecisionEvents
from sluice.pipelining import DEFAULT_MAX_BATCH
from sluice.signing import KeyRing
from sluice.source import SnapshotSource

from .access import ALLOWED_NETWORKS, Access
from .decider import Decider
from .http import BUDGET, DecisionApp
from .request import DescriptorKeys, HeaderNames, parse_mapping
from .workers import check_free, listening_socket, supervise

if TYPE_CHECKING:
    import grpc

__all__ = ["Service", "build", "main", "parse_args"]

logger = logging.getLogger("sluice.service")

_LIST_HEADERS = ("method", "path")
#: Seconds per Redis call by default (docs/gateways/README.md says why).
REDIS_TIMEOUT = 0.025


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of ``sluice-decide`` (see ``docs/gateways/README.md``)."""
    parser = argparse.ArgumentParser(
        prog="sluice-decide",
        description="Sluice's decision service: Envoy RLS (gRPC) and forward-auth (HTTP).",
    )
    add = parser.add_argument
    add("--control-plane", required=True, help="control plane base URL")
    add("--token", default="", help="gateway token (or --token-file)")
    add("--token-file", help="file holding the gateway token")
    add(
        "--public-keys",
        default=os.environ.get("SLUICE_PUBLIC_KEYS"),
        help="the keys bundles must be signed with: the control plane's "
        "/.well-known/sluice-keys.json, saved (or $SLUICE_PUBLIC_KEYS); required",
    )
    add("--gateway-id", default=socket.gethostname(), help="id on the fleet page")
    add("--cache", help="last good rules on disk (default .sluice/decide-<id>.json)")
    add("--poll-interval", type=float, default=5.0, help="seconds between polls")
    add("--redis", default="redis://127.0.0.1:6379/0", help="Redis of the buckets")
    add(
        "--redis-cluster",
        action="store_true",
        help="--redis names cluster nodes (seeds, comma-separated)",
    )
    add(
        "--redis-timeout",
        type=float,
        default=REDIS_TIMEOUT,
        help="seconds per Redis call",
    )
    add(
        "--budget",
        type=float,
        default=BUDGET,
        help="seconds a forward-auth decision may take (gRPC: half the call's deadline)",
    )
    add(
        "--workers",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="processes sharing the ports (default: one per core)",
    )
    add("--events-redis", help="Redis of the decision stream (default --redis)")
    add("--no-events", action="store_true", help="write no decision events")
    add("--grpc", default="127.0.0.1:8081", help="RLS address, or 'off'")
    add("--http", default="127.0.0.1:8082", help="forward-auth address, or 'off'")
    add(
        "--gateway-logs",
        action="store_true",
        help="Envoy logs the requests it decided itself to this service (the access_log "
        "of envoy.yaml and envoy-ext-authz.yaml): record calls a gateway stops waiting "
        "for from that log only",
    )
    add("--trusted-proxy", action="append", default=[], metavar="CIDR")
    add(
        "--allow-from",
        action="append",
        default=[],
        metavar="CIDR",
        help="peers both faces answer (repeat; default loopback and private "
        "networks: " + ", ".join(ALLOWED_NETWORKS) + "); others get 403 "
        "(HTTP) or PERMISSION_DENIED (gRPC)",
    )
    add(
        "--http-token-file",
        help="file holding a shared token the HTTP face requires in Sluice-Token",
    )
    add(
        "--grpc-token-file",
        help="file holding a shared token the gRPC face requires in the "
        "sluice-token metadata",
    )
    add("--tls-cert", help="PEM certificate: both faces speak TLS")
    add("--tls-key", help="PEM private key of --tls-cert")
    add("--tls-client-ca", help="PEM CAs: both faces require a client certificate")
    add("--descriptor", action="append", default=[], metavar="FIELD=KEY")
    add("--header", action="append", default=[], metavar="FIELD=NAME[,NAME]")
    add("--no-pipelining", action="store_true", help="one Redis call per decision")
    add("--max-batch", type=int, default=DEFAULT_MAX_BATCH, help="calls per round trip")
    add("--github-headers", action="store_true", help="add X-RateLimit-*")
    add("--retry-jitter", type=float, default=0.0, help="seconds of Retry-After jitter")
    add("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if not args.public_keys:
        parser.error("--public-keys (or SLUICE_PUBLIC_KEYS) is required")
    return args


def header_names(pairs: Sequence[str]) -> HeaderNames:
    """``HeaderNames`` from ``field=Name`` strings (``method`` and ``path``: comma lists)."""
    changes: dict[str, object] = {}
    known = HeaderNames.__dataclass_fields__
    for pair in pairs:
        name, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or name not in known or not value:
            raise ValueError(f"expected FIELD=NAME, FIELD one of {', '.join(known)}")
        split = tuple(v.strip() for v in value.split(",") if v.strip())
        changes[name] = split if name in _LIST_HEADERS else value
    return replace(HeaderNames(), **changes)  # type: ignore[arg-type]


@dataclass
class Service:
    """The assembled service: what polls, decides, reports, and the two faces."""

    source: SnapshotSource
    limiter: AsyncLimiter
    events: DecisionEvents | None
    decider: Decider
    keys: DescriptorKeys
    app: DecisionApp


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        return _read(args.token_file)
    return str(args.token)


def _read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8").strip()


def _public_keys(path: str) -> KeyRing:
    try:
        return KeyRing.load(path)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"sluice-decide: --public-keys {path}: {exc}") from None


def build(args: argparse.Namespace) -> Service:
    """Assemble the service from its command line; nothing starts yet."""
    source = SnapshotSource(
        args.control_plane.rstrip("/") + protocol.SNAPSHOT_PATH,
        _token(args),
        gateway_id=args.gateway_id,
        public_keys=_public_keys(args.public_keys),
        cache_path=args.cache or f".sluice/decide-{args.gateway_id}.json",
        interval=args.poll_interval,
    )
    events = None
    if not args.no_events:
        events = DecisionEvents(
            connect(
                args.events_redis or args.redis,
                timeout=2.0,
                cluster=args.redis_cluster and not args.events_redis,
            ),
            gateway_id=args.gateway_id,
        )
    client = connect_async(
        args.redis, timeout=args.redis_timeout, cluster=args.redis_cluster
    )
    limiter = AsyncLimiter(
        client,
        source,
        events=events,
        pipelining=not args.no_pipelining,
        max_batch=args.max_batch,
    )
    decider = Decider(
        limiter,
        github_headers=args.github_headers,
        retry_jitter=args.retry_jitter,
        gateway_logs=args.gateway_logs,
    )
    app = DecisionApp(
        decider,
        names=header_names(args.header),
        trusted_proxies=args.trusted_proxy,
        budget=args.budget,
        access=_access(args, args.http_token_file),
    )
    keys = parse_mapping(args.descriptor, DescriptorKeys())
    return Service(source, limiter, events, decider, keys, app)


def _access(args: argparse.Namespace, token_file: str | None) -> Access:
    """Who may ask one face: ``--allow-from``'s networks and that face's token."""
    return Access(
        args.allow_from or ALLOWED_NETWORKS, _read(token_file) if token_file else ""
    )


def _address(value: str) -> tuple[str, int] | None:
    if value == "off":
        return None
    host, _, port = value.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


async def serve(
    service: Service, args: argparse.Namespace, *, shared: bool = False
) -> None:
    """Serve gRPC and HTTP until SIGINT or SIGTERM; ``shared``: beside other
    workers on the same ports."""
    stop = asyncio.Event()
    grpc_server = None
    if (grpc_at := _address(args.grpc)) is not None:
        grpc_server = await _start_grpc(service, grpc_at, args, shared=shared)
    http_at = _address(args.http)
    logger.info(
        "service.listening: grpc %s, http %s, gateway id %s, pid %d",
        args.grpc,
        args.http,
        args.gateway_id,
        os.getpid(),
    )
    try:
        if http_at is not None:
            sock = listening_socket(*http_at, shared=shared)
            await _serve_http(service, sock, args)
        else:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
    finally:
        if grpc_server is not None:
            await grpc_server.stop(grace=1.0)
        await service.limiter.aclose()


async def _start_grpc(
    service: Service, at: tuple[str, int], args: argparse.Namespace, *, shared: bool
) -> grpc.aio.Server:
    import grpc

    from . import accesslog, rls
    from .access import GrpcGate

    server = grpc.aio.server(
        options=[("grpc.so_reuseport", int(shared))],
        interceptors=[GrpcGate(_access(args, args.grpc_token_file))],
    )
    rls.add_to_server(
        server,
        rls.RateLimitService(service.decider, keys=service.keys),
    )
    accesslog.add_to_server(
        server, accesslog.GatewayDecisions(service.decider, names=service.app.names)
    )
    host = f"[{at[0]}]" if ":" in at[0] else at[0]
    if args.tls_cert:
        credentials = grpc.ssl_server_credentials(
            [(Path(args.tls_key).read_bytes(), Path(args.tls_cert).read_bytes())],
            root_certificates=(
                Path(args.tls_client_ca).read_bytes() if args.tls_client_ca else None
            ),
            require_client_auth=bool(args.tls_client_ca),
        )
        server.add_secure_port(f"{host}:{at[1]}", credentials)
    else:
        server.add_insecure_port(f"{host}:{at[1]}")
    await server.start()
    return server


async def _serve_http(
    service: Service, sock: socket.socket, args: argparse.Namespace
) -> None:
    import ssl

    import uvicorn

    config = uvicorn.Config(
        service.app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        server_header=False,
        date_header=False,
        # the client address is the peer's, or X-Forwarded-For's behind a
        # --trusted-proxy (DecisionApp); uvicorn must not rewrite it first
        proxy_headers=False,
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
        ssl_ca_certs=args.tls_client_ca,
        ssl_cert_reqs=ssl.CERT_REQUIRED if args.tls_client_ca else ssl.CERT_NONE,
    )
    await uvicorn.Server(config).serve(sockets=[sock])


def _event_loop() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop when it is installed (the ``service`` extra has it), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def run_worker(argv: Sequence[str], index: int | None = None) -> None:
    """One worker: poll, decide and serve until SIGINT or SIGTERM (``index``: its
    number among several, which share the ports)."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(name)s "
        + ("" if index is None else f"[worker {index}] ")
        + "%(message)s",
    )
    service = build(args)
    service.source.start()
    if service.events is not None:
        service.events.start()
    try:
        with asyncio.Runner(loop_factory=_event_loop()) as runner:
            runner.run(serve(service, args, shared=index is not None))
    finally:
        service.source.stop()
        if service.events is not None:
            service.events.stop()


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``sluice-decide``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.workers <= 1:
        return run_worker(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s"
    )
    ports = [a for a in (_address(args.grpc), _address(args.http)) if a is not None]
    try:
        check_free(ports)
    except OSError as exc:
        raise SystemExit(f"sluice-decide: {exc}") from None
    sys.exit(supervise(args.workers, functools.partial(run_worker, argv)))


if __name__ == "__main__":
    main()
