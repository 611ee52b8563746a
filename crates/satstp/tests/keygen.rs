//! `satstp keygen`: writes a key pair the tunnel can load, with the private key readable only by
//! its owner; prints a pair without `--out`; never overwrites a key file.

mod common;

use common::{fresh_dir, satstp};

#[test]
fn keygen_writes_loadable_keys_private_0600() {
    let dir = fresh_dir("keygen");
    let prefix = dir.join("x");
    let keygen_out = || {
        satstp()
            .args(["keygen", "--out"])
            .arg(&prefix)
            .output()
            .unwrap()
    };
    let out = keygen_out();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let private = pep::keys::load_private_key(&dir.join("x.key")).unwrap();
    let public = pep::keys::load_public_key(&dir.join("x.pub")).unwrap();
    assert_eq!(private.public_key().unwrap(), public);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&public.to_hex()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("x.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // Refuses to overwrite, naming the file.
    let again = keygen_out();
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("x.key") && err.contains("already exists"),
        "{err}"
    );
    assert_eq!(
        pep::keys::load_private_key(&dir.join("x.key")).unwrap(),
        private
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn keygen_without_out_prints_a_matching_pair() {
    let out = satstp().arg("keygen").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap()
            .to_string()
    };
    let private = pep::keys::PrivateKey::from_hex(&field("private")).unwrap();
    let public = pep::keys::PublicKey::from_hex(&field("public")).unwrap();
    assert_eq!(private.public_key().unwrap(), public);
}
