#!/usr/bin/env bash
# Builds gmtune and runs the main job: a sweep of the default preset into the default cache
# ($GMJIT_CACHE, else $XDG_CACHE_HOME/gmjit/gmjit.db, else ~/.cache/gmjit/gmjit.db).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${GMJIT_BUILD_DIR:-build}"
# Build output goes to stderr so stdout carries only gmtune's summary.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$build_dir" -j "$(nproc)" --target gmtune >&2
exec "$build_dir/tools/gmtune" sweep --preset default "$@"
