#!/usr/bin/env bash
# Runs every cargo-fuzz (libFuzzer) target for FUZZ_SECONDS seconds each
# (default 30), after seeding its corpus from fuzz/seeds/ and the recorded
# AdmissionReviews (tests/fixtures/reviews, or FIXTURES/reviews). Installs
# cargo-fuzz into .tools/ when missing. Works on the stable toolchain:
# RUSTC_BOOTSTRAP=1 lets it take the -Z flags that sanitizer coverage needs.
#
#   scripts/fuzz.sh                       # every target, 30 s each
#   FUZZ_SECONDS=3600 scripts/fuzz.sh review_structured
#   FUZZ_JOBS=2 FUZZ_SECONDS=600 scripts/fuzz.sh   # parallel workers per target
#
# A crash fails the script and leaves the input in fuzz/artifacts/<target>/;
# reproduce it with: RUSTC_BOOTSTRAP=1 .tools/bin/cargo-fuzz fuzz run <target> <file>
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=${FUZZ_SECONDS:-30}
jobs=${FUZZ_JOBS:-1}
# libFuzzer reads a time limit of 0 as "no limit": 0 means no fuzzing here.
if [ "$seconds" = 0 ]; then
  echo "fuzz.sh: FUZZ_SECONDS=0, nothing to run"
  exit 0
fi
cargo_fuzz_version=${CARGO_FUZZ_VERSION:-0.13.2}
export RUSTC_BOOTSTRAP=1
export PATH="$root/.tools/bin:$PATH"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz $cargo_fuzz_version into .tools/"
  cargo install --locked --root "$root/.tools" cargo-fuzz --version "$cargo_fuzz_version"
fi

fixtures=${FIXTURES:-$root/tests/fixtures}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi

seed() {
  local target=$1 dir=fuzz/corpus/$1
  mkdir -p "$dir"
  if [ -d "fuzz/seeds/$target" ]; then
    cp -n fuzz/seeds/"$target"/* "$dir"/ 2>/dev/null || true
  fi
  case $target in
    review|mutate_patch_only)
      if [ -d "$fixtures/reviews" ]; then cp -n "$fixtures"/reviews/*.json "$dir"/; fi
      ;;
    http)
      # A whole HTTP/1.1 request per recorded review (first byte even:
      # HTTP/1.1), chunked and with a length.
      if [ -d "$fixtures/reviews" ]; then
        for f in "$fixtures"/reviews/0*_validate_*.json; do
          n=$(wc -c <"$f")
          { printf '\0POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n' "$n"; cat "$f"; } \
            >"$dir/len-$(basename "$f")"
          { printf '\0POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n' "$n"; cat "$f"; printf '\r\n0\r\n\r\n'; } \
            >"$dir/chunked-$(basename "$f")"
        done
      fi
      ;;
    config)
      cp -n crates/policy/src/admission/config/builtin.yaml "$dir"/builtin.yaml
      ;;
    cel_differential)
      # Any bytes are a program (cel::gen); a few fixed starting points.
      for i in 1 2 3 4; do seq "$i" 7 400 | tr -d '\n' | head -c 256 >"$dir/seq-$i"; done
      ;;
  esac
}

dict_for() {
  case $1 in
    review|mutate_patch_only) echo fuzz/dicts/review.dict ;;
    http) echo fuzz/dicts/http.dict ;;
    config) echo fuzz/dicts/config.dict ;;
    cel_compile) echo fuzz/dicts/cel.dict ;;
    fieldpath) echo fuzz/dicts/fieldpath.dict ;;
  esac
}

# One build for every target, so the per-target runs start at once.
cargo fuzz build --debug-assertions

status=0
for t in "${targets[@]}"; do
  seed "$t"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1)
  dict=$(dict_for "$t")
  if [ -n "$dict" ]; then args+=(-dict="$root/$dict"); fi
  if [ "$jobs" -gt 1 ]; then args+=(-fork="$jobs"); fi
  echo "fuzz.sh: $t for ${seconds}s"
  start=$(date +%s)
  if ! cargo fuzz run --debug-assertions "$t" "$root/fuzz/corpus/$t" -- "${args[@]}" >"fuzz/$t.log" 2>&1; then
    echo "fuzz.sh: $t FAILED; the last lines of fuzz/$t.log:"
    tail -n 40 "fuzz/$t.log"
    status=1
  else
    grep -E "^stat::(number_of_executed_units|peak_rss_mb)|Done [0-9]+ runs" "fuzz/$t.log" | tr '\n' ' ' || true
    echo "($(( $(date +%s) - start ))s)"
  fi
done
exit $status
