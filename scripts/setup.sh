#!/usr/bin/env bash
# memwall's set-up: installs what `just test` and `just reproduce` need on Debian and Ubuntu, and
# checks the rest. The README's set-up is this line and the two commands; .ci/run calls it too,
# so CI proves the README.
#
#   scripts/setup.sh           install what is missing (apt-get through sudo when not root)
#   scripts/setup.sh --check   only say what is missing; exit 1 when something is
#
# What it installs (Debian/Ubuntu package names):
#   gcc, g++              Rust links with cc; HiGHS (the Checkmate study's MILP solver) is C++
#   cmake, libclang-dev   HiGHS is built from source (highs-sys)
#   chromium              the browser test renders every committed report page headless
#   systemd, cron         the nightly's scheduler files are checked by systemd-analyze, crontab -n
#   mesa-vulkan-drivers   lavapipe, a software Vulkan: the CUDA kernels' tests run on CubeCL's
#                         wgpu runtime through it where there is no GPU (runner/tests/cube_kernels.rs)
#   just                  the task runner (the rust-just wheel from PyPI, else cargo install)
# What it checks and does not install: cargo at the workspace's rust-version (rustup.rs), git,
# python3. On another system, install those packages' equivalents by hand (the names above).
set -euo pipefail
cd "$(dirname "$0")/.."

CHECK=0
case "${1:-}" in
    --check) CHECK=1 ;;
    "") ;;
    *) echo "usage: scripts/setup.sh [--check]" >&2; exit 2 ;;
esac
missing=0
note() { printf '%s\n' "$*"; }
lack() { printf 'missing: %s\n' "$*" >&2; missing=1; }

# 1. Rust: cargo at least the workspace's rust-version (Cargo.toml).
ORIGINAL_PATH="$PATH"
export PATH="$HOME/.cargo/bin:$HOME/.local/bin:$PATH"
want=$(sed -n 's/^rust-version = "\([0-9.]*\)"/\1/p' Cargo.toml | head -1)
have=$(cargo --version 2>/dev/null | awk '{print $2}' || true)
older() { # older A B: whether version A is below B
    [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]
}
if [ -z "$have" ]; then
    lack "cargo (Rust $want or newer): curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y && . \"\$HOME/.cargo/env\""
elif older "${have%%-*}" "$want"; then
    lack "cargo $have is older than the workspace's rust-version $want: rustup update stable"
else
    note "cargo $have (the workspace needs $want or newer)"
fi
for t in git python3; do
    command -v "$t" >/dev/null 2>&1 || lack "$t (sudo apt-get install -y $t)"
done

# 2. System packages, through apt-get on Debian and Ubuntu.
packages=()
# A C and C++ compiler: Rust links with cc, and HiGHS is C++ (a fresh Debian 12 has neither).
command -v cc >/dev/null 2>&1 || packages+=(gcc)
command -v c++ >/dev/null 2>&1 || packages+=(g++)
command -v cmake >/dev/null 2>&1 || packages+=(cmake)
# A Vulkan driver for CubeCL's wgpu runtime: Mesa's lavapipe (software, on the CPU), unless the
# loader already finds one (a GPU's own driver).
ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json >/dev/null 2>&1 || packages+=(mesa-vulkan-drivers)
ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/*/libclang*.so* >/dev/null 2>&1 || packages+=(libclang-dev)
if [ -z "${MEMWALL_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1 \
    && ! command -v chromium-browser >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1; then
    # Debian's package is `chromium`; Ubuntu's is `chromium-browser` (a snap: where snaps do not
    # run, as in a container, set MEMWALL_CHROMIUM to a Chrome binary instead).
    if grep -qi '^ID=ubuntu' /etc/os-release 2>/dev/null; then packages+=(chromium-browser); else packages+=(chromium); fi
fi
command -v systemd-analyze >/dev/null 2>&1 || packages+=(systemd)
command -v crontab >/dev/null 2>&1 || packages+=(cron)
if [ ${#packages[@]} -gt 0 ]; then
    if [ "$CHECK" = 1 ]; then
        lack "${packages[*]} (sudo apt-get install -y ${packages[*]})"
    elif ! command -v apt-get >/dev/null 2>&1; then
        lack "${packages[*]}: this is not Debian or Ubuntu; install their equivalents by hand"
    else
        sudo=""
        [ "$(id -u)" = 0 ] || sudo="sudo"
        note "installing ${packages[*]} (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        $sudo apt-get update -qq
        $sudo apt-get install -y -qq "${packages[@]}" >/dev/null
    fi
else
    note "cc, c++, cmake, libclang, Chromium, systemd-analyze and crontab are installed"
fi

# 3. just: the rust-just wheel (a prebuilt binary) into the user's bin folder; Debian 12's
# Python refuses a user install without --break-system-packages (PEP 668), which is safe here
# (the wheel holds one binary and no Python module). cargo install is the fallback.
if ! command -v just >/dev/null 2>&1; then
    if [ "$CHECK" = 1 ]; then
        lack "just (scripts/setup.sh installs it: python3 -m pip install --user rust-just)"
    else
        note "installing just"
        python3 -m pip install --quiet --user rust-just 2>/dev/null \
            || python3 -m pip install --quiet --user --break-system-packages rust-just 2>/dev/null \
            || { command -v cargo >/dev/null 2>&1 && cargo install just --locked --quiet; } \
            || lack "just: python3 -m pip install --user rust-just, or cargo install just --locked"
    fi
fi
# Where the shell finds it: ~/.local/bin (pip) is not on every PATH; ~/.cargo/bin is, once
# rustup's env is sourced, so just is linked there too.
user_bin="$(python3 -m site --user-base 2>/dev/null || echo "$HOME/.local")/bin"
if [ -x "$user_bin/just" ] && [ -d "$HOME/.cargo/bin" ] && [ ! -e "$HOME/.cargo/bin/just" ] && [ "$CHECK" = 0 ]; then
    ln -s "$user_bin/just" "$HOME/.cargo/bin/just"
fi
if command -v just >/dev/null 2>&1; then
    note "just $(just --version | awk '{print $2}') at $(command -v just)"
    case ":$ORIGINAL_PATH:" in
        *":$(dirname "$(command -v just)"):"*) ;;
        *) note "add it to your shell's PATH: echo 'export PATH=\"$(dirname "$(command -v just)"):\$PATH\"' >> ~/.bashrc" ;;
    esac
fi

if [ "$missing" = 1 ]; then
    echo "set-up incomplete: install what is named above, then run scripts/setup.sh again" >&2
    exit 1
fi
note "set-up complete: just test, then just reproduce"
