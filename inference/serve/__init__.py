"""HaluGate as an HTTP service and an OpenAI-compatible proxy (`python -m inference.serve`, docs/serve.md).

    from inference.serve import create_app, ServeSettings
    app = create_app(HaluGate.from_config("configs/inference.yaml"), ServeSettings(upstream="http://127.0.0.1:8000/v1"))

Needs the `serve` extra (starlette, uvicorn, httpx, prometheus-client); ONNX Runtime only, no torch.
"""

from inference.serve.app import create_app
from inference.serve.config import ServeSettings, load

__all__ = ["ServeSettings", "create_app", "load"]
