# Sourced by scripts/miri.sh and scripts/san.sh: `fail`, and `need_nightly`,
# which makes sure the nightly toolchain has the given components, adding
# what is missing, or stops saying how to add it by hand (a check that
# needs nightly is never skipped).

fail() {
    echo "error: $*" >&2
    exit 1
}

# need_nightly COMPONENT...: e.g. `need_nightly miri rust-src`.
need_nightly() {
    local list
    list=$(IFS=,; echo "$*")
    if ! rustup toolchain list | grep -q '^nightly'; then
        echo "== installing the nightly toolchain with $*"
        rustup toolchain install nightly --profile minimal --component "$list" ||
            fail "could not install the nightly toolchain; install it by hand:
    rustup toolchain install nightly --component $list"
    fi
    local installed c missing=()
    installed=$(rustup component list --toolchain nightly --installed)
    for c in "$@"; do
        grep -q "^$c" <<<"$installed" || missing+=("$c")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "== installing ${missing[*]} for the nightly toolchain"
        rustup component add --toolchain nightly "${missing[@]}" ||
            fail "could not add ${missing[*]} to the nightly toolchain (this nightly may
lack them: rustup toolchain install nightly --component $list
picks the newest one that has them)"
    fi
}
