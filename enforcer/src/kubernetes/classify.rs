//! Which pods reamer manages, and as what: a training job's, or a member of an inference pool
//! of the config, read from the pod's labels (or annotations of the same keys).
//!
//! - `reamer.io/role: training | online | offline`;
//! - `reamer.io/pool: NAME` for inference: a pool of the config, whose kind must match the
//!   role (the pool keeps its `min_cores`, `slo_ms`, `gpu` and weights); without it, the one
//!   pool of that kind, where the config has exactly one;
//! - `reamer.io/job: NAME` for training; without it the pod's controlling owner (a Job, a
//!   PyTorchJob, a ReplicaSet), else the pod itself. Job names are `namespace/name`.
//!
//! Selectors in the config map labels other agents already put on pods, so that pods marked
//! for Koordinator (`koordinator.sh/qosClass: BE`) or Katalyst
//! (`katalyst.kubewharf.io/qos_level: reclaimed_cores`) need no relabelling. `reamer.io/role`
//! wins over every selector; among selectors, the first that matches.
//!
//! A role is believed only from the namespaces the config trusts with it
//! (`[kubernetes.claims]`, `Claims`): any pod that may say `training` can keep every tenant's
//! offline pods paused for as long as it keeps busy, and one that may say `online` holds its
//! pool's guaranteed cores.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::pod::Pod;

pub(crate) const ROLE_KEY: &str = "reamer.io/role";
pub(crate) const POOL_KEY: &str = "reamer.io/pool";
pub(crate) const JOB_KEY: &str = "reamer.io/job";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoleName {
    Training,
    Online,
    Offline,
}

impl RoleName {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "training" => Some(Self::Training),
            "online" => Some(Self::Online),
            "offline" => Some(Self::Offline),
            _ => None,
        }
    }
}

/// `[[kubernetes.selector]]`: pods whose label `label` is `value` take `role` (and `pool`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    pub label: String,
    pub value: String,
    pub role: RoleName,
    #[serde(default)]
    pub pool: Option<String>,
}

/// `[kubernetes.claims]`: the namespaces whose pods may claim each role. `"*"` is any
/// namespace; an empty list, none. By default any namespace may claim any role, as before
/// this existed; a cluster shared with tenants should list its training namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Claims {
    pub training: Vec<String>,
    pub online: Vec<String>,
    pub offline: Vec<String>,
}

impl Default for Claims {
    fn default() -> Self {
        let any = || vec!["*".to_owned()];
        Self {
            training: any(),
            online: any(),
            offline: any(),
        }
    }
}

impl Claims {
    /// The namespaces that may claim `role`.
    pub fn of(&self, role: RoleName) -> &[String] {
        match role {
            RoleName::Training => &self.training,
            RoleName::Online => &self.online,
            RoleName::Offline => &self.offline,
        }
    }

    fn allows(&self, role: RoleName, namespace: &str) -> bool {
        self.of(role).iter().any(|n| n == "*" || n == namespace)
    }

    /// Checks each entry: `*`, or a namespace name (a DNS label: 1-63 lowercase letters,
    /// digits or '-', starting and ending with a letter or digit).
    pub fn validate(&self) -> Result<(), String> {
        for role in [RoleName::Training, RoleName::Online, RoleName::Offline] {
            for entry in self.of(role) {
                let label = !entry.is_empty()
                    && entry.len() <= 63
                    && entry
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !entry.starts_with('-')
                    && !entry.ends_with('-');
                if entry != "*" && !label {
                    return Err(format!(
                        "{} entry {entry:?} is neither \"*\" nor a namespace name",
                        kind_name(role)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What a managed pod is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Role {
    Training { job: String },
    Pool { pool: String, kind: RoleName },
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ClassifyError {
    #[error("pod {pod}: {ROLE_KEY} {value:?} is not training, online or offline")]
    UnknownRole { pod: String, value: String },
    #[error("pod {pod}: pool {pool:?} is not a pool of the config (pools: {known})")]
    UnknownPool {
        pod: String,
        pool: String,
        known: String,
    },
    #[error("pod {pod}: pool {pool:?} is {actual}, not {wanted}")]
    KindMismatch {
        pod: String,
        pool: String,
        actual: &'static str,
        wanted: &'static str,
    },
    #[error("pod {pod}: no {POOL_KEY} label, and the config has {count} {kind} pools: name one")]
    NoPool {
        pod: String,
        kind: &'static str,
        count: usize,
    },
    #[error(
        "pod {pod}: namespace {namespace:?} may not claim {role} ([kubernetes.claims] {role} = \
         {allowed:?})"
    )]
    NotTrusted {
        pod: String,
        namespace: String,
        role: &'static str,
        allowed: Vec<String>,
    },
}

fn kind_name(kind: RoleName) -> &'static str {
    match kind {
        RoleName::Training => "training",
        RoleName::Online => "online",
        RoleName::Offline => "offline",
    }
}

/// The config's pools (name → kind), selectors and claims.
pub(crate) struct Classifier {
    pools: BTreeMap<String, RoleName>,
    selectors: Vec<Selector>,
    claims: Claims,
}

impl Classifier {
    /// Any namespace may claim any role until `with_claims`.
    pub(crate) fn new(pools: BTreeMap<String, RoleName>, selectors: Vec<Selector>) -> Self {
        Self {
            pools,
            selectors,
            claims: Claims::default(),
        }
    }

    /// The labels its selectors match: with reamer's own marks, all that is kept of a pod
    /// (`Pod::trimmed`).
    pub(crate) fn labels_read(&self) -> std::collections::BTreeSet<String> {
        self.selectors.iter().map(|s| s.label.clone()).collect()
    }

    /// Believes each role only from the namespaces `claims` gives it.
    pub(crate) fn with_claims(self, claims: Claims) -> Self {
        Self { claims, ..self }
    }

    /// The classifier of a config's pools, each named with whether it is online.
    pub(crate) fn of_pools(
        pools: impl IntoIterator<Item = (String, bool)>,
        selectors: Vec<Selector>,
    ) -> Self {
        let pools = pools
            .into_iter()
            .map(|(name, online)| {
                let kind = if online {
                    RoleName::Online
                } else {
                    RoleName::Offline
                };
                (name, kind)
            })
            .collect();
        Self::new(pools, selectors)
    }

    /// What `pod` is: Ok(None) where no label or selector marks it.
    pub(crate) fn classify(&self, pod: &Pod) -> Result<Option<Role>, ClassifyError> {
        let (role, selector_pool) = match pod.marked(ROLE_KEY) {
            Some(value) => {
                let role = RoleName::parse(value).ok_or_else(|| ClassifyError::UnknownRole {
                    pod: pod.key(),
                    value: value.to_owned(),
                })?;
                (role, None)
            }
            None => match self
                .selectors
                .iter()
                .find(|s| pod.metadata.labels.get(&s.label) == Some(&s.value))
            {
                Some(selector) => (selector.role, selector.pool.clone()),
                None => return Ok(None),
            },
        };
        let namespace = &pod.metadata.namespace;
        if !self.claims.allows(role, namespace) {
            return Err(ClassifyError::NotTrusted {
                pod: pod.key(),
                namespace: namespace.clone(),
                role: kind_name(role),
                allowed: self.claims.of(role).to_vec(),
            });
        }
        if role == RoleName::Training {
            let job = pod
                .marked(JOB_KEY)
                .map(str::to_owned)
                .or_else(|| pod.controller().map(|owner| owner.name.clone()))
                .unwrap_or_else(|| pod.metadata.name.clone());
            return Ok(Some(Role::Training {
                job: format!("{}/{job}", pod.metadata.namespace),
            }));
        }
        let pool = match pod.marked(POOL_KEY).map(str::to_owned).or(selector_pool) {
            Some(pool) => pool,
            None => {
                let of_kind: Vec<&String> = self
                    .pools
                    .iter()
                    .filter(|(_, kind)| **kind == role)
                    .map(|(name, _)| name)
                    .collect();
                match of_kind.as_slice() {
                    [only] => (*only).clone(),
                    _ => {
                        return Err(ClassifyError::NoPool {
                            pod: pod.key(),
                            kind: kind_name(role),
                            count: of_kind.len(),
                        });
                    }
                }
            }
        };
        match self.pools.get(&pool) {
            None => Err(ClassifyError::UnknownPool {
                pod: pod.key(),
                pool,
                known: self.pools.keys().cloned().collect::<Vec<_>>().join(", "),
            }),
            Some(kind) if *kind != role => Err(ClassifyError::KindMismatch {
                pod: pod.key(),
                pool,
                actual: kind_name(*kind),
                wanted: kind_name(role),
            }),
            Some(_) => Ok(Some(Role::Pool { pool, kind: role })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: &[(&str, &str)], annotations: &[(&str, &str)], owner: Option<&str>) -> Pod {
        let map = |pairs: &[(&str, &str)]| -> serde_json::Value {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        let owners: Vec<serde_json::Value> = owner
            .map(|name| {
                serde_json::json!({"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                   "uid": "1", "controller": true})
            })
            .into_iter()
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p-0", "namespace": "ml", "uid": "0a-1b",
                         "labels": map(labels), "annotations": map(annotations),
                         "ownerReferences": owners},
            "status": {"qosClass": "BestEffort"}
        }))
        .unwrap()
    }

    fn classifier(selectors: Vec<Selector>) -> Classifier {
        Classifier::new(
            [
                ("serve".to_owned(), RoleName::Online),
                ("batch".to_owned(), RoleName::Offline),
            ]
            .into_iter()
            .collect(),
            selectors,
        )
    }

    #[test]
    fn a_role_is_believed_only_from_the_namespaces_trusted_with_it() {
        let claims: Claims = toml::from_str("training = [\"research\"]\noffline = []").unwrap();
        assert_eq!(claims.online, ["*"], "what is not said stays open");
        let c = classifier(vec![Selector {
            label: "qos".to_owned(),
            value: "BE".to_owned(),
            role: RoleName::Offline,
            pool: None,
        }])
        .with_claims(claims);
        let err = c
            .classify(&pod(&[(ROLE_KEY, "training")], &[], None))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "pod ml/p-0: namespace \"ml\" may not claim training ([kubernetes.claims] \
             training = [\"research\"])"
        );
        assert!(
            matches!(
                c.classify(&pod(&[("qos", "BE")], &[], None)),
                Err(ClassifyError::NotTrusted { .. })
            ),
            "a selector's role is checked too"
        );
        assert!(c.classify(&pod(&[(ROLE_KEY, "online")], &[], None)).is_ok());
        assert_eq!(c.classify(&pod(&[("app", "web")], &[], None)), Ok(None));

        assert!(Claims::default().validate().is_ok());
        let bad: Claims = toml::from_str("training = [\"ML\"]").unwrap();
        assert!(bad.validate().unwrap_err().contains("\"ML\""));
    }

    #[test]
    fn training_jobs_are_named_by_label_then_owner_then_pod() {
        let c = classifier(Vec::new());
        let job = |p: &Pod| c.classify(p).unwrap();
        assert_eq!(
            job(&pod(
                &[(ROLE_KEY, "training"), (JOB_KEY, "resnet")],
                &[],
                Some("x")
            )),
            Some(Role::Training {
                job: "ml/resnet".to_owned()
            })
        );
        assert_eq!(
            job(&pod(&[(ROLE_KEY, "training")], &[], Some("resnet-job"))),
            Some(Role::Training {
                job: "ml/resnet-job".to_owned()
            })
        );
        assert_eq!(
            job(&pod(&[], &[(ROLE_KEY, "training")], None)),
            Some(Role::Training {
                job: "ml/p-0".to_owned()
            })
        );
        assert_eq!(job(&pod(&[("app", "web")], &[], None)), None);
    }

    #[test]
    fn inference_pods_join_the_named_pool_or_the_only_one_of_their_kind() {
        let c = classifier(Vec::new());
        assert_eq!(
            c.classify(&pod(&[(ROLE_KEY, "offline")], &[], None))
                .unwrap(),
            Some(Role::Pool {
                pool: "batch".to_owned(),
                kind: RoleName::Offline
            })
        );
        let err = c
            .classify(&pod(
                &[(ROLE_KEY, "online"), (POOL_KEY, "batch")],
                &[],
                None,
            ))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "pod ml/p-0: pool \"batch\" is offline, not online"
        );
        let err = c
            .classify(&pod(&[(ROLE_KEY, "online"), (POOL_KEY, "gone")], &[], None))
            .unwrap_err();
        assert!(err.to_string().contains("pools: batch, serve"), "{err}");
        let err = c
            .classify(&pod(&[(ROLE_KEY, "trainer")], &[], None))
            .unwrap_err();
        assert!(
            err.to_string().contains("\"trainer\" is not training"),
            "{err}"
        );
    }

    #[test]
    fn selectors_map_koordinator_and_katalyst_labels_and_reamers_own_label_wins() {
        let c = classifier(vec![
            Selector {
                label: "koordinator.sh/qosClass".to_owned(),
                value: "BE".to_owned(),
                role: RoleName::Offline,
                pool: None,
            },
            Selector {
                label: "katalyst.kubewharf.io/qos_level".to_owned(),
                value: "shared_cores".to_owned(),
                role: RoleName::Online,
                pool: Some("serve".to_owned()),
            },
        ]);
        assert_eq!(
            c.classify(&pod(&[("koordinator.sh/qosClass", "BE")], &[], None))
                .unwrap(),
            Some(Role::Pool {
                pool: "batch".to_owned(),
                kind: RoleName::Offline
            })
        );
        assert_eq!(
            c.classify(&pod(
                &[("katalyst.kubewharf.io/qos_level", "shared_cores")],
                &[],
                None
            ))
            .unwrap(),
            Some(Role::Pool {
                pool: "serve".to_owned(),
                kind: RoleName::Online
            })
        );
        assert_eq!(
            c.classify(&pod(
                &[("koordinator.sh/qosClass", "BE"), (ROLE_KEY, "training")],
                &[],
                None
            ))
            .unwrap(),
            Some(Role::Training {
                job: "ml/p-0".to_owned()
            })
        );
        assert_eq!(
            c.classify(&pod(&[("koordinator.sh/qosClass", "LS")], &[], None))
                .unwrap(),
            None
        );
    }
}
