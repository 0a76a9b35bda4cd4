//! The build a benchmark ran: `git describe` of the tree xtask was built from, so that a
//! figure recorded by a copied release binary on the GPU server names its build.

use std::process::Command;

fn main() {
    let build = Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=7"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown (built outside git)".to_owned());
    println!("cargo:rustc-env=REAMER_BUILD={build}");
    // A new commit, or a change staged or committed, is a new build.
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/index");
    println!("cargo:rerun-if-changed=../.git/refs/heads");
}
