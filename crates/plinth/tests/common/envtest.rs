//! `plinth envtest-assets` and `go test` on them, for the suites built from Go modules.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `plinth envtest-assets` into a fresh directory: the directory and the assets' path.
pub fn written_assets() -> (tempfile::TempDir, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let assets = work.path().join("assets");
    let out = Command::new(env!("CARGO_BIN_EXE_plinth"))
        .arg("envtest-assets")
        .arg(&assets)
        .output()
        .expect("run plinth envtest-assets");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        assets.display().to_string()
    );
    for name in ["kube-apiserver", "etcd"] {
        assert!(assets.join(name).exists(), "{name} missing");
    }
    (work, assets)
}

/// `go test ARGS` in `dir` with `KUBEBUILDER_ASSETS` set to `assets` and its temporary files
/// in `temp` (made here); panics with the output when it fails, else returns it.
pub fn go_test(dir: &Path, assets: &Path, temp: &Path, args: &[&str]) -> Output {
    std::fs::create_dir_all(temp).unwrap();
    let out = Command::new("go")
        .arg("test")
        .args(args)
        .current_dir(dir)
        .env("KUBEBUILDER_ASSETS", assets)
        .env("TMPDIR", temp)
        .output()
        .expect("run go test (Go must be installed)");
    assert!(
        out.status.success(),
        "go test failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
