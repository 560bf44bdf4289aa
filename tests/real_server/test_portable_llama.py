"""`portable_llama.py` starts llama-cpp-python's server with the model's extra buffer types off, as
the server's own code asks for the model's parameters (`llama.py` calls
`llama_cpp.llama_cpp.llama_model_default_params()`), and says so when its llama-cpp-python has no
such setting instead of setting an attribute nothing reads. A stand-in `llama_cpp` package plays
llama-cpp-python, so this runs everywhere."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from .conftest import PORTABLE_LLAMA

SERVER_MAIN = """
import sys
import llama_cpp.llama_cpp as llama_cpp  # as llama.py imports it

params = llama_cpp.llama_model_default_params()
print(sys.argv[1:], params.use_mmap, getattr(params, "use_extra_bufts", "absent"))
"""


def _stand_in(root: Path, fields: list[str]) -> None:
    pkg = root / "llama_cpp"
    (pkg / "server").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "llama_cpp.py").write_text(
        textwrap.dedent(f"""
        from ctypes import Structure, c_bool

        class llama_model_params(Structure):
            _fields_ = [(name, c_bool) for name in {fields!r}]

        def llama_model_default_params():
            return llama_model_params(*([True] * {len(fields)}))
        """)
    )
    (pkg / "server" / "__init__.py").write_text("")
    (pkg / "server" / "__main__.py").write_text(SERVER_MAIN)


def _serve(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, str(PORTABLE_LLAMA), "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_the_server_gets_the_model_without_extra_buffer_types(tmp_path: Path) -> None:
    _stand_in(tmp_path, ["use_mmap", "use_extra_bufts"])
    done = _serve(tmp_path)
    assert done.stdout.strip() == "['--port', '1'] True False"  # its arguments, passed on
    assert done.stderr == ""


def test_a_llama_cpp_python_without_the_setting_is_said_so(tmp_path: Path) -> None:
    _stand_in(tmp_path, ["use_mmap"])
    done = _serve(tmp_path)
    assert done.stdout.strip() == "['--port', '1'] True absent"  # nothing set on the structure
    assert "portable_llama: this llama-cpp-python has no use_extra_bufts" in done.stderr
