"""Installing llama.cpp so that it runs on the machine that installed it (`python -m autotune.install`).

The build flags name the instruction sets this machine enables, never AMX (`cpu_isa`), plus the GPU
backend found here (`build_args`); a CUDA build also gets nvcc and a host compiler it accepts (`cuda_env`);
each (source, flags, compilers) is compiled once and kept (`wheelhouse`).
Standard library only: it runs before autotune's own dependencies are installed.
"""
