#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# package.deb: the Debian package, as a Debian user takes the library.
#  1. `cpack -G DEB` in the build tree makes libcoretry-dev with its dependencies declared;
#  2. `dpkg -i` installs it into a clean root: an empty directory with an empty dpkg database,
#     `dpkg --root=DIR` (no chroot, no maintainer scripts: the package has none). That root has
#     none of the declared dependencies, so dpkg is told --force-depends, and the same
#     dependencies are checked instead against this machine's dpkg database (where the consumers
#     below take them from: the compiler's /usr/include, libcurl, prometheus-cpp);
#  3. a consumer builds and runs against it through find_package (CMAKE_PREFIX_PATH=ROOT/usr)
#     and through pkg-config (PKG_CONFIG_PATH=ROOT/usr/lib/pkgconfig);
#  4. `dpkg -r` removes it, and no file of it is left in the root.
# Usage: deb_check.sh BUILD_DIR SOURCE_DIR WORK_DIR CXX [CPACK]
set -euo pipefail
build=$1 src=$2 work=$3 cxx=$4 cpack=${5:-cpack}
rm -rf "$work" && mkdir -p "$work/out" "$work/root/var/lib/dpkg/updates" "$work/root/var/lib/dpkg/info"
touch "$work/root/var/lib/dpkg/status"
root=$work/root
dpkg_root=(dpkg --root="$root" --log=/dev/null --force-not-root --force-bad-path)

echo "== cpack -G DEB"
(cd "$build" && "$cpack" -G DEB -B "$work/out" >"$work/cpack.log") || { cat "$work/cpack.log"; exit 1; }
deb=$(find "$work/out" -maxdepth 1 -name 'libcoretry-dev_*.deb' -print -quit)
[[ -n $deb ]] || { echo "no libcoretry-dev_*.deb in $work/out" >&2; ls "$work/out" >&2; exit 1; }
dpkg-deb -f "$deb" Package Version Architecture Depends
[[ $(dpkg-deb -f "$deb" Package) == libcoretry-dev ]]
depends=$(dpkg-deb -f "$deb" Depends)
[[ $depends == *libasio-dev* || $depends == *libboost* ]] || { echo "no Asio dependency: $depends" >&2; exit 1; }

echo "== the declared dependencies, against this machine's packages"
IFS=',' read -ra alternatives <<<"$depends"
for alt in "${alternatives[@]}"; do
  ok=0
  IFS='|' read -ra choices <<<"$alt"
  for choice in "${choices[@]}"; do
    name=$(sed -E 's/^ *([^ (]+).*/\1/' <<<"$choice")
    version=$(sed -nE 's/.*\(= ([^)]+)\).*/\1/p' <<<"$choice")
    have=$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)
    if [[ $have == "install ok installed"* && ( -z $version || $have == *" $version" ) ]]; then ok=1; fi
  done
  ((ok)) || { echo "dependency not satisfied here: $alt" >&2; exit 1; }
  echo "satisfied: $alt"
done

echo "== dpkg -i into $root"
"${dpkg_root[@]}" --force-depends -i "$deb"
"${dpkg_root[@]}" -s libcoretry-dev | grep -q '^Status: install ok installed'
find "$root/usr" -name coretry-config.cmake | grep -q . || { echo "no CMake package in the root" >&2; exit 1; }

echo "== find_package consumer against $root/usr"
consumer=curl_consumer
[[ -f $root/usr/lib/pkgconfig/coretry-curl.pc ]] || consumer=consumer
cmake -S "$src/test/package/$consumer" -B "$work/find_package" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
grep -q "$root/usr/lib/cmake/coretry" "$work/find_package/CMakeCache.txt" ||
  { echo "find_package did not take coretry from the root" >&2; exit 1; }
cmake --build "$work/find_package" -j2 >"$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/find_package/$consumer"

echo "== pkg-config consumer against $root/usr"
if [[ $consumer == curl_consumer ]]; then
  PKG_CONFIG_PATH="$root/usr/lib/pkgconfig" PKG_CONFIG_LIBDIR=/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/share/pkgconfig \
    bash "$src/test/package/pkg_config_consumer.sh" "$root/usr" "$src/test/package/curl_consumer/main.cpp" \
    "$work/pkg_config" "$cxx"
fi

echo "== dpkg -r"
"${dpkg_root[@]}" -r libcoretry-dev
left=$(find "$root" -path "$root/var" -prune -o -print | grep -vx "$root" || true)
[[ -z $left ]] || { echo "left after removal:" >&2; echo "$left" >&2; exit 1; }
! "${dpkg_root[@]}" -s libcoretry-dev 2>/dev/null | grep -q '^Status: install ok installed'
echo "libcoretry-dev: built, installed, used through find_package and pkg-config, removed"
