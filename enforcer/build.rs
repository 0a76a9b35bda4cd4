//! Builds the eBPF object (enforcer-ebpf, for bpfel-unknown-none, with the nightly toolchain
//! pinned in enforcer-ebpf/rust-toolchain.toml and bpf-linker) into OUT_DIR, where
//! `src/sensor/object.rs` embeds it.
//!
//! With `AYA_BUILD_SKIP=1` (metadata-only work such as clippy on a machine without the eBPF
//! toolchain) an empty object is written instead; the enforcer then refuses to start with
//! "eBPF object not built" rather than failing in some obscure way. `cargo xtask` never sets it.

use std::{env, fs, path::PathBuf};

use anyhow::Context as _;

const EBPF_PACKAGE: &str = "enforcer-ebpf";

include!("../enforcer-ebpf/pinned_toolchain.rs");

fn main() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    let object = out_dir.join(EBPF_PACKAGE);
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    if skip {
        fs::write(&object, []).with_context(|| format!("writing stub {}", object.display()))?;
        return Ok(());
    }
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").context("no manifest dir")?);
    let ebpf_path = manifest_dir.join("..").join(EBPF_PACKAGE);
    let toolchain = pinned_toolchain(&ebpf_path)?;
    let ebpf_dir = ebpf_path
        .to_str()
        .context("non-UTF-8 path to enforcer-ebpf")?;
    println!("cargo:rerun-if-changed={}/rust-toolchain.toml", ebpf_dir);
    println!("cargo:rerun-if-changed={}/pinned_toolchain.rs", ebpf_dir);
    // The eBPF crate depends on the shared types too; rebuild when they change.
    println!("cargo:rerun-if-changed={}/../enforcer-common/src", ebpf_dir);
    // The eBPF crate's build prints its progress ("Compiling core ...") on stderr, and
    // aya-build passes every such line on as a cargo warning: about forty lines of `warning:
    // enforcer@0.1.0:    Compiling ...` in a fresh build, none of them a warning. Quiet, that
    // build still reports its errors (on stderr) and the compiler's diagnostics (in the JSON
    // messages aya-build reads).
    // SAFETY: a build script's main thread, before it starts any other.
    unsafe { env::set_var("CARGO_TERM_QUIET", "true") };
    aya_build::build_ebpf(
        [aya_build::Package {
            name: EBPF_PACKAGE,
            root_dir: ebpf_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Custom(&toolchain),
    )
    .with_context(|| {
        format!(
            "building the eBPF object failed; `cargo xtask bootstrap` installs what it needs: \
             the {toolchain} toolchain with rust-src, LLVM 22 and bpf-linker built against it. \
             If bpf-linker said \"Invalid record\", it was built against another LLVM than \
             the one {toolchain} emits (`rustup run {toolchain} rustc -vV` names it): the pin \
             is chosen for LLVM 22, and `LLVM_PREFIX=/usr/lib/llvm-22 cargo install \
             bpf-linker --force --no-default-features --features llvm-22` rebuilds bpf-linker \
             for it"
        )
    })
}
