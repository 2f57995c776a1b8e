#!/usr/bin/env bash
# The GPU bundle (docs/gpu.md): a folder that runs on a GPU host with the NVIDIA driver and
# the CUDA toolkit but none of our Debian packages.
#   scripts/gpu_bundle.sh BINDIR OUT    make OUT from the no-LLVM build's tuner, tracker,
#                                       rpc_agent and gpu_verify (make gpu-bundle)
#   scripts/gpu_bundle.sh --check OUT   check it (make test): under 64 MiB; every binary starts
#                                       (--version, --help) with LD_LIBRARY_PATH at OUT/lib
#                                       alone; every library it needs resolves inside OUT
#                                       except glibc's; rpc_agent --device cuda:0 without a
#                                       driver is a clear "no GPU" (exit 1), a bad device 2.
# Layout: OUT/bin/{tuner,tracker,rpc_agent,gpu_verify} (rpath $ORIGIN/../lib), OUT/lib/ (the shared
# libraries, glibc's excepted), OUT/gpu_check.sh, OUT/gpu_vendor.cu, OUT/GLIBC (the newest
# glibc symbol version the bundle needs), OUT/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=$((64 * 1024 * 1024))
BINS=(tuner tracker rpc_agent gpu_verify)
# glibc's own libraries: the host's are used (OUT/GLIBC says which version is needed)
is_glibc() {
  case "$1" in
    linux-vdso.so.*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|\
    ld-linux*.so.*|libutil.so.*|libmvec.so.*) return 0 ;;
  esac
  return 1
}

die() { echo "gpu-bundle: $*" >&2; exit 1; }

make_bundle() {
  local bindir=$1 out=$2
  for b in "${BINS[@]}"; do [ -x "$bindir/$b" ] || die "no $bindir/$b (make gpu-bundle builds it)"; done
  rm -rf "$out"
  mkdir -p "$out/bin" "$out/lib"
  for b in "${BINS[@]}"; do
    cp "$bindir/$b" "$out/bin/$b"
    strip --strip-unneeded "$out/bin/$b"
    # every library the loader finds for it, except glibc's
    while read -r name arrow path rest; do
      [ "$arrow" = "=>" ] || continue
      is_glibc "$name" && continue
      [ -f "$path" ] || die "$b needs $name, which the loader does not find here"
      if [ ! -f "$out/lib/$name" ]; then
        cp -L "$path" "$out/lib/$name"
        chmod u+w "$out/lib/$name"
        strip --strip-unneeded "$out/lib/$name" 2>/dev/null || true
      fi
    done < <(ldd "$bindir/$b")
  done
  cp scripts/gpu_check.sh "$out/gpu_check.sh"
  cp scripts/gpu_vendor.cu "$out/gpu_vendor.cu"
  cp scripts/gpu_vendor_torch.py "$out/gpu_vendor_torch.py"
  cp docs/gpu.md "$out/gpu.md"
  # the newest glibc symbol version any file needs: the host's glibc must be at least this
  objdump -T "$out"/bin/* "$out"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -t. -k2,2n -k3,3n -u |
    tail -n 1 > "$out/GLIBC"
  size=$(du -sb "$out" | cut -f1)
  [ "$size" -lt "$LIMIT" ] || die "$out is $size bytes, over 64 MiB"
  echo "gpu-bundle: $out: $(ls "$out/lib" | wc -l) libraries, $((size / 1024 / 1024)) MiB ($size bytes), needs glibc >= $(cut -d_ -f2 "$out/GLIBC")"
}

check_bundle() {
  local out=$1 size fails=0 err
  [ -d "$out/bin" ] || die "no bundle in $out (make gpu-bundle)"
  size=$(du -sb "$out" | cut -f1)
  [ "$size" -lt "$LIMIT" ] || { echo "FAIL gpu-bundle: $size bytes, over 64 MiB"; fails=1; }
  lib=$(cd "$out/lib" && pwd)
  for b in "${BINS[@]}"; do
    local exe="$out/bin/$b"
    # every library resolves inside the bundle (or is glibc's)
    while read -r name arrow path rest; do
      [ "$arrow" = "=>" ] || continue
      is_glibc "$name" && continue
      case "$path" in
        "$lib"/*) ;;
        *) echo "FAIL gpu-bundle: $b: $name resolves to $path, outside the bundle"; fails=1 ;;
      esac
    done < <(env -i LD_LIBRARY_PATH="$lib" ldd "$exe")
    for flag in --version --help; do
      if ! env -i LD_LIBRARY_PATH="$lib" PATH=/usr/bin:/bin "$exe" $flag >/dev/null 2>&1; then
        echo "FAIL gpu-bundle: $b $flag does not start"; fails=1
      fi
    done
  done
  # the GPU agent without a driver, and a bad device string
  key=$(mktemp -d /tmp/at_bundle_XXXXXX)
  env -i LD_LIBRARY_PATH="$lib" "$out/bin/tracker" init-fleet --fleet-key "$key/k" >/dev/null
  set +e
  err=$(env -i LD_LIBRARY_PATH="$lib" AT_LIBCUDA=/nonexistent/libcuda.so.1 "$out/bin/rpc_agent" \
          --tracker 127.0.0.1:1 --key g --fleet-key "$key/k" --device cuda:0 2>&1 >/dev/null)
  rc=$?
  [ $rc -eq 1 ] && [[ "$err" == *"no GPU: the CUDA driver"* ]] ||
    { echo "FAIL gpu-bundle: rpc_agent --device cuda:0 without a driver: exit $rc, '$err'"; fails=1; }
  env -i LD_LIBRARY_PATH="$lib" "$out/bin/rpc_agent" --tracker 127.0.0.1:1 --key g \
      --fleet-key "$key/k" --device gpu7 >/dev/null 2>&1
  rc=$?
  [ $rc -eq 2 ] || { echo "FAIL gpu-bundle: rpc_agent --device gpu7: exit $rc (wanted 2)"; fails=1; }
  # the bundle's tuner has no LLVM: a CPU target is refused, a cuda target parses
  err=$(env -i LD_LIBRARY_PATH="$lib" "$out/bin/tuner" --trials 1 matmul:M=8,N=8,K=8 2>&1)
  [[ "$err" == *"this build has no LLVM"* ]] ||
    { echo "FAIL gpu-bundle: the tuner's CPU target: '$err'"; fails=1; }
  err=$(env -i LD_LIBRARY_PATH="$lib" "$out/bin/tuner" --trials 1 --target "cuda -arch=sm_90" \
          matmul:M=8,N=8,K=8 2>&1)
  [[ "$err" == *"is a GPU: measure it on GPU agents"* ]] ||
    { echo "FAIL gpu-bundle: the tuner's cuda target: '$err'"; fails=1; }
  set -e
  rm -rf "$key"
  [ -x "$out/gpu_check.sh" ] || { echo "FAIL gpu-bundle: no gpu_check.sh"; fails=1; }
  for f in gpu_vendor.cu gpu_vendor_torch.py; do
    [ -s "$out/$f" ] || { echo "FAIL gpu-bundle: no $f"; fails=1; }
  done
  bash -n "$out/gpu_check.sh" || { echo "FAIL gpu-bundle: gpu_check.sh does not parse"; fails=1; }
  if command -v python3 >/dev/null; then
    rc=0
    err=$(python3 "$out/gpu_vendor_torch.py" frob 2>&1) || rc=$?
    [ $rc -eq 2 ] && [[ "$err" == *"unknown reference ['frob']"* ]] ||
      { echo "FAIL gpu-bundle: gpu_vendor_torch.py frob: exit $rc, '$err'"; fails=1; }
  fi
  if [ $fails -eq 0 ]; then
    echo "PASS gpu-bundle: $((size / 1024 / 1024)) MiB ($size bytes), $(ls "$out/lib" | wc -l) libraries, glibc >= $(cut -d_ -f2 "$out/GLIBC" 2>/dev/null)"
  fi
  return $fails
}

case "${1:-}" in
  --check) check_bundle "${2:?usage: gpu_bundle.sh --check OUT}" ;;
  -*|"") echo "usage: scripts/gpu_bundle.sh BINDIR OUT | --check OUT" >&2; exit 2 ;;
  *) make_bundle "$1" "${2:?usage: gpu_bundle.sh BINDIR OUT}" ;;
esac
