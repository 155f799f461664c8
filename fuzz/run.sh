#!/usr/bin/env bash
# Build the fuzz targets on the stable toolchain and run each one for a
# bounded time from its checked-in seed corpus.
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 20 s, every target)
#
# The build is plain `cargo build --release` with the flags cargo-fuzz itself
# passes for `--sanitizer none` (its src/project.rs): libFuzzer's coverage
# instrumentation and `--cfg fuzzing`. `--target` keeps RUSTFLAGS off build
# scripts and proc macros, as cargo-fuzz does. Output goes to fuzz/target.
#
# New inputs found go to fuzz/target/corpus/<target> (the checked-in seeds in
# fuzz/corpus/<target> are only read); a crash is written to
# fuzz/target/artifacts/<target>/ and makes this script exit non-zero, after
# every target has run. Reproduce one with
#   fuzz/target/<triple>/release/<target> fuzz/target/artifacts/<target>/crash-…
set -euo pipefail

seconds="${1:-20}"
shift || true
here="$(cd "$(dirname "$0")" && pwd)"
triple="$(rustc -vV | sed -n 's/^host: //p')"

flags=(
    -Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-level=4
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    -Cllvm-args=-simplifycfg-branch-fold-threshold=0
    -Cllvm-args=-sanitizer-coverage-stack-depth
    --cfg fuzzing
    -Clink-dead-code
    -Ccodegen-units=1
)
export RUSTFLAGS="${flags[*]} ${RUSTFLAGS:-}"

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in "$here"/fuzz_targets/*.rs; do
        targets+=("$(basename "$f" .rs)")
    done
fi

started=$SECONDS
cargo build --release --config profile.release.debug=true \
    --manifest-path "$here/Cargo.toml" --target "$triple" \
    --target-dir "$here/target" --locked
echo "fuzz: built in $((SECONDS - started)) s"

crashed=()
for t in "${targets[@]}"; do
    work="$here/target/corpus/$t"
    artifacts="$here/target/artifacts/$t/"
    mkdir -p "$work" "$artifacts" "$here/corpus/$t"
    echo "fuzz: $t for ${seconds} s"
    # -timeout: one input running longer than 10 s is a crash (a hang).
    if ! "$here/target/$triple/release/$t" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$artifacts" \
        "$work" "$here/corpus/$t"; then
        crashed+=("$t")
    fi
done

echo "fuzz: ${#targets[@]} target(s) in $((SECONDS - started)) s"
if [ "${#crashed[@]}" -gt 0 ]; then
    echo "fuzz: crashed: ${crashed[*]} (inputs in $here/target/artifacts/)" >&2
    exit 1
fi
