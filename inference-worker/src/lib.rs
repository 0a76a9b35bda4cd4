//! reamer's CPU inference worker: tract-onnx behind a KServe v2 HTTP endpoint (online mode)
//! or over a checkpointed batch job (offline mode), on exactly the cores the enforcer grants.
//!
//! The model is optimized once per batch size and shared; every worker thread owns its own
//! run state; inference never runs on the async runtime's threads.

pub mod affinity;
pub mod bench;
pub mod drain;
pub mod executor;
pub mod grants;
pub mod http;
pub mod kserve;
pub mod latency_report;
pub mod metrics;
pub mod mlp_model;
pub mod model;
pub mod numbers;
pub mod offline;
pub mod online;
pub mod onnx_build;
pub mod profile;
pub mod queue;
pub mod reload;
pub mod session;
pub mod socket_activation;
pub mod tiny_model;
