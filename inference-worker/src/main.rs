//! reamer's CPU inference worker (tract-onnx): not built yet.
//!
//! Its online (KServe v2 over HTTP) and offline (checkpointed batch jobs) modes, and the core
//! grants it follows, are issue 4. Until then the binary says so instead of pretending.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!(
        "inference-worker: not implemented yet. Online (KServe v2) and offline (batch job) \
         inference on tract-onnx are planned; the training sensor and `enforcer` work today."
    );
    ExitCode::from(2)
}
