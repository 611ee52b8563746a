//! Embeds every simulator reproduction under `scenarios/reproduce/` (a `NAME.toml` and the
//! scenario template it names) into the crate, so `satstp reproduce` works from any directory.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // Read at run time: `env!` would bake in the directory the build script was compiled in,
    // so a target directory copied from another checkout would embed that checkout's files.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest).join("../../scenarios/reproduce");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut out = String::from("/// (file name, contents) of every reproduction and template.\npub const FILES: &[(&str, &str)] = &[\n");
    if let Ok(rd) = std::fs::read_dir(&dir) {
        let mut all: Vec<_> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        all.sort();
        for p in all {
            println!("cargo:rerun-if-changed={}", p.display());
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let _ = writeln!(
                out,
                "    ({name:?}, include_str!({:?})),",
                p.display().to_string()
            );
        }
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("reproductions.rs");
    std::fs::write(dest, out).expect("write reproductions.rs");
}
