#!/usr/bin/env bash
# The GitHub Action's step (action.yml): runs `mrguard check` on the given
# manifests, writes SARIF for code scanning, and reports the exit code; with
# INPUT_MODE=plan, runs `mrguard plan -o markdown` instead and writes the
# markdown to INPUT_PLAN_MARKDOWN and to the job summary.
# Inputs come as INPUT_* variables (set by action.yml); runnable by hand:
#   INPUT_FILES=examples/manifests scripts/action-check.sh
set -uo pipefail

files="${INPUT_FILES:-.}"
sarif="${INPUT_SARIF:-mrguard.sarif}"
bin="${MRGUARD_BIN:-}"

if [[ -z "$bin" ]]; then
  if command -v mrguard >/dev/null 2>&1; then
    bin="$(command -v mrguard)"
  else
    # Build the binary from the action's own checkout of this repository.
    root="${GITHUB_ACTION_PATH:-$(cd "$(dirname "$0")/.." && pwd)}"
    dest="${RUNNER_TEMP:-/tmp}/mrguard-action"
    cargo install --locked --quiet --path "$root" --root "$dest" || exit 2
    bin="$dest/bin/mrguard"
  fi
fi

mode="${INPUT_MODE:-check}"
case "$mode" in
  check) args=(check -o sarif) ;;
  plan) args=(plan -o markdown) ;;
  *) echo "mrguard action: mode must be check or plan, not \"$mode\"" >&2; exit 2 ;;
esac
[[ -n "${INPUT_CONFIG:-}" ]] && args+=(--config "$INPUT_CONFIG")
[[ -n "${INPUT_CRD:-}" ]] && args+=(--crd "$INPUT_CRD")
for f in $files; do args+=(-f "$f"); done

if [[ "$mode" == plan ]]; then
  markdown="${INPUT_PLAN_MARKDOWN:-mrguard-plan.md}"
  # Word splitting is meant: the input holds flags separated by spaces.
  # shellcheck disable=SC2206
  extra=(${INPUT_PLAN_ARGS:-})
  "$bin" "${args[@]}" "${extra[@]}" > "$markdown"
  code=$?
  if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
    cat "$markdown" >> "$GITHUB_STEP_SUMMARY"
  fi
  if [[ -n "${GITHUB_OUTPUT:-}" ]]; then
    { echo "plan=$markdown"; echo "exit-code=$code"; } >> "$GITHUB_OUTPUT"
  fi
  echo "mrguard plan: exit $code; markdown in $markdown"
else
  "$bin" "${args[@]}" > "$sarif"
  code=$?
  if [[ -n "${GITHUB_OUTPUT:-}" ]]; then
    { echo "sarif=$sarif"; echo "exit-code=$code"; } >> "$GITHUB_OUTPUT"
  fi
  echo "mrguard check: exit $code; SARIF in $sarif"
fi
if [[ "$code" == 1 && "${INPUT_FAIL_ON_DENY:-true}" != "true" ]]; then
  exit 0
fi
exit "$code"
