//! Kubernetes: the pods of this node that reamer manages, found by their labels, and their
//! containers' cgroups, found where the kubelet puts them.
//!
//! - `api_watch`: the node's pods from the API server (list, watch, bookmarks, relist);
//! - `pod`: what the enforcer reads of a Pod object of the API;
//! - `classify`: which pods are training, which belong to an inference pool;
//! - `pod_cgroup`: where the kubelet puts a pod's and its containers' groups, for either
//!   cgroup driver and any container runtime;
//! - `container_watch`: containers created after their pod, seen the moment their group
//!   appears (inotify on the pod's group), not at the API's next event.
//!
//! - `cpu_manager`: the pods the kubelet's CPU manager gave exclusive CPUs, left alone;
//! - `node_groups`: all of the above as the changes the daemon consumes (`daemon::pods`).
//!
//! `enforcer pods` shows what these make of a node's pods.

pub mod api_watch;
pub(crate) mod classify;
pub mod container_watch;
pub(crate) mod cpu_manager;
pub(crate) mod node_groups;
pub mod pod;
pub mod pod_cgroup;
