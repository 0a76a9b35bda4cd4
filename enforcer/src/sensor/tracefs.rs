//! Field offsets of the sched tracepoints, read from the running kernel's tracefs `format`
//! files. Rust eBPF has no CO-RE relocations, so this is how one binary works on many kernels.

use std::path::Path;

use enforcer_common::maps::globals;

/// One field of a tracepoint record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub offset: u32,
    pub size: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("cannot read tracepoint format {path}: {source} (is tracefs mounted?)")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("tracepoint {tracepoint} has no field `{field}` in {path}")]
    MissingField {
        tracepoint: String,
        field: String,
        path: String,
    },
    #[error("tracepoint {tracepoint} field `{field}` is {size} bytes; the sensor reads {expected}")]
    UnexpectedSize {
        tracepoint: String,
        field: String,
        size: u32,
        expected: u32,
    },
}

/// Finds `field` in the text of a `format` file: lines like
/// `field:pid_t pid;	offset:24;	size:4;	signed:1;`.
pub fn find_field(format: &str, field: &str) -> Option<Field> {
    format.lines().find_map(|line| {
        let line = line.trim();
        let decl = line.strip_prefix("field:")?.split(';').next()?;
        // The declared name is the last word, without any array suffix: `char comm[16]`.
        let name = decl.split_whitespace().last()?.split('[').next()?;
        if name != field {
            return None;
        }
        let number = |key: &str| -> Option<u32> {
            line.split(';')
                .find_map(|part| part.trim().strip_prefix(key)?.parse().ok())
        };
        Some(Field {
            offset: number("offset:")?,
            size: number("size:")?,
        })
    })
}

/// The offsets the sensor needs, as (global name, offset) pairs ready for the loader.
pub fn sensor_offsets(tracefs: &Path) -> Result<Vec<(&'static str, u32)>, FormatError> {
    let wanted: [(&str, &str, &str, u32); 10] = [
        (globals::WAKEUP_PID_OFFSET, "sched_wakeup", "pid", 4),
        (globals::WAKEUP_CPU_OFFSET, "sched_wakeup", "target_cpu", 4),
        (globals::WAKEUP_NEW_PID_OFFSET, "sched_wakeup_new", "pid", 4),
        (
            globals::WAKEUP_NEW_CPU_OFFSET,
            "sched_wakeup_new",
            "target_cpu",
            4,
        ),
        (
            globals::SWITCH_PREV_PID_OFFSET,
            "sched_switch",
            "prev_pid",
            4,
        ),
        (
            globals::SWITCH_PREV_STATE_OFFSET,
            "sched_switch",
            "prev_state",
            8,
        ),
        (
            globals::SWITCH_NEXT_PID_OFFSET,
            "sched_switch",
            "next_pid",
            4,
        ),
        (
            globals::FORK_PARENT_PID_OFFSET,
            "sched_process_fork",
            "parent_pid",
            4,
        ),
        (
            globals::FORK_CHILD_PID_OFFSET,
            "sched_process_fork",
            "child_pid",
            4,
        ),
        (globals::EXIT_PID_OFFSET, "sched_process_exit", "pid", 4),
    ];
    let mut out = Vec::with_capacity(wanted.len());
    for (global, tracepoint, field, expected) in wanted {
        let path = tracefs.join("events/sched").join(tracepoint).join("format");
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| FormatError::Read {
            path: shown.clone(),
            source,
        })?;
        let found = find_field(&text, field).ok_or_else(|| FormatError::MissingField {
            tracepoint: tracepoint.to_owned(),
            field: field.to_owned(),
            path: shown,
        })?;
        if found.size != expected {
            return Err(FormatError::UnexpectedSize {
                tracepoint: tracepoint.to_owned(),
                field: field.to_owned(),
                size: found.size,
                expected,
            });
        }
        out.push((global, found.offset));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Copied from this machine's 6.18 kernel: note the __data_loc comms of the fork event.
    const FORK_618: &str = "name: sched_process_fork\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
        \tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\
        \tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;\n\
        \tfield:__data_loc char[] child_comm;\toffset:16;\tsize:4;\tsigned:0;\n\
        \tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n";

    const SWITCH: &str = "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
        \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
        \tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
        \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n";

    #[test]
    fn finds_fields_of_the_618_fork_format() {
        assert_eq!(
            find_field(FORK_618, "parent_pid"),
            Some(Field {
                offset: 12,
                size: 4
            })
        );
        assert_eq!(
            find_field(FORK_618, "child_pid"),
            Some(Field {
                offset: 20,
                size: 4
            })
        );
        assert_eq!(
            find_field(FORK_618, "child_comm"),
            Some(Field {
                offset: 16,
                size: 4
            })
        );
    }

    #[test]
    fn array_fields_and_prefixes_do_not_confuse_it() {
        assert_eq!(
            find_field(SWITCH, "prev_comm"),
            Some(Field {
                offset: 8,
                size: 16
            })
        );
        assert_eq!(
            find_field(SWITCH, "prev_state"),
            Some(Field {
                offset: 32,
                size: 8
            })
        );
        assert_eq!(find_field(SWITCH, "pid"), None);
        assert_eq!(
            find_field(SWITCH, "next_pid"),
            Some(Field {
                offset: 56,
                size: 4
            })
        );
    }
}
