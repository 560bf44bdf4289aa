"""Run llama-cpp-python's server (`python -m llama_cpp.server`, same arguments) without
llama.cpp's extra buffer types, as llama.cpp's own server does with `--no-extra-bufts`.

The extra buffer types are ggml's optional CPU kernels (the AMX tiles, repacked weight layouts):
a build that includes them picks them by what the CPU it was built on reports, and traps with an
invalid opcode on a virtual CPU of the same kind that lacks them. llama-cpp-python's server has no
setting for them, so the model's default parameters are patched before the server loads it.
"""

from __future__ import annotations

import importlib
import runpy
import sys
from typing import Any

lib: Any = importlib.import_module("llama_cpp.llama_cpp")
_default = lib.llama_model_default_params


def _without_extra_buffer_types() -> Any:
    params = _default()
    # A ctypes structure takes any attribute: without the field, setting it would do nothing.
    if "use_extra_bufts" not in {f[0] for f in type(params)._fields_}:
        sys.stderr.write(
            "portable_llama: this llama-cpp-python has no use_extra_bufts; the server runs with "
            "its extra buffer types, as its build chose them\n"
        )
        return params
    params.use_extra_bufts = False
    return params


lib.llama_model_default_params = _without_extra_buffer_types
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
