//! What a test does when this machine cannot run its check (no root, no `/dev/net/tun`, no
//! tshark, no browser, a kernel without TPROXY).
//!
//! Outside CI the test prints why and returns: a developer's laptop may lack a tool. Under CI
//! (the `CI` environment variable set, as `.ci/run` runs) the capability must be present —
//! `scripts/install-deps.sh` installs what the tests need — so the test fails instead: a skip
//! that counts as a pass would hide a missing install step.

/// Whether this run is CI's (`CI` set to anything but empty, `0` or `false`).
pub fn under_ci() -> bool {
    std::env::var("CI")
        .map(|v| !matches!(v.trim(), "" | "0" | "false"))
        .unwrap_or(false)
}

/// `test` cannot run its check because of `why`: under CI this panics (the test fails, naming
/// the missing capability); elsewhere it prints `skipping TEST: WHY` and the caller returns.
#[track_caller]
pub fn cannot_run(test: &str, why: &str) {
    if under_ci() {
        panic!("{test} cannot run its check under CI: {why} (scripts/install-deps.sh should provide it)");
    }
    println!("skipping {test}: {why}");
}

#[cfg(test)]
mod tests {
    #[test]
    fn ci_values_are_read_as_people_set_them() {
        // The variable is process-wide; this is the only test here that touches it.
        for (value, expected) in [
            ("true", true),
            ("1", true),
            ("false", false),
            ("0", false),
            ("", false),
        ] {
            std::env::set_var("CI", value);
            assert_eq!(super::under_ci(), expected, "CI={value:?}");
        }
        std::env::set_var("CI", "true");
        let r = std::panic::catch_unwind(|| super::cannot_run("t", "no tshark"));
        assert!(r.is_err());
        std::env::remove_var("CI");
        super::cannot_run("t", "no tshark");
    }
}
