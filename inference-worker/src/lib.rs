//! reamer's CPU inference worker: tract-onnx or ONNX Runtime behind a KServe v2 HTTP endpoint
//! (online mode) or over a checkpointed batch job (offline mode), on exactly the cores the
//! enforcer grants.
//!
//! The model is loaded once and shared; every worker thread owns its own run state (tract's
//! plans' states, or an ONNX Runtime session), one thread per granted core; inference never
//! runs on the async runtime's threads.

pub mod affinity;
pub mod bench;
pub mod drain;
pub mod engine;
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
pub mod ort_library;
mod ort_model;
pub mod profile;
pub mod queue;
pub mod reload;
pub mod session;
pub mod socket_activation;
pub mod tiny_model;
pub mod tract_model;
