//! Kubernetes: the pods of this node that reamer manages, found by their labels, and their
//! containers' cgroups, found where the kubelet puts them.
//!
//! - `pod`: what the enforcer reads of a Pod object of the API;
//! - `classify`: which pods are training, which belong to an inference pool;
//! - `pod_cgroup`: where the kubelet puts a pod's and its containers' groups, for either
//!   cgroup driver and any container runtime;
//! - `container_watch`: containers created after their pod, seen the moment their group
//!   appears (inotify on the pod's group), not at the API's next event.
//!
//! The watch on the API server and the enforcement on these groups are not built yet
//! (docs/kubernetes.md says what is).

pub mod classify;
pub mod container_watch;
pub mod pod;
pub mod pod_cgroup;
