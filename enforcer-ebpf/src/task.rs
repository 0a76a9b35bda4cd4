//! Reading `task_struct` fields at offsets userspace resolved from the running kernel's BTF.
//!
//! The programs are tp_btf, so the task pointers they get are typed (PTR_TO_BTF_ID): the
//! verifier checks each load against the kernel's BTF and turns it into a fault-safe direct
//! load. The offsets live in .rodata, which the loader freezes; the verifier reads them as
//! constants. Measured here: this path costs about half of a tracepoint program that copies
//! its record with bpf_probe_read_kernel (docs/benchmarks.md).

#[unsafe(no_mangle)]
static TASK_PID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_CPU_OFFSET: u32 = 0;

#[inline(always)]
fn global(value: &'static u32) -> usize {
    // SAFETY: a plain read of a static the loader patched before the program was verified;
    // volatile so that LLVM does not fold the build-time placeholder.
    unsafe { core::ptr::read_volatile(value) as usize }
}

/// A `struct task_struct *` handed to the program by the tracepoint.
#[derive(Clone, Copy)]
pub struct Task(*const u8);

impl Task {
    #[inline(always)]
    pub fn new(pointer: *const u8) -> Self {
        Self(pointer)
    }

    #[inline(always)]
    fn read_u32(self, offset: usize) -> u32 {
        // SAFETY: a BTF-typed pointer from the tracepoint; the verifier checks the field.
        unsafe { core::ptr::read_volatile(self.0.add(offset).cast::<u32>()) }
    }

    /// The thread id.
    #[inline(always)]
    pub fn tid(self) -> u32 {
        self.read_u32(global(&TASK_PID_OFFSET))
    }

    /// The CPU whose run queue holds the task.
    #[inline(always)]
    pub fn cpu(self) -> u32 {
        self.read_u32(global(&TASK_CPU_OFFSET))
    }
}
