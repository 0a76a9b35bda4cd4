// The one reader of the eBPF toolchain pin, `include!`d by enforcer/build.rs (which builds the
// eBPF object with it) and by xtask's bootstrap (which installs it): a build script cannot
// depend on a workspace crate of its own.

/// The channel pinned in `<ebpf_dir>/rust-toolchain.toml` (why it is pinned: there).
fn pinned_toolchain(ebpf_dir: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let file = ebpf_dir.join("rust-toolchain.toml");
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    table
        .get("toolchain")
        .and_then(|t| t.get("channel"))
        .and_then(|c| c.as_str())
        .map(str::to_owned)
        .with_context(|| format!("{}: no [toolchain] channel", file.display()))
}
