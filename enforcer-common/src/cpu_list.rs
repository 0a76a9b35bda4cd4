//! Kernel CPU lists (`0-3,8,10-11`): what `cpuset.cpus` and `/sys/devices/system/cpu/online`
//! hold, what the enforcer writes and what the worker's `--cpus` takes.

use std::collections::BTreeSet;

/// A CPU list that does not parse, with the part that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("'{part}' in CPU list '{text}' is not a CPU number or range")]
    NotANumber { text: String, part: String },
    #[error("range '{part}' in CPU list '{text}' runs backwards")]
    Backwards { text: String, part: String },
    #[error("'{part}' in CPU list '{text}' names a CPU above {MAX_CPU}, more than Linux supports")]
    TooLarge { text: String, part: String },
}

/// The highest CPU number any Linux machine can have: `CONFIG_NR_CPUS` is at most 8192 on
/// every architecture. A list naming more comes from a damaged or hostile file, and a range up
/// to `u32::MAX` would otherwise take gigabytes to hold.
pub const MAX_CPU: u32 = 8191;

/// Parses a CPU list: comma-separated numbers and inclusive ranges, blanks around them allowed.
/// An empty list is an empty set (an empty `cpuset.cpus`).
pub fn parse(text: &str) -> Result<BTreeSet<u32>, CpuListError> {
    let mut cpus = BTreeSet::new();
    for part in text
        .trim()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let number = |s: &str| {
            let cpu = s
                .trim()
                .parse::<u32>()
                .map_err(|_| CpuListError::NotANumber {
                    text: text.trim().to_owned(),
                    part: part.to_owned(),
                })?;
            if cpu > MAX_CPU {
                return Err(CpuListError::TooLarge {
                    text: text.trim().to_owned(),
                    part: part.to_owned(),
                });
            }
            Ok(cpu)
        };
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (number(lo)?, number(hi)?);
                if lo > hi {
                    return Err(CpuListError::Backwards {
                        text: text.trim().to_owned(),
                        part: part.to_owned(),
                    });
                }
                cpus.extend(lo..=hi);
            }
            None => {
                cpus.insert(number(part)?);
            }
        }
    }
    Ok(cpus)
}

/// Formats a CPU set the way cpuset files write it: ranges where CPUs follow each other.
pub fn format(cpus: &BTreeSet<u32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().expect("peeked");
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

/// How many CPUs a list names; 0 for one that does not parse.
pub fn count(text: &str) -> usize {
    parse(text).map_or(0, |cpus| cpus.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip() {
        let cpus = parse("0-3,8,10-11\n").unwrap();
        assert_eq!(cpus, BTreeSet::from([0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(format(&cpus), "0-3,8,10-11");
        assert_eq!(format(&BTreeSet::new()), "");
        assert_eq!(parse("1, 1,0").unwrap(), BTreeSet::from([0, 1]));
        assert_eq!(parse("").unwrap(), BTreeSet::new());
        assert_eq!(count("0-1,3"), 3);
        assert_eq!(count("x"), 0);
    }

    #[test]
    fn errors_name_the_part_that_is_wrong() {
        let err = parse("3-1").unwrap_err().to_string();
        assert!(err.contains("'3-1'") && err.contains("backwards"), "{err}");
        let err = parse("0,a").unwrap_err().to_string();
        assert!(err.contains("'a'") && err.contains("'0,a'"), "{err}");
        let err = parse("0-4294967295").unwrap_err().to_string();
        assert!(err.contains("above 8191"), "{err}");
        assert_eq!(parse("8191").unwrap().len(), 1);
    }
}
