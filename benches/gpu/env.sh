# Shared by run.sh and run_ahead_sweep.sh (sourced, not run): what a GPU machine needs before
# kiln's binaries start there.

# Puts the folder with NVRTC (which compiles the CUDA kernels at run time) on LD_LIBRARY_PATH;
# never a stubs/ folder (its libcuda.so is a stub). Does nothing where there is none.
find_nvrtc() {
  local dir
  for dir in /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/targets/x86_64-linux/lib; do
    [ -e "$dir/libnvrtc.so" ] || ls "$dir"/libnvrtc.so.* >/dev/null 2>&1 || continue
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    return
  done
}

# Makes DIR kiln's cache folder (KILN_CACHE_DIR), filled from CACHE if given: an earlier run's
# cache.tar.xz, or a folder (warm kernels and tuning results). A CACHE that is missing or does
# not unpack is an error (exit status 1, and why on stderr): a run told it starts warm that
# starts cold would skip its cold step and time a cold one as warm.
use_kernel_cache() {
  local dir=$1 cache=${2:-}
  export KILN_CACHE_DIR=$dir
  mkdir -p "$dir"
  if [ -z "$cache" ]; then
    return 0
  elif [ -f "$cache" ]; then
    tar -C "$dir" -xJf "$cache" || { echo "error: the kernel cache $cache does not unpack" >&2; return 1; }
  elif [ -d "$cache" ]; then
    cp -r "$cache"/. "$dir"/ || { echo "error: the kernel cache $cache does not copy" >&2; return 1; }
  else
    echo "error: the kernel cache $cache is neither a file nor a folder" >&2
    return 1
  fi
}
