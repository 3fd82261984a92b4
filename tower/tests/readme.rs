//! The README's tower snippet cannot be a doc test of the library (the
//! library does not depend on this crate), so it is this crate's doc
//! example, run by `cargo test --doc`; this test checks that the two say
//! the same (the README without the example's hidden lines).

#[test]
fn the_readme_snippet_is_the_crate_example() {
    let readme = include_str!("../../README.md");
    let section = readme
        .split("## Per-key limits in a web stack")
        .nth(1)
        .expect("the README's tower section");
    let snippet = section
        .split("```rs\n")
        .nth(1)
        .and_then(|s| s.split("\n```").next())
        .expect("an `rs` block in the section");
    let lib = include_str!("../src/lib.rs");
    let example: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .skip_while(|l| *l != "```")
        .skip(1)
        .take_while(|l| *l != "```")
        .filter(|l| *l != "#" && !l.starts_with("# "))
        .collect();
    assert_eq!(snippet.lines().collect::<Vec<_>>(), example);
}
