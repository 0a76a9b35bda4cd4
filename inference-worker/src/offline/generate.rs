//! `inference-worker make-job`: writes a job directory of random inputs from a fixed seed, for
//! the demo, the tests and the benchmark.

use std::{io::Write as _, os::unix::fs::DirBuilderExt as _, path::Path};

use super::INPUTS;

/// xorshift64*: enough for test inputs, and the same on every machine.
struct Random(u64);

impl Random {
    fn next_unit(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Writes `lines` items of `item_len` values in [0, 1) to DIR/inputs.jsonl, ids "item-N".
pub fn write_job(dir: &Path, lines: u64, item_len: usize, seed: u64) -> std::io::Result<()> {
    // Writable by its owner only, whatever the umask: a worker refuses a job directory that
    // another user can change (`job_dir`).
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join(INPUTS))?);
    let mut random = Random(seed.max(1));
    for line in 1..=lines {
        let data: Vec<f32> = (0..item_len).map(|_| random.next_unit()).collect();
        serde_json::to_writer(
            &mut out,
            &serde_json::json!({"id": format!("item-{line}"), "data": data}),
        )?;
        out.write_all(b"\n")?;
    }
    out.flush()
}
