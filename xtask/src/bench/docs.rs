//! Writing benchmark results into docs/benchmarks.md, between markers, so that every figure
//! there comes from a run and re-running replaces it.

use anyhow::Context as _;

use crate::cargo::workspace_root;

/// Replaces the text between `<!-- NAME:begin -->` and `<!-- NAME:end -->`.
pub fn replace_section(name: &str, body: &str) -> anyhow::Result<()> {
    let path = workspace_root().join("docs/benchmarks.md");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let (begin, end) = (
        format!("<!-- {name}:begin -->"),
        format!("<!-- {name}:end -->"),
    );
    let start = text
        .find(&begin)
        .with_context(|| format!("{} has no {begin} marker", path.display()))?;
    let stop = text
        .find(&end)
        .with_context(|| format!("{} has no {end} marker", path.display()))?;
    let updated = format!("{}{begin}\n{body}{}", &text[..start], &text[stop..]);
    std::fs::write(&path, updated).with_context(|| format!("writing {}", path.display()))
}

/// Kernel, CPU model, CPU count and memory of this machine, in one line.
/// When and from what a run was made, for its section: today's date (UTC) and the build of
/// this program (`git describe` when it was compiled; `-dirty`: with uncommitted changes).
pub fn run_stamp() -> String {
    let date = std::process::Command::new("date")
        .args(["-u", "+%F"])
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|date| !date.is_empty())
        .unwrap_or_else(|| "date unknown".to_owned());
    format!("run {date}, build {}", env!("REAMER_BUILD"))
}

pub fn machine_description() -> String {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split(':').nth(1))
        .unwrap_or("unknown CPU")
        .trim()
        .to_owned();
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    format!(
        "Linux {}, {cpus} × {model}, {mem_gib:.0} GiB",
        read("/proc/sys/kernel/osrelease").trim()
    )
}
