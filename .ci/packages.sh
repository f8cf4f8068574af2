# SPDX-License-Identifier: BSL-1.0
# Sourced by .ci/test and .ci/demo: installs the Debian packages named in "$@" that are missing.
coretry_install_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}
# No Google Benchmark (libbenchmark-dev): bench/ times each variant alternating with its baseline
# in one process and prints the `sample` lines .ci/bench parses, which its runner does not do.
# pkg-config: the package consumer test; doxygen: the API reference (docs/Doxyfile).
# nginx-light and openssl: the nginx integration tests; clang-14, clang (for clang++) and
# libclang-rt-14-dev (libFuzzer and the sanitizer runtimes): the fuzz targets, built and run by .ci/fuzz.
# libboost1.81-dev: the Boost.Asio flavour (the tsan build) and Boost.Beast (beast.nginx).
# prometheus-cpp-dev: coretry::prometheus, its scrape test and samples/metrics_service.
# nlohmann-json3-dev: coretry::config, its tests, samples/config_policies and its fuzz target.
CORETRY_PACKAGES=(cmake make g++ pkg-config doxygen libasio-dev libcurl4-openssl-dev doctest-dev gnuplot-nox
  nginx-light openssl clang-14 clang libclang-rt-14-dev libboost1.81-dev prometheus-cpp-dev
  nlohmann-json3-dev)
