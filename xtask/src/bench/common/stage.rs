//! The inference side of a scenario benchmark's run (co-location, server): its inputs, the
//! run's own online worker serving the PP-OCR classifier from the first window to the last,
//! and the groups `reamer/<instance>/{online,offline,online-standby}` every window starts
//! from. A window adds what its scenario compares: limits on the groups, a daemon, the
//! enforcer's own online worker, offline inference.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
};

use reamer_tests::harness::{
    Daemon, Reaped,
    cgroups::{self, Group},
    worker::OnlineWorker,
};

use super::inference::{
    Inputs, classifier_serve_args, launch_online_worker, reset_inference_groups,
    spawn_classifier_load, spawn_offline_worker, worker_bin,
};

/// The group the run's online worker waits in while the enforcer's own serves (reamer).
const STANDBY: &str = "online-standby";

/// How the online requests carry their image.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RequestBody {
    /// KServe's binary tensor data: what the scenarios send.
    Binary,
    /// JSON numbers: measured at the start of the co-location run, for what binary saves.
    Json,
}

pub(crate) struct Stage {
    pub(crate) inputs: Inputs,
    /// The run's online worker, on the inputs' engine.
    pub(crate) online: OnlineWorker,
    pub(crate) online_group: Group,
    pub(crate) offline_group: Group,
    standby_group: Group,
    instance: &'static str,
    slo_ms: f64,
    /// Where the workers' logs go.
    logs: PathBuf,
}

impl Stage {
    /// Starts the run's online worker (the classifier under `slo_ms`, its log in `logs`) and
    /// makes the groups of `instance`, each empty but for it in the online one.
    pub(crate) fn start(
        instance: &'static str,
        logs: &Path,
        inputs: Inputs,
        slo_ms: f64,
    ) -> anyhow::Result<Self> {
        let args = classifier_serve_args(&inputs.classifier, slo_ms, inputs.engine)?;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let online = OnlineWorker::start_with(
            Command::new(worker_bin()),
            &args,
            logs.join("online-worker.log"),
        );
        let standby_group = Group::ensure(instance, STANDBY)?;
        standby_group.reset()?;
        let (online_group, offline_group) = reset_inference_groups(instance, online.child.id())?;
        Ok(Self {
            inputs,
            online,
            online_group,
            offline_group,
            standby_group,
            instance,
            slo_ms,
            logs: logs.to_owned(),
        })
    }

    /// The online and offline groups back to no control, the run's online worker back in
    /// the first: every window starts so.
    pub(crate) fn reset_groups(&mut self) -> anyhow::Result<()> {
        (self.online_group, self.offline_group) =
            reset_inference_groups(self.instance, self.online.child.id())?;
        Ok(())
    }

    /// The run's online worker out of the online group into the standby one, where the
    /// daemon's sensor sees nothing of it (training alone under a daemon).
    pub(crate) fn stand_by(&self) -> anyhow::Result<()> {
        Ok(self.standby_group.add_process(self.online.child.id())?)
    }

    /// The offline worker on `engine`: through the daemon's launcher into its offline pool,
    /// or directly into the offline group.
    pub(crate) fn spawn_offline(
        &self,
        daemon: Option<&Daemon>,
        engine: &str,
    ) -> anyhow::Result<Reaped> {
        spawn_offline_worker(
            &self.inputs.offline_args(engine),
            daemon,
            &self.offline_group,
            &self.offline_log(),
        )
    }

    /// The stderr of the offline worker started without the daemon, the last one.
    pub(crate) fn offline_log(&self) -> PathBuf {
        self.logs.join("offline-worker.log")
    }

    /// The online worker of a reamer window, on `engine`: started by the daemon into its
    /// online pool, after the run's worker has moved to the standby group (the enforcer would
    /// otherwise adopt it too).
    pub(crate) fn launch_online(&self, engine: &str) -> anyhow::Result<OnlineWorker> {
        launch_online_worker(
            self.instance,
            &self.standby_group,
            self.online.child.id(),
            &classifier_serve_args(&self.inputs.classifier, self.slo_ms, engine)?,
            self.logs.join("online-worker-launched.log"),
        )
    }

    /// `load-gen` against the online worker at `base`: `rate` requests a second for
    /// `seconds`, seeded by `seed`, each carrying its image as `body`.
    pub(crate) fn load(
        &self,
        body: RequestBody,
        base: &str,
        rate: f64,
        seconds: f64,
        seed: &str,
    ) -> anyhow::Result<Child> {
        let body: (&Path, Option<usize>) = match body {
            RequestBody::Binary => (
                &self.inputs.request,
                Some(self.inputs.request_header_length),
            ),
            RequestBody::Json => (&self.inputs.request_json, None),
        };
        spawn_classifier_load(base, body, rate, self.slo_ms, seconds, seed)
    }

    /// Stops the run's online worker and removes the groups, and `more` of the instance's.
    pub(crate) fn stop(self, more: &[&str]) {
        let _ = self.online.stop();
        let mut groups = vec!["online", "offline", STANDBY];
        groups.extend(more);
        cgroups::remove_groups(self.instance, &groups);
    }
}
