# Sourced on the GPU machine, from the checkout's root (device_check.sh does; for run.sh:
# `. bench/gpu/device_env.sh && bench/gpu/run.sh ...`). That machine has nvcc, CMake, ninja and
# PyTorch, but no network, no Debian -dev packages, no OpenBLAS and no MPI. This:
#   - puts the toolkit on PATH and its libraries on the library path;
#   - finds cuDNN and NCCL in PyTorch's nvidia-* wheels when the toolkit has none (their libraries'
#     folder on the library path; CUDNN_ROOT and NCCL_ROOT for CMake where the headers are there too);
#   - unpacks the build dependencies carried in .device/debs (bench/gpu/pack.sh) into /tmp/mgdeps once,
#     and points CMAKE_PREFIX_PATH there, so that a plain configure finds Eigen, doctest, nlohmann-json,
#     Google Benchmark and CLI11.
export PATH="/usr/local/cuda/bin:$PATH"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
_mg_wheels=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2> /dev/null)
for _mg_lib in cudnn nccl; do
  [ -f "/usr/local/cuda/include/$_mg_lib.h" ] || [ -z "$_mg_wheels" ] && continue
  _mg_dir=$(find "$_mg_wheels" -name "lib$_mg_lib.so.*" -printf '%h\n' -quit 2> /dev/null)
  [ -n "$_mg_dir" ] || continue
  export LD_LIBRARY_PATH="$_mg_dir:$LD_LIBRARY_PATH"
  [ -f "$_mg_dir/../include/$_mg_lib.h" ] && export "$(echo $_mg_lib | tr a-z A-Z)_ROOT=$(dirname "$_mg_dir")"
done
if compgen -G ".device/debs/*.deb" > /dev/null; then
  if [ ! -f /tmp/mgdeps/.done ]; then
    mkdir -p /tmp/mgdeps
    for _mg_deb in .device/debs/*.deb; do
      if command -v dpkg-deb > /dev/null; then
        dpkg-deb -x "$_mg_deb" /tmp/mgdeps
      else  # ar and tar alone: the .deb's data.tar.*
        _mg_member=$(ar t "$_mg_deb" | grep '^data\.tar')
        case $_mg_member in *.xz) _mg_z="xz -d" ;; *.zst) _mg_z="zstd -d" ;; *.gz) _mg_z="gzip -d" ;; *) _mg_z=cat ;; esac
        ar p "$_mg_deb" "$_mg_member" | $_mg_z | tar -x -C /tmp/mgdeps
      fi
    done
    touch /tmp/mgdeps/.done
  fi
  export CMAKE_PREFIX_PATH="/tmp/mgdeps/usr:/tmp/mgdeps/usr/lib/x86_64-linux-gnu/cmake:/tmp/mgdeps/usr/share${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="/tmp/mgdeps/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH"
fi
echo "cuDNN: ${CUDNN_ROOT:-in the toolkit, or none}; NCCL: ${NCCL_ROOT:-in the toolkit, or none}"
echo "carried build dependencies: $(ls /tmp/mgdeps/usr/include 2> /dev/null | tr '\n' ' ')"
unset _mg_wheels _mg_lib _mg_dir _mg_deb _mg_member _mg_z
