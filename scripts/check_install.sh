#!/usr/bin/env bash
# fabflow as a user gets it: installs the release tree into a temporary prefix, checks that
# every installed header compiles on its own (so none includes a private one), builds every
# example out of tree against the prefix with find_package and with pkg-config, runs them and
# checks their output, then builds the Debian package and checks its files and dependencies.
#   scripts/check_install.sh [build dir]     (default build; it must be configured)
# It builds only what scripts/setup.sh builds (the fabflow_installable target) before it
# installs: the test command runs it on the tree setup.sh leaves, before anything else is built.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
work=$(mktemp -d /tmp/fabflow-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
version=$(sed -n 's/^project(fabflow VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
fail() { echo "check_install: $*" >&2; exit 1; }

echo "== install into $prefix"
ninja -C "$build" -j "$(nproc)" fabflow_installable >/dev/null
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/fabflow include/fabflow/flow.h include/fabflow/version.h lib/libfabflow.a lib/pkgconfig/fabflow-static.pc \
         "lib/libfabflow.so.$version" lib/pkgconfig/fabflow.pc lib/cmake/fabflow/fabflowConfig.cmake \
         share/man/man1/fabflow.1 share/fabflow/experiments/003.json \
         share/fabflow/python/fabflow_plot/__main__.py share/doc/fabflow/README.md; do
  [ -e "$prefix/$f" ] || fail "missing from the install: $f"
done
[ "$("$prefix/bin/fabflow" --version)" = "$version" ] || fail "fabflow --version is not $version"
grep -q "^## \[$version\]" CHANGELOG.md || fail "CHANGELOG.md has no section for $version"
"$prefix/bin/fabflow" info >/dev/null
# The installed CLI finds the installed catalogue, not the source tree's.
# Output is captured before matching throughout: under pipefail, `cmd | grep -q` fails whenever
# grep exits at its first match while cmd is still writing (SIGPIPE), a race that CI lost once.
catalogue=$("$prefix/bin/fabflow" experiment list --json)
grep -q '"id"' <<<"$catalogue" || fail "no catalogue from the install"
# Every subcommand has its section in the man page.
for sub in info "bench raw" "bench queue" "bench rr" "bench seq" "bench inbound" "experiment list" "experiment run" report "model pcie"; do
  grep -q "^\.SS $sub\$" "$prefix/share/man/man1/fabflow.1" || fail "man page lacks '$sub'"
done
for sub in $("$prefix/bin/fabflow" --help | sed -n '/^Subcommands:/,$p' | awk 'NR>1 {print $1}'); do
  grep -q "^\.SS $sub" "$prefix/share/man/man1/fabflow.1" || fail "man page lacks '$sub'"
done

echo "== every installed header compiles alone"
while read -r header; do
  echo "#include <${header#"$prefix/include/"}>" |
    g++ -std=c++20 -fsyntax-only -x c++ -I"$prefix/include" - ||
    fail "$header does not compile on its own against the installed headers"
done < <(find "$prefix/include" -name '*.h' | sort)

echo "== examples with find_package, from their installed copy"
examples="$prefix/share/doc/fabflow/examples"
while read -r f; do
  cmp -s "$f" "$examples/${f#examples/}" || fail "$f is not installed as $examples/${f#examples/}"
done < <(find examples -type f | sort)
cmake -S "$examples" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
ninja -C "$work/cmake" >/dev/null
echo "== examples with pkg-config"
mkdir -p "$work/pc"
for src in examples/*.cc; do
  name=$(basename "$src" .cc)
  # shellcheck disable=SC2046
  g++ -std=c++20 -O2 "$src" -o "$work/pc/$name" -Wl,-rpath,"$prefix/lib" \
    $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs fabflow)
  # shellcheck disable=SC2046
  g++ -std=c++20 -O2 "$src" -o "$work/pc/$name-static" \
    $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs fabflow-static)
done
libs=$(ldd "$work/pc/rpc_echo")
grep -q "$prefix/lib/libfabflow.so.${version%.*}" <<<"$libs" ||
  fail "the pkg-config build of rpc_echo does not load the installed libfabflow.so: $libs"
libs=$(ldd "$work/pc/rpc_echo-static")
grep -q libfabflow <<<"$libs" && fail "the fabflow-static build loads libfabflow.so: $libs"

echo "== run the examples"
# A text file with known counts: 1999 lines of 3 words, then one of two words that is longer
# than an item (4096 bytes) and splits between them.
text=$work/input.txt
for i in $(seq 1 1999); do echo "line number $i"; done > "$text"
{ head -c 4096 /dev/zero | tr '\0' 'x'; echo -n " "; head -c 900 /dev/zero | tr '\0' 'y'; echo; } >> "$text"
lines=$(wc -l < "$text"); words=$(wc -w < "$text"); bytes=$(($(wc -c < "$text") - lines))
for bin in "$work/cmake/flow_pipeline" "$work/pc/flow_pipeline-static"; do
  for args in "" "--design push2-event-push2 -p shm" "--design pull-pull-push -p tcp"; do
    # shellcheck disable=SC2086
    out=$(timeout 60 "$bin" $args "$text") || fail "flow_pipeline $args exited $?"
    consumer=$(grep '^consumer:' <<<"$out") || fail "flow_pipeline $args: no consumer line: $out"
    # Without --design the queue chooses itself and the producer says what and why.
    [ -n "$args" ] || grep -q '^design: auto on local: [a-z0-9-]* (' <<<"$out" ||
      fail "flow_pipeline without --design: no 'design: auto on local: ...' line: $out"
    # Without -p, "auto" finds both ranks on this host from the bootstrap and says so.
    [ -n "$args" ] || grep -q '^transport: auto: local (every rank shares this host)$' <<<"$out" ||
      fail "flow_pipeline without -p: no 'transport: auto: local (...)' line: $out"
    # 2000 lines, the long one in two items.
    grep -q "consumer: $((lines + 1)) items, $words words, $bytes bytes" <<<"$consumer" ||
      fail "flow_pipeline $args counted wrong: $consumer (want $lines lines, $words words, $bytes bytes)"
    [ "${consumer##* }" = "$(grep '^producer:' <<<"$out" | awk '{print $NF}')" ] ||
      fail "flow_pipeline $args: the checksums differ: $out"
  done
done
# Started by `fabflow launch`, the example acts as one rank of two, its lines labelled
# (examples/README.md).
out=$(timeout 60 "$prefix/bin/fabflow" launch -n 2 -- "$work/cmake/flow_pipeline" "$text") ||
  fail "fabflow launch -n 2 -- flow_pipeline exited $?"
grep -q "^\[1\] consumer: $((lines + 1)) items, $words words, $bytes bytes" <<<"$out" ||
  fail "fabflow launch -n 2 -- flow_pipeline: no labelled consumer line: $out"
grep -q '^\[0\] transport: auto: local (every rank shares this host)$' <<<"$out" ||
  fail "fabflow launch -n 2 -- flow_pipeline: auto did not pick local, or did not say so: $out"
for bin in "$work/cmake/rpc_echo" "$work/pc/rpc_echo"; do
  for args in "-n 20000" "--pattern SendSend -p shm -n 2000" "--pattern WriteSend -p tcp -n 2000"; do
    # shellcheck disable=SC2086
    out=$(timeout 60 "$bin" $args) || fail "rpc_echo $args exited $?"
    n=${args##* }
    grep -q "^client: $n echoes checked" <<<"$out" || fail "rpc_echo $args: $out"
    [ "${args#--pattern}" != "$args" ] || grep -q '^pattern: auto on local: [A-Za-z]* (' <<<"$out" ||
      fail "rpc_echo without --pattern: no 'pattern: auto on local: ...' line: $out"
    grep -q "^server: $n requests served" <<<"$out" || fail "rpc_echo $args: $out"
  done
done
for bin in "$work/cmake/kv_cache" "$work/pc/kv_cache-static"; do
  for args in "-n 1000" "--design read -p shm -n 500" "--design atomic -p local -n 500" \
      "--design herd -p tcp -n 300"; do
    # shellcheck disable=SC2086
    out=$(timeout 60 "$bin" $args) || fail "kv_cache $args exited $?"
    n=${args##* }
    grep -q "^client: $n sensors read, updated and checked; sensor-0 deleted" <<<"$out" ||
      fail "kv_cache $args: $out"
    grep -q "^server: .* requests served, $((n - 1)) sensors held" <<<"$out" ||
      fail "kv_cache $args: $out"
    [ "${args#--design}" != "$args" ] || grep -q '^design: auto on local: [a-z]* (' <<<"$out" ||
      fail "kv_cache without --design: no 'design: auto on local: ...' line: $out"
  done
done
# Two shells: a service started by hand, clients connecting whenever they like (one after
# another, one of them killed mid-stream); each client's session runs a flow queue (10^6 items),
# 10^5 request-response calls and a 256 MB bulk transfer over its one connection; the service
# serves the next client and stops on SIGINT.
svc="$work/cmake/service"
export FABFLOW_SECRET=check-install-secret
"$svc" serve 127.0.0.1:0 >"$work/serve.out" 2>&1 &
server=$!
for _ in $(seq 200); do grep -q '^listening on ' "$work/serve.out" && break; sleep 0.05; done
addr=$(sed -n 's/^listening on //p' "$work/serve.out")
[ -n "$addr" ] || fail "service serve printed no address: $(cat "$work/serve.out")"
first=$(timeout 60 "$svc" connect "$addr") || fail "service connect exited $?"
"$svc" connect "$addr" -n 1000000000 >/dev/null 2>&1 &
victim=$!
sleep 1
kill -9 "$victim"
wait "$victim" 2>/dev/null || true
second=$(timeout 60 "$svc" connect "$addr") || fail "service connect exited $?"
kill -INT "$server"
wait "$server" || fail "service serve exited $? on SIGINT: $(cat "$work/serve.out")"
unset FABFLOW_SECRET
served=$(cat "$work/serve.out")
for client in "$first" "$second"; do
  [[ $client == "1000000 items in order "*", 100000 calls answered, 268435456 bytes "*" over auto: local (every rank shares this host)" ]] ||
    fail "service connect printed '$client'"
  sed -n 's/^client [0-9.:]*: //p' <<<"$served" | grep -qxF "$client" ||
    fail "service: the server's line for '$client' is missing: $served"
done
grep -q '^client [0-9.:?]*: failed: .*vanished' <<<"$served" ||
  fail "service: no 'failed' line for the killed client: $served"
[ "$(tail -1 <<<"$served")" = stopped ] || fail "service serve did not stop cleanly: $served"

# Bad input: one line, exit 2.
set +e
"$work/cmake/rpc_echo" --pattern Bogus 2>"$work/err"; rc=$?
set -e
[ "$rc" = 2 ] && [ "$(wc -l < "$work/err")" = 1 ] || fail "rpc_echo --pattern Bogus: rc $rc"
set +e
"$work/cmake/kv_cache" --design btree 2>"$work/err"; rc=$?
set -e
[ "$rc" = 2 ] && [ "$(wc -l < "$work/err")" = 1 ] || fail "kv_cache --design btree: rc $rc"

echo "== Debian package"
(cd "$build" && cpack -G DEB >/dev/null)
deb="$build/fabflow_${version}_amd64.deb"
[ -f "$deb" ] || fail "cpack wrote no $deb"
info=$(dpkg-deb -I "$deb")
grep -q "^ Version: $version$" <<<"$info" || fail "the package's version is not $version"
depends=$(grep '^ Depends:' <<<"$info") || fail "the package declares no dependencies"
for dep in libfabric1 libssl3 libstdc++6 libc6; do
  grep -q "$dep" <<<"$depends" || fail "the package does not depend on $dep: $depends"
done
files=$(dpkg-deb -c "$deb")
for f in ./usr/bin/fabflow "./usr/lib/libfabflow.so.$version" ./usr/lib/libfabflow.a \
         ./usr/include/fabflow/flow.h ./usr/lib/pkgconfig/fabflow.pc \
         ./usr/lib/cmake/fabflow/fabflowConfig.cmake ./usr/share/man/man1/fabflow.1 \
         ./usr/share/fabflow/experiments/000.json; do
  grep -q " $f\$" <<<"$files" || grep -q " $f -> " <<<"$files" || fail "the package lacks $f"
done
echo "check_install: install, examples (find_package, pkg-config), package $version: ok"
