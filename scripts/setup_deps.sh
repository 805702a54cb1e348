# Sourced by train.sh and test.sh: installs the Debian packages the build needs that are missing.
# As root it runs apt-get (one update, one install); otherwise it prints the command and stops.

# oneDNN and OpenBLAS in their OpenMP flavours: they share memgrad's libgomp threads instead of
# starting a second pool of spinning pthreads (CMakeLists.txt, MG_ONEDNN and MG_OPENBLAS).
MG_PACKAGES=(g++ cmake ninja-build make ccache libeigen3-dev libdnnl-dev libopenblas-openmp-dev doctest-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libopenmpi-dev openmpi-bin)
# The per-tensor planner's ILP (plan/per_tensor.cpp, CMake's MG_GLPK).
MG_PACKAGES+=(libglpk-dev)
# The fuzz targets (tests/fuzz): clang, its libFuzzer (libclang_rt.fuzzer in libclang-rt-14-dev) and OpenMP.
MG_FUZZ_PACKAGES=(clang libclang-rt-14-dev libomp-dev)
# The size limits' test (scripts/check_sizes.py) and the folder graph (scripts/folder_graph.py).
MG_PACKAGES+=(python3)
# The browser test (tests/browser): the memory timeline page in Debian's chromium, headless. test.sh
# installs it when it can (mg_try_install_packages); without it that test is skipped, and says so.
MG_BROWSER_PACKAGES=(chromium)

# The generator for a new build directory: Ninja (it schedules every target's compiles at once, and
# starts a program's own files before the library it links is done). A directory configured before
# keeps its generator (CMake refuses another), and so does a CMAKE_GENERATOR in the environment.
#   cmake -S ... -B "$build" $(mg_generator "$build") ...
mg_generator() {
  if [ ! -f "$1/CMakeCache.txt" ] && [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja >/dev/null; then
    echo "-G Ninja"
  fi
}

# The value of a CMake cache entry of build directory $1 (empty where there is none).
mg_cached() {
  sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt" 2>/dev/null | head -1
}

# The packages of "$@" that dpkg does not have, one per line.
mg_missing_packages() {
  local p
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || echo "$p"
  done
}

mg_install_packages() {
  local missing
  mapfile -t missing < <(mg_missing_packages "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "memgrad needs these Debian packages: ${missing[*]}" >&2
    echo "run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The same for packages only some tests need: what cannot be installed (not root, no network) is
# reported, and those tests skip.
mg_try_install_packages() {
  local missing
  mapfile -t missing < <(mg_missing_packages "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "note: ${missing[*]} not installed (sudo apt-get install -y ${missing[*]}); the tests that need it will skip" >&2
    return 0
  fi
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; }; then
    echo "note: could not install ${missing[*]}; the tests that need it will skip" >&2
  fi
  return 0
}
