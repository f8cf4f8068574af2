#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# A consumer that knows only pkg-config: one plain compiler command line, as the README writes
# it, run under AddressSanitizer (which reports any Asio memory allocated one way and freed the
# other across the program and coretry's library).
# Usage: pkg_config_consumer.sh INSTALL_PREFIX SOURCE OUTPUT_DIR [CXX [MODULE]]
# MODULE is the pkg-config module the source needs: coretry-curl (the default),
# coretry-prometheus or coretry-config-json.
set -euo pipefail
prefix=$1 src=$2 out=$3 cxx=${4:-g++} module=${5:-coretry-curl}
mkdir -p "$out"
libdir=$(dirname "$(find "$prefix" -name "$module.pc" -print -quit)")
export PKG_CONFIG_PATH="$libdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
set -x
pkg-config --modversion coretry "$module"
"$cxx" -std=c++20 -g -O1 -fsanitize=address -fno-omit-frame-pointer "$src" -o "$out/pkg_config_consumer" \
  $(pkg-config --cflags --libs "$module") -Wl,-rpath,"$(pkg-config --variable=libdir coretry)"
ASAN_OPTIONS=detect_leaks=1 "$out/pkg_config_consumer"
