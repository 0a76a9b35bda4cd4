//! The compiled eBPF object, embedded at build time by build.rs.

/// The object bytes, 8-byte aligned as the ELF parser wants them. Empty when the build ran
/// with AYA_BUILD_SKIP.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/enforcer-ebpf"));

/// The eBPF object, or None when this binary was built without it.
pub fn object() -> Option<&'static [u8]> {
    (!OBJECT.is_empty()).then_some(OBJECT)
}
