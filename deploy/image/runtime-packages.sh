#!/bin/sh
# Prints, one per line, the Debian/Ubuntu packages that hold the shared
# libraries the given binaries load (from ldd), so that the runtime stage of
# the Dockerfile installs exactly those and nothing from the build stage.
#
#   runtime-packages.sh BINARY... > packages.txt
#
# Runs in the build stage, where the binaries were linked; the runtime image
# must be the same distribution release (same package names). Libraries that
# ldd cannot find are an error, except the NVIDIA driver's (libcuda,
# libnvidia-*), which the NVIDIA container runtime mounts at run time.
# Exit status: 0 with the list, 1 when a library has no owning package.
set -eu

status=0
tmp=$(mktemp)
for binary in "$@"; do
  ldd "$binary" | while read -r name arrow path _; do
    case "$name" in
      linux-vdso.so.*|/*ld-linux*) continue ;;
    esac
    if [ "$arrow" != "=>" ]; then continue; fi
    if [ "$path" = "not" ]; then
      case "$name" in
        libcuda.so*|libnvidia-*) echo "runtime-packages: $name comes from the NVIDIA driver at run time" >&2; continue ;;
      esac
      echo "runtime-packages: $binary needs $name, which ldd cannot find" >&2
      echo "MISSING" >> "$tmp"
      continue
    fi
    # dpkg records one spelling of the path; with merged /usr the loader may
    # report the other one (/lib vs /usr/lib), or a symlink to the real file.
    real=$(readlink -f "$path")
    owner=""
    for candidate in "$path" "$real" "/usr$path" "${path#/usr}" "/usr$real" "${real#/usr}"; do
      if owner=$(dpkg -S "$candidate" 2>/dev/null); then break; fi
      owner=""
    done
    if [ -z "$owner" ]; then
      echo "runtime-packages: no package owns $path (needed by $binary)" >&2
      echo "MISSING" >> "$tmp"
      continue
    fi
    # "libfoo1:amd64: /usr/lib/..." -> "libfoo1"
    echo "${owner%%: *}" | cut -d: -f1 >> "$tmp"
  done
done
if grep -qx MISSING "$tmp"; then status=1; fi
grep -vx MISSING "$tmp" | sort -u
rm -f "$tmp"
exit "$status"
