"""python -m inference.serve --config configs/inference.yaml --upstream URL [--host 127.0.0.1] [--port 8080]

Loads the models (a model that fails to load makes results `unavailable`; /readyz says why), then serves
until SIGINT / SIGTERM; on shutdown, in-flight requests finish (up to serve.shutdown_timeout_s).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys

from inference.config import ConfigError
from inference.detect import HaluGate
from inference.serve import create_app, load
from inference.settings import default_config_path

log = logging.getLogger("halugate.serve")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m inference.serve", description="HaluGate as an HTTP service and an OpenAI-compatible proxy.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python -m inference.serve --config configs/inference.yaml "
               "--upstream http://127.0.0.1:8000/v1 --port 8080")
    p.add_argument("--config", default=None, help="inference YAML (default: configs/inference.yaml when present)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value, e.g. serve.max_batch=32 or hallucination_mitigation.fail_mode=closed")
    p.add_argument("--upstream", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (serve.upstream)")
    p.add_argument("--host", help="bind address (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=int, help="port (default 8080)")
    p.add_argument("--no-batching", action="store_true", help="one input per model call (serve.batching=false)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per upstream call otherwise (URLs only)
    config = args.config or default_config_path()  # ./configs/inference.yaml, else the packaged defaults
    try:
        import uvicorn

        settings, serve = load(config, args.overrides)
        # explicit flags set the fields directly (no "key=value" string round trip), then are validated
        for key, value in (("upstream", args.upstream), ("host", args.host), ("port", args.port)):
            if value is not None:
                setattr(serve, key, value)
        serve.batching = serve.batching and not args.no_batching
        try:
            serve.validate()
        except ValueError as exc:
            raise ConfigError(f"serve.{exc}") from None
        # a server waits on requests between batches: spinning threads would burn the cores they wait on
        settings.hallucination_mitigation.spin_wait = False
        tokens = serve.auth_tokens()
        gate = HaluGate(settings)
    except (ConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"error: {exc}; install the serve extra: pip install '.[serve]'", file=sys.stderr)
        return 2
    try:
        loopback = ipaddress.ip_address(serve.host).is_loopback
    except ValueError:
        loopback = serve.host == "localhost"
    if not loopback:
        log.warning("binding to %s: reachable beyond this machine%s", serve.host,
                    "" if tokens else " and no serve.auth_token_env is set")
    if not serve.upstream:
        log.warning("no upstream (--upstream): only /v1/detect, /healthz, /readyz and /metrics are served")
    app = create_app(gate, serve, auth_tokens=tokens)
    log.info("halugate serve on http://%s:%d (upstream %s, batching %s)", serve.host, serve.port,
             serve.upstream or "none", "on" if serve.batching else "off")
    uvicorn.run(app, host=serve.host, port=serve.port, log_level=args.log_level, access_log=False,
                timeout_graceful_shutdown=serve.shutdown_timeout_s or None, timeout_keep_alive=serve.keep_alive_s,
                lifespan="on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
