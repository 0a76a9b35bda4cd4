//! An API server stand-in on loopback, speaking the real protocol of `GET /api/v1/pods`: a
//! list (a PodList with its resourceVersion, in pages where the client asks for `limit`, with
//! `continue` tokens), and with `watch=true` a stream of watch events as JSON lines (chunked),
//! fed by the caller: ADDED, MODIFIED, DELETED, BOOKMARK, and an ERROR 410 Gone that forces a
//! fresh list. Pods are objects of the real schema (`api_pod`). It can be taken down: open
//! watches end and new connections are dropped, as a node sees an API server that went away.
//!
//! No cluster can run here; this is the API server's side of the protocol, nothing more. Plain
//! threads, so that the Kubernetes tests (on tokio) and the soak (on none) share it.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    sync::{Arc, Mutex, mpsc},
    time::Duration,
};

use serde_json::{Value, json};

#[derive(Default)]
pub struct ApiServer {
    pub pods: Vec<Value>,
    pub resource_version: u64,
    /// The query of every list and watch served, in order.
    pub lists: Vec<String>,
    pub watches: Vec<String>,
    /// The open watch's stream: each line sent is one event. Dropping it ends the watch.
    pub watch: Option<mpsc::Sender<String>>,
    /// Taken down: no connection is served, and the open watch has ended.
    pub down: bool,
}

pub type Shared = Arc<Mutex<ApiServer>>;

impl ApiServer {
    /// Sends one event line on the open watch; false where none is open.
    pub fn send(&mut self, line: String) -> bool {
        let sent = self.watch.as_ref().is_some_and(|w| w.send(line).is_ok());
        if !sent {
            self.watch = None;
        }
        sent
    }

    /// A pod added, or changed (same UID): stored with the next resourceVersion, and sent on
    /// the open watch.
    pub fn put(&mut self, mut pod: Value) {
        self.resource_version += 1;
        pod["metadata"]["resourceVersion"] = json!(self.resource_version.to_string());
        let uid = pod["metadata"]["uid"].clone();
        let kind = match self.pods.iter_mut().find(|p| p["metadata"]["uid"] == uid) {
            Some(stored) => {
                *stored = pod.clone();
                "MODIFIED"
            }
            None => {
                self.pods.push(pod.clone());
                "ADDED"
            }
        };
        self.send(json!({"type": kind, "object": pod}).to_string());
    }

    /// The pod of `uid` deleted, and said on the open watch.
    pub fn delete(&mut self, uid: &str) {
        let Some(index) = self.pods.iter().position(|p| p["metadata"]["uid"] == uid) else {
            return;
        };
        let mut pod = self.pods.remove(index);
        self.resource_version += 1;
        pod["metadata"]["resourceVersion"] = json!(self.resource_version.to_string());
        self.send(json!({"type": "DELETED", "object": pod}).to_string());
    }

    /// Down (the open watch ends, connections are dropped) or up again.
    pub fn set_down(&mut self, down: bool) {
        self.down = down;
        if down {
            self.watch = None;
        }
    }
}

/// Serves `server` on a loopback port until the process ends; returns its URL.
pub fn start(server: Shared) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding the API server stand-in");
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let server = server.clone();
            std::thread::spawn(move || serve(stream, &server));
        }
    });
    url
}

/// A kubeconfig that points kube's clients at `url`, with no credentials.
pub fn kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: {url}\n\
         contexts:\n- name: stand-in\n  context:\n    cluster: stand-in\n    user: nobody\n\
         current-context: stand-in\nusers:\n- name: nobody\n  user: {{}}\n"
    )
}

/// Serves one connection: lists, each answered whole (keep-alive), or one watch.
fn serve(stream: TcpStream, server: &Shared) {
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let Some(target) = read_request(&mut reader) else {
            return;
        };
        let query = target.split_once('?').map_or("", |(_, q)| q).to_owned();
        let mut state = server.lock().unwrap();
        if state.down {
            return;
        }
        if !target.starts_with("/api/v1/pods") {
            drop(state);
            let _ = writer.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            continue;
        }
        if query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1")
        {
            state.watches.push(query);
            let (send, events) = mpsc::channel();
            state.watch = Some(send);
            drop(state);
            stream_watch(writer, events);
            return;
        }
        let body = list(&mut state, &query);
        drop(state);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(body.as_bytes()).is_err()
        {
            return;
        }
    }
}

/// Reads one request's head (and discards its body); its target, or None at the end.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let target = line.split_whitespace().nth(1)?.to_owned();
    let mut length = 0;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(target)
}

/// A page of the list, as the API server serves `limit` and `continue` (the real token is
/// opaque; a client only hands it back).
fn list(state: &mut ApiServer, query: &str) -> String {
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse::<usize>().ok())
    };
    let start = param("continue").unwrap_or(0).min(state.pods.len());
    let end = param("limit").map_or(state.pods.len(), |limit| {
        (start + limit.max(1)).min(state.pods.len())
    });
    let mut metadata = json!({"resourceVersion": state.resource_version.to_string()});
    if end < state.pods.len() {
        metadata["continue"] = json!(end.to_string());
    }
    state.lists.push(query.to_owned());
    json!({
        "apiVersion": "v1", "kind": "PodList",
        "metadata": metadata,
        "items": state.pods[start..end],
    })
    .to_string()
}

/// Writes each event line as a chunk until the sender is dropped or the client goes.
fn stream_watch(mut writer: TcpStream, events: mpsc::Receiver<String>) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: chunked\r\n\r\n";
    if writer.write_all(head.as_bytes()).is_err() {
        return;
    }
    loop {
        match events.recv_timeout(Duration::from_secs(1)) {
            Ok(line) => {
                let chunk = format!("{line}\n");
                let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
                if writer.write_all(framed.as_bytes()).is_err() {
                    return;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let _ = writer.write_all(b"0\r\n\r\n");
                let _ = writer.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
    }
}

/// A running pod of node-1 in namespace `ml`, owned by Job `<name>-job`, with `labels` and
/// QoS class `qos`, and one container `main` whose status names `container_id`
/// ("containerd://<id>"), or none yet (the runtime still making it).
pub fn api_pod(
    uid: &str,
    name: &str,
    labels: Value,
    qos: &str,
    container_id: Option<&str>,
) -> Value {
    let statuses = match container_id {
        Some(id) => json!([{"name": "main", "ready": true, "restartCount": 0, "image": "x",
                            "imageID": "", "containerID": id}]),
        None => json!([]),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": uid, "labels": labels,
                     "resourceVersion": "1",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": format!("{name}-job"), "uid": "0",
                                          "controller": true}]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": "Running", "qosClass": qos, "containerStatuses": statuses}
    })
}
