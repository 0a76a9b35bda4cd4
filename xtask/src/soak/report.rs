//! The soak's report: every cycle, the checks, and the verdict.

use anyhow::bail;

use super::{Cycle, FLAT_FILES, FLAT_RSS_PCT, FLAT_THREADS, RECOVERED_PCT, Resources};

#[derive(Debug, serde::Serialize)]
pub struct Soak {
    pub minutes: f64,
    pub cycles: Vec<Cycle>,
    /// Per daemon life: its resources after warm-up, and at its last sample.
    pub lives: Vec<(Resources, Resources)>,
    pub jobs_completed: u32,
    pub lines_checked: u64,
    pub offline_restarts: u32,
}

impl Soak {
    fn worst_window(&self) -> Option<&Cycle> {
        self.cycles
            .iter()
            .min_by(|a, b| a.attainment_pct.total_cmp(&b.attainment_pct))
    }

    /// The largest growth over any one daemon life: files, threads, resident memory (%).
    fn growth(&self) -> (i64, i64, f64) {
        self.lives
            .iter()
            .fold((0, 0, 0.0f64), |(f, t, r), (first, last)| {
                let rss =
                    (last.rss_kib - first.rss_kib) as f64 / first.rss_kib.max(1) as f64 * 100.0;
                (
                    f.max(last.files - first.files),
                    t.max(last.threads - first.threads),
                    r.max(rss),
                )
            })
    }

    /// Fails, naming the check, where one did not hold. (Lost or repeated offline lines fail
    /// the soak where they are found.)
    pub fn verdict(&self) -> anyhow::Result<()> {
        if let Some(cycle) = self.cycles.iter().find(|c| c.pods.is_some()) {
            bail!(
                "the node's pods after {:?}: {}",
                cycle.fault,
                cycle.pods.as_deref().unwrap_or_default()
            );
        }
        if let Some(worst) = self.worst_window()
            && worst.attainment_pct < RECOVERED_PCT
        {
            bail!(
                "the online SLO did not recover after {:?}: {:.1}% within it (want {RECOVERED_PCT}%)",
                worst.fault,
                worst.attainment_pct
            );
        }
        let (files, threads, rss) = self.growth();
        if files > FLAT_FILES || threads > FLAT_THREADS || rss > FLAT_RSS_PCT {
            bail!(
                "the daemon grew over one life: {files} files, {threads} threads, {rss:.0}% \
                 resident memory (flat: {FLAT_FILES}, {FLAT_THREADS}, {FLAT_RSS_PCT}%)"
            );
        }
        Ok(())
    }
}

pub fn markdown(soak: &Soak, command: &str, machine: &str) -> String {
    let mut out = format!(
        "Command: `{command}`\n\nMachine: {machine}\n\n\
         {:.1} minutes, {} faults. Each row: the fault, the time until the online worker served \
         again, then a window of online load ({} requests/s, SLO {} ms) and the daemon's open \
         files, threads and resident memory at its end.\n\n\
         The pods column: every offline pod of the node enforced, and frozen exactly while its \
         pool is paused, after the fault (and the fault's own check: a deleted pod given back, \
         a relabelled one let go of).\n\n\
         | # | fault | served again after | within SLO | p99 | daemon files / threads / RSS | pods |\n\
         |---|---|---|---|---|---|---|\n",
        soak.minutes,
        soak.cycles.len(),
        super::RATE,
        super::SLO_MS
    );
    for (i, cycle) in soak.cycles.iter().enumerate() {
        out.push_str(&format!(
            "| {} | {} | {:.1} s | {:.1}% | {:.1} ms | {} / {} / {} MiB | {} |\n",
            i + 1,
            cycle.fault.describe(),
            cycle.seconds_to_serve_again,
            cycle.attainment_pct,
            cycle.p99_ms,
            cycle.daemon.files,
            cycle.daemon.threads,
            cycle.daemon.rss_kib / 1024,
            cycle.pods.as_deref().unwrap_or("ok")
        ));
    }
    let (files, threads, rss) = soak.growth();
    let worst = soak.worst_window().map_or(f64::NAN, |c| c.attainment_pct);
    out.push_str(&format!(
        "\n| check | result | target |\n|---|---|---|\n\
         | offline lines checked, each exactly once and in order ({} jobs finished, {} worker restarts) | {} | none lost, none twice |\n\
         | worst window within SLO after a fault | {worst:.1}% | ≥ {RECOVERED_PCT}% |\n\
         | largest growth over one daemon life ({} lives): files / threads / RSS | {files} / {threads} / {rss:.0}% | ≤ {FLAT_FILES} / {FLAT_THREADS} / {FLAT_RSS_PCT}% |\n",
        soak.jobs_completed,
        soak.offline_restarts,
        soak.lines_checked,
        soak.lives.len(),
    ));
    out
}
