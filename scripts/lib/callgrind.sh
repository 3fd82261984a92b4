# Sourced by scripts/callgrind-*.sh: one measurement of instructions and
# branch mispredicts per operation, counted by callgrind over the timed
# loop of a program only (repeatable on a noisy machine: the same binary
# and arguments give the same counts).

# cg_example NAME [CARGO-ARGS...]: the program to count: $BIN when set (an
# older build, to compare), else the example NAME built optimized (with
# CARGO-ARGS, e.g. `-p stripecount-redis`).
cg_example() {
    local name=$1
    shift
    if [ -n "${BIN:-}" ]; then
        echo "$BIN"
        return
    fi
    cargo build -q --release "$@" --example "$name" >&2 || return 1
    echo "${CARGO_TARGET_DIR:-target}/release/examples/$name"
}

# cg_header: the table's header line.
cg_header() {
    printf '%-8s %14s %12s\n' mode instr/op mispred/op
}

# cg_per_op LABEL OPS TOGGLE CMD...: runs CMD under callgrind, counting
# inside the functions that match TOGGLE only (callgrind's
# --toggle-collect), and prints LABEL with the counts divided by OPS. CMD
# is the program itself: callgrind does not follow an exec, so a variable
# for it is set on the call (`VAR=x cg_per_op ...`), not by `env`.
cg_per_op() {
    local label=$1 ops=$2 toggle=$3
    shift 3
    local out
    out=$(mktemp)
    valgrind --tool=callgrind --branch-sim=yes --callgrind-out-file="$out" \
        --toggle-collect="$toggle" "$@" >/dev/null 2>&1 ||
        { rm -f "$out"; echo "error: $label: $* failed under callgrind" >&2; return 1; }
    # The totals line: Ir (%) Bc (%) Bcm (%) Bi (%) Bim, "." for none. awk
    # reads to the end: leaving early could end callgrind_annotate by
    # SIGPIPE, which `pipefail` makes this function's failure.
    callgrind_annotate "$out" 2>/dev/null | awk -v ops="$ops" -v m="$label" '
        /PROGRAM TOTALS/ && !done {
            gsub(",", "", $0); ir = $1; bcm = $5; bim = ($9 == ".") ? 0 : $9;
            printf "%-8s %14.1f %12.3f\n", m, ir / ops, (bcm + bim) / ops; done = 1
        }'
    rm -f "$out"
}
