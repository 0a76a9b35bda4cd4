//! The online HTTP endpoint: KServe v2 routes (health, metadata, infer) and /metrics.
//!
//! Memory stays bounded under any load: at most `max_bodies` request bodies are read at once
//! (each at most `body_limit` bytes), and the queue holds at most its capacity in items;
//! beyond either the answer is 429 at once.

use std::{sync::Arc, time::Instant};

use axum::{
    Json, Router,
    extract::{Path, Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::{
    executor::Executor,
    kserve,
    metrics::{Gauges, Metrics},
    queue::{Job, Rejected},
};

pub struct AppState {
    pub executor: Arc<Executor>,
    pub metrics: Arc<Metrics>,
    pub body_limit: usize,
    /// How long a body may take to arrive before its slot is given back (408).
    pub body_timeout: std::time::Duration,
    pub bodies: Semaphore,
}

type Shared = Arc<AppState>;

pub fn router(state: Shared) -> Router {
    Router::new()
        .route(
            "/v2/health/live",
            get(|| async { Json(json!({"live": true})) }),
        )
        .route("/v2/health/ready", get(server_ready))
        .route("/v2", get(server_metadata))
        .route("/v2/models/{name}", get(model_metadata))
        .route(
            "/v2/models/{name}/versions/{version}",
            get(model_metadata_version),
        )
        .route("/v2/models/{name}/ready", get(model_ready))
        .route("/v2/models/{name}/infer", post(infer))
        .route(
            "/v2/models/{name}/versions/{version}/infer",
            post(infer_version),
        )
        .route("/metrics", get(metrics))
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "no such route; see /v2 for the KServe v2 routes".into(),
            )
        })
        .with_state(state)
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(json!({"error": message}))).into_response()
}

/// A 404 answer unless `name` (and `version`, when given) is what this worker serves.
fn wrong_model(state: &AppState, name: &str, version: Option<&str>) -> Option<Response> {
    let model = state.executor.model();
    if name != model.name {
        return Some(error(
            StatusCode::NOT_FOUND,
            format!(
                "unknown model '{name}'; this worker serves '{}'",
                model.name
            ),
        ));
    }
    if let Some(version) = version
        && version != model.version.to_string()
    {
        return Some(error(
            StatusCode::NOT_FOUND,
            format!(
                "model '{name}' version '{version}' is not served; the current version is '{}'",
                model.version
            ),
        ));
    }
    None
}

async fn server_ready(State(state): State<Shared>) -> Response {
    if state.executor.threads() > 0 {
        Json(json!({"ready": true})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"ready": false})),
        )
            .into_response()
    }
}

async fn server_metadata() -> Response {
    Json(json!({
        "name": "reamer-inference-worker",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": [kserve::BINARY_EXTENSION],
    }))
    .into_response()
}

async fn model_metadata(State(state): State<Shared>, Path(name): Path<String>) -> Response {
    if let Some(response) = wrong_model(&state, &name, None) {
        return response;
    }
    let model = state.executor.model();
    Json(kserve::model_metadata(
        &model.name,
        model.version,
        model.engine().platform(),
        &model.signature,
    ))
    .into_response()
}

async fn model_metadata_version(
    State(state): State<Shared>,
    Path((name, version)): Path<(String, String)>,
) -> Response {
    if let Some(response) = wrong_model(&state, &name, Some(&version)) {
        return response;
    }
    model_metadata(State(state), Path(name)).await
}

async fn model_ready(State(state): State<Shared>, Path(name): Path<String>) -> Response {
    if let Some(response) = wrong_model(&state, &name, None) {
        return response;
    }
    server_ready(State(state)).await
}

async fn infer(
    State(state): State<Shared>,
    Path(name): Path<String>,
    request: Request,
) -> Response {
    run_infer(state, name, None, request).await
}

async fn infer_version(
    State(state): State<Shared>,
    Path((name, version)): Path<(String, String)>,
    request: Request,
) -> Response {
    run_infer(state, name, Some(version), request).await
}

/// The request's `Inference-Header-Content-Length` (binary tensor data), as text; an error
/// answer when it is not text.
fn header_length(headers: &HeaderMap) -> Result<Option<&str>, kserve::BadRequest> {
    headers
        .get(kserve::HEADER_LENGTH)
        .map(|v| v.to_str().map_err(|_| kserve::BadRequest::HeaderNotText))
        .transpose()
}

async fn run_infer(
    state: Shared,
    name: String,
    version: Option<String>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let started = Instant::now();
    let metrics = &state.metrics;
    let bad = |status: StatusCode, message: String| {
        metrics
            .bad_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        error(status, message)
    };
    if let Some(response) = wrong_model(&state, &name, version.as_deref()) {
        metrics
            .bad_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return response;
    }
    let Ok(reading) = state.bodies.try_acquire() else {
        metrics
            .arrived_items
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut response = overloaded(metrics, "too many requests are being read at once".into());
        // The body stays unread, so the server closes the connection after this answer. Saying
        // so keeps a client that pools connections from sending its next request into the
        // closed socket (seen as "Peer disconnected" from ureq under a flood).
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    };
    let read = tokio::time::timeout(
        state.body_timeout,
        axum::body::to_bytes(body, state.body_limit),
    )
    .await;
    let bytes = match read {
        Ok(Ok(bytes)) => bytes,
        // A slow or silent client: its slot goes back, and the connection, whose rest of the
        // body would be read as the next request, closes.
        Err(_) => {
            let mut response = bad(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} ms (--body-timeout-ms)",
                    state.body_timeout.as_millis()
                ),
            );
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
        Ok(Err(err)) => {
            return bad(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "request body over the {} byte limit (or unreadable: {err})",
                    state.body_limit
                ),
            );
        }
    };
    let model = state.executor.model();
    let parsed = header_length(&parts.headers)
        .and_then(|length| kserve::parse_infer(&bytes, length, &model.signature));
    let mut request = match parsed {
        Ok(request) => request,
        Err(wrong) => return bad(StatusCode::BAD_REQUEST, wrong.to_string()),
    };
    drop(bytes);
    // The body is read and parsed: its slot goes to the next request. Held until the answer,
    // slots ran out under a backlog and turned requests away before their items were counted,
    // so the worker saw about half the rate offered and sized its pool for that. The queue's
    // own bound (429 beyond) keeps the parsed inputs in check.
    drop(reading);
    metrics
        .arrived_items
        .fetch_add(request.items as u64, std::sync::atomic::Ordering::Relaxed);
    let (reply, answer) = tokio::sync::oneshot::channel();
    let job = Job {
        input: std::mem::take(&mut request.input),
        items: request.items,
        enqueued: Instant::now(),
        reply,
    };
    match state.executor.queue().push(job) {
        Ok(()) => {}
        Err(Rejected::Full { capacity }) => {
            return overloaded(
                metrics,
                format!("the queue is full ({capacity} items waiting)"),
            );
        }
        Err(Rejected::Closed) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the worker is shutting down".into(),
            );
        }
    }
    match answer.await {
        Ok(Ok((version, items))) => {
            // The answer comes from the model version that ran it, which a reload may have
            // replaced since; its signature is the same (reloads that change it are refused).
            let answer =
                kserve::infer_response(&model.name, version, &model.signature, &request, &items);
            metrics.record_ok(started.elapsed());
            answer_response(answer)
        }
        Ok(Err(failed)) => {
            metrics
                .failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            error(StatusCode::INTERNAL_SERVER_ERROR, failed.to_string())
        }
        Err(_) => {
            metrics
                .failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the inference thread went away".into(),
            )
        }
    }
}

/// The HTTP answer for an infer response: JSON, or with binary outputs the JSON header and
/// the bytes after it, as KServe's binary tensor data extension sends them.
fn answer_response(answer: kserve::InferResponse) -> Response {
    let (body, header_length) = answer.into_body();
    let mut response = body.into_response();
    let headers = response.headers_mut();
    match header_length {
        None => {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        Some(length) => {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            headers.insert(kserve::HEADER_LENGTH, HeaderValue::from(length));
        }
    }
    response
}

fn overloaded(metrics: &Metrics, message: String) -> Response {
    metrics
        .rejected
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut response = error(StatusCode::TOO_MANY_REQUESTS, message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

async fn metrics(State(state): State<Shared>) -> Response {
    let config = state.executor.config();
    let gauges = Gauges {
        queue_items: state.executor.queue().depth(),
        threads: state.executor.threads(),
        cpus: config.cpus.len(),
        max_batch: config.max_batch,
        batch_delay: config.batch_delay,
        model_version: state.executor.model().version,
    };
    (
        [(
            header::CONTENT_TYPE,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )],
        state.metrics.render(&gauges),
    )
        .into_response()
}
