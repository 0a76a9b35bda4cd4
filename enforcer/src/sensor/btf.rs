//! Just enough of a BTF reader to find struct member offsets and tracepoint prototypes in the
//! running kernel's /sys/kernel/btf/vmlinux.
//!
//! Rust eBPF has no CO-RE relocations (aya issue 349), so the sensor reads `task_struct`
//! fields at offsets this module resolves at load time and hands over as read-only globals.
//! A binary built on one kernel therefore reads the right bytes on another.
//! Format: Documentation/bpf/btf.rst (header, type section, string section).

use std::path::Path;

const BTF_MAGIC: u16 = 0xeb9f;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error(
        "cannot read kernel BTF {path}: {source} (the sensor needs a kernel built with CONFIG_DEBUG_INFO_BTF)"
    )]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("kernel BTF is malformed: {0}")]
    Malformed(&'static str),
    #[error("kernel BTF has no {0}")]
    Missing(String),
}

#[derive(Debug, Clone)]
struct Member {
    name: String,
    type_id: u32,
    bit_offset: u32,
}

#[derive(Debug, Clone)]
struct Type {
    kind: u32,
    name: String,
    /// Referenced type (PTR, TYPEDEF, CONST, ..., FUNC_PROTO return).
    type_id: u32,
    /// STRUCT/UNION members, or FUNC_PROTO parameters (bit_offset unused).
    members: Vec<Member>,
}

/// A parsed BTF blob; type ids index `types` (id 0 is void).
pub(crate) struct Btf {
    types: Vec<Type>,
}

fn u32_at(data: &[u8], at: usize) -> Result<u32, BtfError> {
    let bytes = data
        .get(at..at + 4)
        .ok_or(BtfError::Malformed("truncated"))?;
    Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
}

impl Btf {
    pub(crate) fn from_sys_fs() -> Result<Self, BtfError> {
        Self::load(Path::new("/sys/kernel/btf/vmlinux"))
    }

    pub(crate) fn load(path: &Path) -> Result<Self, BtfError> {
        let data = std::fs::read(path).map_err(|source| BtfError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&data)
    }

    pub(crate) fn parse(data: &[u8]) -> Result<Self, BtfError> {
        if data.len() < 24 || u16::from_le_bytes([data[0], data[1]]) != BTF_MAGIC {
            return Err(BtfError::Malformed(
                "bad magic (only little-endian BTF is read)",
            ));
        }
        let header_len = u32_at(data, 4)? as usize;
        let (type_off, type_len) = (u32_at(data, 8)? as usize, u32_at(data, 12)? as usize);
        let (str_off, str_len) = (u32_at(data, 16)? as usize, u32_at(data, 20)? as usize);
        let types_start = header_len + type_off;
        let strings = data
            .get(header_len + str_off..header_len + str_off + str_len)
            .ok_or(BtfError::Malformed("string section out of bounds"))?;
        let name = |off: u32| -> String {
            let rest = strings.get(off as usize..).unwrap_or_default();
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end]).into_owned()
        };

        let mut types = vec![Type {
            kind: 0,
            name: String::new(),
            type_id: 0,
            members: Vec::new(),
        }];
        let mut at = types_start;
        while at < types_start + type_len {
            let name_off = u32_at(data, at)?;
            let info = u32_at(data, at + 4)?;
            let size_or_type = u32_at(data, at + 8)?;
            at += 12;
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let kind_flag = info >> 31 == 1;
            let mut members = Vec::new();
            match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => at += 4,
                KIND_ARRAY => at += 12,
                KIND_STRUCT | KIND_UNION => {
                    for _ in 0..vlen {
                        let offset = u32_at(data, at + 8)?;
                        members.push(Member {
                            name: name(u32_at(data, at)?),
                            type_id: u32_at(data, at + 4)?,
                            // With kind_flag the top 8 bits hold a bitfield size.
                            bit_offset: if kind_flag {
                                offset & 0x00ff_ffff
                            } else {
                                offset
                            },
                        });
                        at += 12;
                    }
                }
                KIND_ENUM => at += 8 * vlen,
                KIND_FUNC_PROTO => {
                    for _ in 0..vlen {
                        members.push(Member {
                            name: name(u32_at(data, at)?),
                            type_id: u32_at(data, at + 4)?,
                            bit_offset: 0,
                        });
                        at += 8;
                    }
                }
                KIND_DATASEC => at += 12 * vlen,
                KIND_ENUM64 => at += 12 * vlen,
                _ => {}
            }
            types.push(Type {
                kind,
                name: name(name_off),
                type_id: size_or_type,
                members,
            });
        }
        Ok(Self { types })
    }

    fn get(&self, id: u32) -> Result<&Type, BtfError> {
        self.types
            .get(id as usize)
            .ok_or(BtfError::Malformed("type id out of range"))
    }

    /// Follows typedefs and qualifiers to the underlying type.
    fn resolve(&self, mut id: u32) -> Result<&Type, BtfError> {
        for _ in 0..32 {
            let t = self.get(id)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.type_id
                }
                _ => return Ok(t),
            }
        }
        Err(BtfError::Malformed("type chain too long"))
    }

    fn named(&self, kind: u32, name: &str) -> Result<&Type, BtfError> {
        self.types
            .iter()
            .find(|t| t.kind == kind && t.name == name)
            .ok_or_else(|| BtfError::Missing(format!("type {name}")))
    }

    /// Byte offset of `path` (e.g. ["thread_info", "cpu"]) inside `struct name`, descending
    /// through nested and anonymous struct/union members.
    pub(crate) fn member_offset(&self, name: &str, path: &[&str]) -> Result<u32, BtfError> {
        let mut current = self.named(KIND_STRUCT, name)?;
        let mut bits = 0;
        for (depth, field) in path.iter().enumerate() {
            let (member_bits, member_type) =
                self.find_member(current, field)?.ok_or_else(|| {
                    BtfError::Missing(format!(
                        "member {} in struct {name}",
                        path[..=depth].join(".")
                    ))
                })?;
            bits += member_bits;
            current = self.resolve(member_type)?;
        }
        if bits % 8 != 0 {
            return Err(BtfError::Malformed("member is a bitfield"));
        }
        Ok(bits / 8)
    }

    /// (bit offset, type) of member `field`, searching anonymous members too.
    fn find_member(&self, within: &Type, field: &str) -> Result<Option<(u32, u32)>, BtfError> {
        for member in &within.members {
            if member.name == field {
                return Ok(Some((member.bit_offset, member.type_id)));
            }
            if member.name.is_empty() {
                let inner = self.resolve(member.type_id)?;
                if matches!(inner.kind, KIND_STRUCT | KIND_UNION)
                    && let Some((bits, id)) = self.find_member(inner, field)?
                {
                    return Ok(Some((member.bit_offset + bits, id)));
                }
            }
        }
        Ok(None)
    }

    /// Parameter type names of the BTF-enabled tracepoint `name`, after the leading context
    /// pointer: what `ctx.arg(0..)` of a tp_btf program reads. Pointers are named `T *`.
    pub(crate) fn tracepoint_args(&self, name: &str) -> Result<Vec<String>, BtfError> {
        let typedef = self.named(KIND_TYPEDEF, &format!("btf_trace_{name}"))?;
        let pointer = self.get(typedef.type_id)?;
        let proto = self.get(pointer.type_id)?;
        if pointer.kind != KIND_PTR || proto.kind != KIND_FUNC_PROTO {
            return Err(BtfError::Malformed(
                "btf_trace typedef is not a function pointer",
            ));
        }
        proto
            .members
            .iter()
            .skip(1)
            .map(|p| self.type_name(p.type_id))
            .collect()
    }

    fn type_name(&self, id: u32) -> Result<String, BtfError> {
        let t = self.resolve(id)?;
        Ok(match t.kind {
            KIND_PTR => format!("{} *", self.resolve(t.type_id)?.name),
            // C's `bool` is a macro for `_Bool`; BTF records the latter.
            _ if t.name == "_Bool" => "bool".to_owned(),
            _ => t.name.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a little BTF blob: int, struct inner { u32 a; u32 cpu; }, struct outer
    /// { inner ti; union { int x; }; int pid @ 96 bits }, a pointer to outer, and the
    /// tracepoint typedef btf_trace_tp = void (*)(void *, outer *, int).
    fn sample() -> Vec<u8> {
        let strings = b"\0int\0inner\0a\0cpu\0outer\0ti\0pid\0x\0btf_trace_tp\0__data\0p\0v\0";
        let s = |name: &str| -> u32 {
            let needle = [b"\0".as_slice(), name.as_bytes(), b"\0"].concat();
            strings
                .windows(needle.len())
                .position(|w| w == needle.as_slice())
                .unwrap() as u32
                + 1
        };
        let mut t = Vec::new();
        let mut push = |words: &[u32]| {
            words
                .iter()
                .for_each(|w| t.extend_from_slice(&w.to_le_bytes()))
        };
        push(&[s("int"), KIND_INT << 24, 4, 32]); // 1: int
        push(&[s("inner"), KIND_STRUCT << 24 | 2, 8]); // 2: struct inner
        push(&[s("a"), 1, 0]);
        push(&[s("cpu"), 1, 32]);
        push(&[0, KIND_UNION << 24 | 1, 4]); // 3: anonymous union
        push(&[s("x"), 1, 0]);
        push(&[s("outer"), KIND_STRUCT << 24 | 3, 16]); // 4: struct outer
        push(&[s("ti"), 2, 0]);
        push(&[0, 3, 64]);
        push(&[s("pid"), 1, 96]);
        push(&[0, KIND_PTR << 24, 4]); // 5: outer *
        push(&[0, KIND_PTR << 24, 0]); // 6: void *
        push(&[0, KIND_FUNC_PROTO << 24 | 3, 0]); // 7: void (void *, outer *, int)
        push(&[s("__data"), 6]);
        push(&[s("p"), 5]);
        push(&[s("v"), 1]);
        push(&[0, KIND_PTR << 24, 7]); // 8: pointer to the proto
        push(&[s("btf_trace_tp"), KIND_TYPEDEF << 24, 8]); // 9
        let mut blob = Vec::new();
        blob.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        blob.extend_from_slice(&[1, 0]);
        for word in [
            24u32,
            0,
            t.len() as u32,
            t.len() as u32,
            strings.len() as u32,
        ] {
            blob.extend_from_slice(&word.to_le_bytes());
        }
        blob.extend_from_slice(&t);
        blob.extend_from_slice(strings);
        blob
    }

    #[test]
    fn finds_nested_anonymous_and_plain_members() {
        let btf = Btf::parse(&sample()).unwrap();
        assert_eq!(btf.member_offset("outer", &["pid"]).unwrap(), 12);
        assert_eq!(btf.member_offset("outer", &["ti", "cpu"]).unwrap(), 4);
        assert_eq!(btf.member_offset("outer", &["x"]).unwrap(), 8);
        assert!(matches!(
            btf.member_offset("outer", &["nope"]),
            Err(BtfError::Missing(_))
        ));
    }

    #[test]
    fn reads_tracepoint_prototypes() {
        let btf = Btf::parse(&sample()).unwrap();
        assert_eq!(
            btf.tracepoint_args("tp").unwrap(),
            vec!["outer *".to_owned(), "int".to_owned()]
        );
        assert!(btf.tracepoint_args("missing").is_err());
    }

    #[test]
    fn running_kernel_has_the_fields_the_sensor_reads() {
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("SKIPPED: no /sys/kernel/btf/vmlinux here");
            return;
        };
        let pid = btf.member_offset("task_struct", &["pid"]).unwrap();
        assert!(pid > 0 && pid % 4 == 0, "pid at {pid}");
        assert_eq!(
            btf.tracepoint_args("sched_wakeup").unwrap(),
            vec!["task_struct *".to_owned()]
        );
        let switch = btf.tracepoint_args("sched_switch").unwrap();
        assert_eq!(
            switch[1..3],
            ["task_struct *".to_owned(), "task_struct *".to_owned()]
        );
    }
}
