//! The checked-in P4 constants (`p4/include/dta_constants.p4`) are exactly what `dta_proto`
//! generates now; regenerate with `cargo run -p dta-bench -- p4-constants > p4/include/dta_constants.p4`.

use std::path::Path;

#[test]
fn checked_in_p4_constants_are_fresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = root.join(dta_p4_constants::OUTPUT_PATH);
    let have = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let want = dta_p4_constants::render();
    if have != want {
        let line = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .map_or(have.lines().count().min(want.lines().count()), |i| i);
        panic!(
            "{} is stale (first difference at line {}); regenerate it with \
             `cargo run -p dta-bench -- p4-constants > {}`",
            path.display(),
            line + 1,
            dta_p4_constants::OUTPUT_PATH
        );
    }
}

#[test]
fn both_p4_programs_include_the_generated_constants() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for prog in [
        "p4/translator/dta_translator.p4",
        "p4/reporter/dta_reporter.p4",
    ] {
        let text =
            std::fs::read_to_string(root.join(prog)).unwrap_or_else(|e| panic!("{prog}: {e}"));
        assert!(
            text.contains("#include \"../include/dta_constants.p4\""),
            "{prog}"
        );
        assert!(text.contains("#include <tna.p4>"), "{prog}");
        assert!(!text.contains("TODO"), "{prog} has a TODO");
    }
}
