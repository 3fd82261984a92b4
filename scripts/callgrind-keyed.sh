#!/usr/bin/env bash
# Instructions and branch mispredicts per operation of the per-key engine,
# counted by callgrind (repeatable on a noisy machine: the same binary and
# arguments give the same counts), over the timed loop of
# examples/keyed_steady.rs only.
#
#   bash scripts/callgrind-keyed.sh [modes...]
#
# Modes are keyed_steady's (kw hk kl klr dm gvu ...; default: kw hk kl klr).
# OPS and WARM set the timed and untimed adds (default 2M after 8M: two
# slices of warm-up, then half a slice timed). BIN runs another build of
# keyed_steady (e.g. an older commit's, to compare).
set -euo pipefail
cd "$(dirname "$0")/.."
OPS=${OPS:-2000000}
WARM=${WARM:-8000000}
if [ -z "${BIN:-}" ]; then
    cargo build --release --example keyed_steady >/dev/null
    BIN=target/release/examples/keyed_steady
fi
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(kw hk kl klr)
out=$(mktemp -d)
printf '%-6s %14s %12s\n' mode instr/op mispred/op
for m in "${modes[@]}"; do
    valgrind --tool=callgrind --branch-sim=yes --callgrind-out-file="$out/$m" \
        --toggle-collect='keyed_steady::timed*' "$BIN" "$m" "$OPS" "$WARM" >/dev/null 2>&1
    # The totals line: Ir (%) Bc (%) Bcm (%) Bi (%) Bim, "." for none.
    callgrind_annotate "$out/$m" 2>/dev/null | awk -v ops="$OPS" -v m="$m" '
        /PROGRAM TOTALS/ {
            gsub(",", "", $0); ir = $1; bcm = $5; bim = ($9 == ".") ? 0 : $9;
            printf "%-6s %14.1f %12.3f\n", m, ir / ops, (bcm + bim) / ops; exit
        }'
done
rm -rf "$out"
