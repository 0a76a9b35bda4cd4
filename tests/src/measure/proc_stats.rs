//! CPU time and memory read from /proc: the whole node's (/proc/stat) and one process's
//! (/proc/PID/stat, /proc/PID/status). Jiffies are USER_HZ ticks, 100 per second on Linux.

/// Jiffies per second in /proc (USER_HZ).
pub const JIFFIES_PER_S: f64 = 100.0;

/// The node's CPU time so far, in jiffies, from /proc/stat's `cpu` line.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeJiffies {
    /// Everything but idle and iowait.
    pub busy: u64,
    /// Taken by the hypervisor for other guests.
    pub steal: u64,
    /// user through steal.
    pub total: u64,
}

impl NodeJiffies {
    /// The share of the node's CPU time the hypervisor gave to other guests since `before`, %.
    pub fn steal_pct_since(&self, before: &NodeJiffies) -> f64 {
        (self.steal - before.steal) as f64 / (self.total - before.total).max(1) as f64 * 100.0
    }

    /// CPUs left idle on average since `before`, `seconds` ago.
    pub fn idle_cpus_since(&self, before: &NodeJiffies, seconds: f64) -> f64 {
        let idle = (self.total - self.busy) - (before.total - before.busy);
        idle as f64 / JIFFIES_PER_S / seconds.max(1e-9)
    }
}

pub fn node_jiffies() -> std::io::Result<NodeJiffies> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .ok_or_else(|| std::io::Error::other("/proc/stat has no cpu line"))?
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal ...
    let total: u64 = fields.iter().take(8).sum();
    Ok(NodeJiffies {
        busy: total - field(3) - field(4),
        steal: field(7),
        total,
    })
}

/// Jiffies process `pid` has used (user + system, all its threads), from /proc/PID/stat;
/// a process that is gone counts 0.
pub fn process_jiffies(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let parse = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    parse(11) + parse(12)
}

/// Resident memory of process `pid`, KiB (VmRSS); None when it is gone.
pub fn resident_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// The most resident memory process `pid` has had, KiB (VmHWM): what a request that came and
/// went cost at its peak, after it freed it again.
pub fn peak_resident_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
}
