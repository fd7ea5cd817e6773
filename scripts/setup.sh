#!/usr/bin/env bash
# scripts/setup.sh [--bench] — install what jaxrepl needs to build and test, and nothing twice.
#
# Idempotent: when everything is present it prints nothing and exits 0 in well under a second.
# What it checks, in order (each step only acts when something is missing):
#   1. the Rust toolchain (rustup's cargo/rustc >= the workspace's rust-version): checked, never installed
#   2. the MLIR/LLVM 22 Debian packages (dpkg-query; `apt-get update` only if something must be installed)
#   3. /usr/lib/llvm-22/lib/libMLIR-C.so (Debian ships no shared MLIR C API library) + its ld.so.conf entry
#   4. .venv with the Jupyter/test clients, pinned (see PY_TEST_PINS)
#   5. with --bench: .venv-jax with jax 0.10.2 for ../shared/bench/jax_bench.py
# Any failure stops the script with a message that says what to do.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LLVM_PREFIX=/usr/lib/llvm-22
MLIR_C_LIB="$LLVM_PREFIX/lib/libMLIR-C.so"
LDCONF=/etc/ld.so.conf.d/jaxrepl-llvm-22.conf
RUST_MIN=1.95

APT_PACKAGES=(libmlir-22-dev mlir-22-tools llvm-22-dev libclang-22-dev clang-22 libpolly-22-dev
              libzstd-dev libz3-dev libxml2-dev lld-22 libomp-22-dev)
# Versions verified together (../shared/frontends.md §3); bump them together.
PY_TEST_PINS=(jupyter_client==8.10.0 nbclient==0.11.0 nbconvert==7.17.2 nbformat==5.11.1
              jupyter_kernel_test==0.7.0 pytest==9.2.0 pytest-xdist==3.8.0 pexpect==4.9.0)
# The JAX reference for the bench is 0.10.2, the newest release for Python 3.11 (DESIGN.md).
PY_BENCH_PINS=(jax==0.10.2 jaxlib==0.10.2 numpy==2.4.6 threadpoolctl==3.8.0)

WANT_BENCH=0
for arg in "$@"; do
    case "$arg" in
        --bench) WANT_BENCH=1 ;;
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup.sh: unknown argument '$arg' (usage: scripts/setup.sh [--bench])" >&2; exit 2 ;;
    esac
done

say() { echo "setup.sh: $*" >&2; }
die() { echo "setup.sh: ERROR: $*" >&2; exit 1; }

# Run a command as root: directly when we are root, else through passwordless sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo -n "$@"
    else die "need root to run: $* (run 'sudo scripts/setup.sh' once, or run as root)"
    fi
}

# ---------------------------------------------------------------- 1. Rust toolchain
check_rust() {
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null 2>&1 && command -v rustc >/dev/null 2>&1 ||
        die "no Rust toolchain (cargo/rustc) on PATH. Install rustup (https://rustup.rs) and a stable toolchain >= $RUST_MIN; Debian's rustc is too old."
    local v
    v="$(rustc --version | awk '{print $2}')"
    # sort -V puts the smaller version first: the minimum must come first (or be equal)
    if [ "$(printf '%s\n%s\n' "$RUST_MIN" "${v%%-*}" | sort -V | head -1)" != "$RUST_MIN" ]; then
        die "rustc $v is older than the workspace's rust-version $RUST_MIN: run 'rustup update stable'"
    fi
}

# ---------------------------------------------------------------- 2. Debian packages
missing_packages() {
    local p st
    for p in "$@"; do
        st="$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)"
        [ "$st" = "install ok installed" ] || echo "$p"
    done
}

install_packages() {
    command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script supports Debian 12 (bookworm) only"
    local want=("${APT_PACKAGES[@]}")
    # A C compiler for crates with C parts (ring, zstd-sys), and a python3 that can make venvs.
    command -v cc >/dev/null 2>&1 || want+=(build-essential)
    command -v python3 >/dev/null 2>&1 || want+=(python3 python3-venv)
    if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        want+=(python3-venv)
    fi
    local missing
    mapfile -t missing < <(missing_packages "${want[@]}")
    [ "${#missing[@]}" -eq 0 ] && return 0
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq || die "apt-get update failed (network? /etc/apt/sources.list.d?)"
    as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
        die "apt-get install failed for: ${missing[*]} (LLVM/MLIR 22 come from Debian bookworm(-security); check 'apt-cache policy llvm-22-dev')"
    mapfile -t missing < <(missing_packages "${want[@]}")
    [ "${#missing[@]}" -eq 0 ] || die "still missing after apt-get install: ${missing[*]}"
}

# ---------------------------------------------------------------- 3. shared MLIR C API library
mlir_c_is_current() {
    [ -f "$MLIR_C_LIB" ] || return 1
    # Rebuild after a package upgrade: any static C API archive newer than our .so.
    [ -z "$(find "$LLVM_PREFIX/lib" -maxdepth 1 -name 'libMLIRCAPI*.a' -newer "$MLIR_C_LIB" -print -quit)" ]
}

# Whether ld.so's cache lists libMLIR-C.so. (Not `ldconfig -p | grep -q`: under pipefail,
# grep's early exit can kill ldconfig with SIGPIPE and fail the pipeline.)
loader_knows_mlir_c() {
    local cache
    cache="$(ldconfig -p)"
    grep -q 'libMLIR-C\.so ' <<<"$cache"
}

install_mlir_c() {
    if ! mlir_c_is_current; then
        say "building $MLIR_C_LIB from Debian's static MLIR C API archives"
        compgen -G "$LLVM_PREFIX/lib/libMLIRCAPI*.a" >/dev/null || die "no $LLVM_PREFIX/lib/libMLIRCAPI*.a (is libmlir-22-dev installed?)"
        local tmp
        tmp="$(mktemp /tmp/libMLIR-C.XXXXXX.so)"
        # shellcheck disable=SC2046 # the archive list must split into words
        clang++-22 -shared -o "$tmp" -Wl,--whole-archive $(ls "$LLVM_PREFIX"/lib/libMLIRCAPI*.a) -Wl,--no-whole-archive \
            -L"$LLVM_PREFIX/lib" -lMLIR -lLLVM -Wl,--no-undefined -fuse-ld=lld ||
            { rm -f "$tmp"; die "linking libMLIR-C.so failed (see the linker message above)"; }
        as_root install -m 0644 "$tmp" "$MLIR_C_LIB"
        rm -f "$tmp"
    fi
    if [ "$(cat "$LDCONF" 2>/dev/null)" != "$LLVM_PREFIX/lib" ]; then
        say "registering $LLVM_PREFIX/lib with the dynamic loader ($LDCONF)"
        echo "$LLVM_PREFIX/lib" | as_root tee "$LDCONF" >/dev/null
        as_root ldconfig
    elif ! loader_knows_mlir_c; then
        as_root ldconfig
    fi
    loader_knows_mlir_c || die "libMLIR-C.so is not known to the dynamic loader after ldconfig"
}

# ---------------------------------------------------------------- 4./5. Python venvs
# make_venv DIR PIN... : (re)create DIR when absent or broken, install the pins when the stamp differs.
make_venv() {
    local dir="$1"; shift
    local stamp="$dir/.jaxrepl-pins" want
    want="$(printf '%s\n' "$@")"
    if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c 'import sys' 2>/dev/null &&
       [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    command -v python3 >/dev/null 2>&1 || die "python3 not found"
    if ! [ -x "$dir/bin/python" ] || ! "$dir/bin/python" -c 'import sys' 2>/dev/null; then
        say "creating ${dir#"$ROOT"/} ($(python3 --version 2>&1))"
        rm -rf "$dir"
        # One retry: ensurepip inside `venv` once failed transiently on a loaded machine.
        python3 -m venv "$dir" || { say "python3 -m venv failed; retrying once"; rm -rf "$dir"; sleep 2; python3 -m venv "$dir"; } ||
            die "python3 -m venv $dir failed (Debian: apt-get install python3-venv)"
    fi
    say "installing into ${dir#"$ROOT"/}: $*"
    "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@" ||
        die "pip install into $dir failed (is PyPI reachable?)"
    printf '%s\n' "$want" >"$stamp"
}

check_rust
install_packages
install_mlir_c
make_venv "$ROOT/.venv" "${PY_TEST_PINS[@]}"
if [ "$WANT_BENCH" -eq 1 ]; then
    make_venv "$ROOT/.venv-jax" "${PY_BENCH_PINS[@]}"
fi
