//! Golden-file (snapshot) comparison, shared by the plugin's unit tests (which include this file
//! with `#[path]`) and its integration tests (through `support`).

use std::path::Path;

/// Compares `got` with the stored snapshot `dir/name`; with `UPDATE_SNAPSHOTS=1` in the
/// environment, writes `got` there instead (creating `dir`).
///
/// Panics (failing the test) when the snapshot is missing, unreadable or differs, or when it
/// cannot be written.
pub fn check_snapshot(dir: &Path, name: &str, got: &str) {
    let file = dir.join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(dir).expect("create snapshot directory");
        std::fs::write(&file, got).expect("write snapshot");
        return;
    }
    let want = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e}; run with UPDATE_SNAPSHOTS=1 to create it",
            file.display()
        )
    });
    assert_eq!(
        got,
        want,
        "{name} differs from {}; if the change is intended, rerun with UPDATE_SNAPSHOTS=1\n{got}",
        file.display()
    );
}
