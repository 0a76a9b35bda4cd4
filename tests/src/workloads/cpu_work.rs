//! CPU work measured in the thread's own CPU time, so that a fixed amount of work takes longer
//! in wall time exactly when the thread is kept off the CPU: that is what the simulator's step
//! times must show under contention.

use std::time::Duration;

/// CPU time consumed by the calling thread.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Spins until this thread has used `amount` of CPU time.
pub fn burn(amount: Duration) {
    let until = thread_cpu_time() + amount;
    let mut x = 0u64;
    while thread_cpu_time() < until {
        for i in 0..64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
}

/// Pins the calling thread to `cpus`.
pub fn pin_to(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: zeroed cpu_set_t is empty; CPU_SET writes within it for cpu < CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: valid set of the right size; 0 is the calling thread.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
