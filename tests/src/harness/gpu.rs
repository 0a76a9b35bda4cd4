//! What the GPU tests and the GPU benchmark share: whether this machine has an NVIDIA GPU that
//! PyTorch can use, PyTorch snippets that hold GPU memory, and an MPS control daemon on a pipe
//! directory of its own, quit when dropped, so nothing outside the test meets it.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};

/// The control program's name, looked up on the PATH.
pub const MPS_CONTROL: &str = "nvidia-cuda-mps-control";

/// Allocates argv[1] GiB on the GPU, says so, and holds it for argv[2] seconds.
pub const HOLD_GPU_MEMORY: &str = "import sys, time, torch\n\
x = torch.empty(int(sys.argv[1]) << 30, dtype=torch.uint8, device='cuda')\n\
torch.cuda.synchronize()\n\
print('holding', flush=True)\n\
time.sleep(float(sys.argv[2]))\n";

/// Prints one JSON line (the MPS active-thread percentage from its environment, the SM count
/// CUDA reports to it, its pid), then keeps the GPU busy with bf16 matrix products for argv[1]
/// seconds, each step synchronized, and prints how many steps it ran.
pub const BUSY_ON_GPU: &str = "import json, os, sys, time, torch
x = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
torch.cuda.synchronize()
print(json.dumps({'pid': os.getpid(), 'percentage': os.environ.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'), 'sms': torch.cuda.get_device_properties(0).multi_processor_count}), flush=True)
end = time.monotonic() + float(sys.argv[1])
steps = 0
while time.monotonic() < end:
    y = x @ x
    torch.cuda.synchronize()
    steps += 1
print(json.dumps({'steps': steps}), flush=True)
";

/// The total memory of GPU 0 in MiB, where PyTorch can use an NVIDIA GPU of at least
/// `min_gib` GiB; otherwise why not, in one line.
pub fn gpu_with_torch(min_gib: u64) -> Result<u64, String> {
    let probe = format!(
        "import torch; assert torch.cuda.is_available(), 'no CUDA device'; \
         total = torch.cuda.get_device_properties(0).total_memory; \
         assert total >= {min_gib} << 30, 'the GPU has less than the {min_gib} GiB this test needs'; \
         print(total >> 20)"
    );
    match Command::new("python3").args(["-c", &probe]).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|e| format!("PyTorch's memory total does not parse: {e}")),
        Ok(out) => Err(format!(
            "no GPU with PyTorch: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        )),
        Err(err) => Err(format!("no GPU with PyTorch: python3: {err}")),
    }
}

/// For a privileged test that needs PyTorch on an NVIDIA GPU of `min_gib` GiB or more: GPU 0's
/// total memory in MiB, or None (the reason printed) when the test must skip.
pub fn gpu_test(test: &str, min_gib: u64) -> Option<u64> {
    if !crate::harness::privileged(test) {
        return None;
    }
    match gpu_with_torch(min_gib) {
        Ok(total_mib) => Some(total_mib),
        Err(reason) => {
            eprintln!("SKIPPED {test}: {reason}");
            None
        }
    }
}

/// Waits for the process's "holding" line: its memory is allocated.
pub fn wait_holding(child: &mut Child, what: &str) {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read the holder's line");
    assert_eq!(
        line.trim(),
        "holding",
        "{what} did not allocate its GPU memory"
    );
}

/// `program` on the PATH.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// An MPS control daemon on the pipe directory `dir/pipe` (its log in `dir/log`), quit when
/// dropped.
pub struct Mps {
    pub control: PathBuf,
    dir: PathBuf,
}

impl Mps {
    /// A handle on the daemon that someone else (the enforcer, with `mps = "start"`) starts
    /// on `dir`'s pipe directory: it makes the directories and quits that daemon when
    /// dropped.
    pub fn to_be_started_in(dir: &Path) -> anyhow::Result<Self> {
        let control =
            which(MPS_CONTROL).with_context(|| format!("{MPS_CONTROL} is not on the PATH"))?;
        for sub in ["pipe", "log"] {
            std::fs::create_dir_all(dir.join(sub))
                .with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        // The enforcer talks through no pipe directory that other users may write, whatever
        // the umask of the test run.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.join("pipe"), std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("chmod 755 {}", dir.join("pipe").display()))?;
        Ok(Self {
            control,
            dir: dir.to_owned(),
        })
    }

    /// Starts a control daemon of its own on `dir` and waits until it answers.
    pub fn start_in(dir: &Path) -> anyhow::Result<Self> {
        let _ = std::fs::remove_dir_all(dir);
        let mps = Self::to_be_started_in(dir)?;
        let status = Command::new(&mps.control)
            .arg("-d")
            .envs(mps.env())
            .status()
            .with_context(|| format!("running {} -d", mps.control.display()))?;
        if !status.success() {
            bail!("{} -d failed ({status})", mps.control.display());
        }
        // The daemon answers once its pipe is up.
        let mut answer = Err(anyhow::anyhow!("no answer"));
        for _ in 0..50 {
            answer = mps.ask("get_default_active_thread_percentage");
            if answer.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        answer.context("the MPS control daemon started but does not answer")?;
        Ok(mps)
    }

    pub fn pipe_dir(&self) -> PathBuf {
        self.dir.join("pipe")
    }

    /// What a client of this daemon, or its control program, needs in its environment.
    pub fn env(&self) -> [(&'static str, PathBuf); 2] {
        [
            ("CUDA_MPS_PIPE_DIRECTORY", self.pipe_dir()),
            ("CUDA_MPS_LOG_DIRECTORY", self.dir.join("log")),
        ]
    }

    /// One control command; its answer, trimmed (an error where there is none).
    pub fn ask(&self, command: &str) -> anyhow::Result<String> {
        let mut child = Command::new(&self.control)
            .envs(self.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(format!("{command}\n").as_bytes())?;
        let output = child.wait_with_output()?;
        let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if !output.status.success() || text.is_empty() {
            bail!(
                "{command}: {} {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(text)
    }

    /// The pids of the clients of every MPS server of this daemon.
    pub fn clients(&self) -> Vec<u32> {
        let pids = |answer: anyhow::Result<String>| -> Vec<u32> {
            answer
                .map(|text| {
                    text.split_whitespace()
                        .filter_map(|word| word.parse().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        pids(self.ask("get_server_list"))
            .into_iter()
            .flat_map(|server| pids(self.ask(&format!("get_client_list {server}"))))
            .collect()
    }
}

impl Drop for Mps {
    fn drop(&mut self) {
        let _ = self.ask("quit");
    }
}
