#!/usr/bin/env bash
# Installs the Debian 12 packages cpulm's build and tests need (idempotent).
# libsimde-dev (header-only) is for the tests only: the avx512 kernel levels under emulation
# on CPUs without AVX-512 (cmake/emu512.cmake); cpulm itself never uses it.
# --perf also installs llvm-22 for scripts/arm-perf.sh (llvm-mca-22: the Neoverse N1 / V1 /
# V2 scheduling models; LLVM 14 has none). Not needed to build or run cpulm.
set -euo pipefail
pkgs=(build-essential cmake clang clang-format libclang-rt-14-dev gcc-aarch64-linux-gnu libc6-dev-arm64-cross
      qemu-user curl libcurl4-openssl-dev nginx-light librsvg2-bin python3-yaml
      libedit-dev tmux libsimde-dev locales)
[ "${1:-}" = --perf ] && pkgs+=(llvm-22)
# node and npm (for the openai client in the server tests) come with the machine image or
# from Debian: installed only when missing.
command -v npm >/dev/null || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# test_json.c checks number formatting under a locale whose decimal point is ',' (de_DE):
# compiled from the locales package's sources when the machine has none.
ensure_locale() {
  locale -a 2>/dev/null | grep -qiE '^de_DE\.utf-?8$' && return 0
  command -v localedef >/dev/null && $SUDO localedef -i de_DE -f UTF-8 de_DE.UTF-8 2>/dev/null || true
}
if [ ${#missing[@]} -eq 0 ]; then ensure_locale; exit 0; fi
$SUDO apt-get update -qq
# RUNLEVEL=1: packages with services (nginx) must not start them; tests run their own
# instances on 127.0.0.1.
RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
ensure_locale
