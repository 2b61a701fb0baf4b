//! Nothing is generated here. The build-dependency on `protoc-bin-vendored` exists so that cargo
//! downloads a protoc binary, which etcd-client's own build script then uses through
//! `tools/protoc` (wired up in `.cargo/config.toml`).

fn main() {
    if let Ok(path) = protoc_bin_vendored::protoc_bin_path() {
        println!("cargo:rustc-env=PLINTH_VENDORED_PROTOC={}", path.display());
    }
}
