#!/usr/bin/env bash
# The project's one test command (README, .ci/run): formatting, lints as errors, and
# every test of the workspace. Needs only a Rust toolchain with rustfmt and clippy.
set -euo pipefail
cd "$(dirname "$0")"

for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        echo "test.sh: cargo ${component} is missing; installing it with rustup" >&2
        rustup component add "$component"
    fi
done

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
