//! Unit tests of `config`.

use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(Path::new("test.toml"), text)
}

/// The error `text` is refused with, as the user reads it.
fn error_of(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn empty_config_takes_defaults() {
    let config = parse("").unwrap();
    assert_eq!(config.sensor.wait_threshold_us, 2000);
    assert_eq!(config.sensor.event_min_interval_us, 100);
    assert!(config.training.is_empty() && config.pool.is_empty());
}

#[test]
fn full_config_parses() {
    let pid = std::process::id();
    // Not this process, which a pool may not take in (the enforcer itself, in `run`).
    let parent = std::os::unix::process::parent_id();
    let text = format!(
        "[sensor]\nwait_threshold_us = 500\n\n[[training]]\nname = \"resnet\"\npids = [{pid}]\n\n\
         [[pool]]\nname = \"ocr\"\nkind = \"offline\"\npids = [{parent}]\n"
    );
    let config = parse(&text).unwrap();
    assert_eq!(config.sensor.wait_threshold_us, 500);
    assert_eq!(config.training[0].name.get_ref(), "resnet");
    assert_eq!(config.pool[0].pool_kind(), PoolKindField::Offline);
    assert_eq!(*config.pool[0].pids[0].get_ref(), parent);
}

#[test]
fn sensor_clock_is_run_queue_unless_asked() {
    assert_eq!(parse("").unwrap().sensor.clock, SensorClock::RunQueue);
    let config = parse("[sensor]\nclock = \"monotonic\"\n").unwrap();
    assert_eq!(config.sensor.clock, SensorClock::Monotonic);
    let err = error_of("[sensor]\nclock = \"tsc\"\n");
    assert!(err.starts_with("test.toml:2: field `clock`"), "{err}");
    assert!(
        err.contains("run-queue") && err.contains("monotonic"),
        "{err}"
    );
}

#[test]
fn the_inference_thread_bound_is_checked() {
    assert_eq!(parse("").unwrap().sensor.max_inference_threads, 65536);
    let err = error_of("[sensor]\nclock = \"monotonic\"\nmax_inference_threads = 0\n");
    assert!(
        err.starts_with("test.toml:3: field `max_inference_threads`") && err.contains("1..="),
        "{err}"
    );
}

#[test]
fn wrong_type_names_file_line_and_field() {
    let err = error_of("[sensor]\n\nwait_threshold_us = \"fast\"\n");
    assert!(
        err.starts_with("test.toml:3: field `wait_threshold_us`"),
        "{err}"
    );
}

#[test]
fn unknown_field_is_named() {
    let err = error_of("[[training]]\nname = \"a\"\ncgruop = \"/x\"\n");
    assert!(
        err.contains("test.toml:3") && err.contains("cgruop"),
        "{err}"
    );
}

#[test]
fn missing_pid_is_named_with_its_line() {
    let err = error_of("[[training]]\nname = \"a\"\npids = [\n  4194305,\n]\n");
    assert!(
        err.starts_with("test.toml:4: field `pids`: no process with pid 4194305"),
        "{err}"
    );
}

#[test]
fn unknown_cgroup_is_named() {
    let err = error_of("[[training]]\nname = \"a\"\ncgroup = \"/nonexistent/cg\"\n");
    assert!(
        err.starts_with("test.toml:3: field `cgroup`") && err.contains("not a cgroup"),
        "{err}"
    );
}

#[test]
fn duplicate_and_bad_names_are_rejected() {
    let err = error_of("[[training]]\nname = \"a\"\n[[pool]]\nname = \"a\"\nkind = \"online\"\n");
    assert!(
        err.starts_with("test.toml:4: field `name`") && err.contains("twice"),
        "{err}"
    );
    let err = error_of("[[training]]\nname = \"a b\"\n");
    assert!(err.contains("field `name`"), "{err}");
    for dots in ["..", ".", ".hidden"] {
        let err = error_of(&format!(
            "[[pool]]\nname = \"{dots}\"\nkind = \"offline\"\n"
        ));
        assert!(
            err.starts_with("test.toml:2: field `name`") && err.contains("begin with '.'"),
            "{err}"
        );
    }
    assert!(parse("[[pool]]\nname = \"v1.2\"\nkind = \"offline\"\n").is_ok());
}

#[test]
fn a_headroom_that_is_not_a_number_of_cpus_is_refused() {
    for bad in ["nan", "inf", "-0.5"] {
        let err = error_of(&format!("[policy]\ntick_ms = 100\nheadroom_cpus = {bad}\n"));
        assert!(
            err.starts_with("test.toml:3: field `headroom_cpus`") && err.contains("finite"),
            "{bad}: {err}"
        );
    }
    assert!(parse("[policy]\nheadroom_cpus = 0\n").is_ok());
}

#[test]
fn policy_defaults_and_online_only_fields() {
    let config = parse("[[pool]]\nname = \"web\"\nkind = \"online\"\nslo_ms = 50\n").unwrap();
    assert!(config.policy.enforce);
    assert_eq!(config.policy.give_back_after_ms, 2000);
    assert!(!config.policy.offline_on_training_cores, "training first");
    assert!(
        config.policy.pause_offline_when_training_short,
        "training first"
    );
    assert_eq!(config.pool[0].min_cores(), 1);
    assert_eq!(config.settings().policy.training_cores_share, 0.0);
    let sharing = parse("[policy]\noffline_on_training_cores = true\n").unwrap();
    assert!(sharing.policy.offline_on_training_cores);
    assert_eq!(sharing.settings().policy.training_cores_share, 1.0);
    let quarter =
        "[policy]\noffline_on_training_cores = true\noffline_on_training_cores_share = 0.25\n";
    assert_eq!(
        parse(quarter)
            .unwrap()
            .settings()
            .policy
            .training_cores_share,
        0.25
    );
    // The share alone would share nothing: the option says whether, the share how much.
    let err = error_of("[policy]\noffline_on_training_cores_share = 0.5\n");
    assert!(
        err.contains("without offline_on_training_cores = true"),
        "{err}"
    );
    for bad in ["0", "1.5", "nan", "-0.25"] {
        let err = error_of(&format!(
            "[policy]\noffline_on_training_cores = true\noffline_on_training_cores_share = {bad}\n"
        ));
        assert!(
            err.starts_with("test.toml:3: field `offline_on_training_cores_share`")
                && err.contains("at most 1"),
            "{err}"
        );
    }
    let running = parse("[policy]\npause_offline_when_training_short = false\n").unwrap();
    assert!(!running.policy.pause_offline_when_training_short);
    let err = error_of("[policy]\npause_offline_when_training_short = 1\n");
    assert!(
        err.starts_with("test.toml:2: field `pause_offline_when_training_short`"),
        "{err}"
    );
    let harvest = parse("[policy]\nharvest_by_pace = true\npace_epsilon = 0.02\n").unwrap();
    assert_eq!(
        harvest.settings().policy.harvest.map(|h| h.epsilon),
        Some(0.02)
    );
    assert_eq!(parse("").unwrap().settings().policy.harvest, None);
    for bad in ["0", "0.7", "nan", "-0.01"] {
        let err = error_of(&format!("[policy]\npace_epsilon = {bad}\n"));
        assert!(
            err.starts_with("test.toml:2: field `pace_epsilon`") && err.contains("0.001"),
            "{err}"
        );
    }
    let err = error_of("[policy]\noffline_on_training_cores = \"yes\"\n");
    assert!(
        err.starts_with("test.toml:2: field `offline_on_training_cores`"),
        "{err}"
    );
    let err = error_of("[[pool]]\nname = \"b\"\nkind = \"offline\"\nmin_cores = 2\n");
    assert!(err.starts_with("test.toml:4: field `min_cores`"), "{err}");
    let err = error_of("[policy]\ngive_back_after_ms = -1\n");
    assert!(
        err.starts_with("test.toml:2: field `give_back_after_ms`"),
        "{err}"
    );
}

#[test]
fn a_config_for_another_machine_is_checked_against_its_cpus_not_this_ones_groups() {
    let text = "[[training]]\nname = \"t\"\ncgroup = \"/sys/fs/cgroup/not-here\"\n\n\
                [[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = 14\n";
    let path = Path::new("trace.toml");
    let there = Config::parse_for(path, text, Machine::Elsewhere { cpus: 16 }).unwrap();
    assert_eq!(there.pool[0].min_cores(), 14);
    let err = Config::parse_for(path, text, Machine::Elsewhere { cpus: 8 })
        .unwrap_err()
        .to_string();
    assert!(err.contains("the traced machine has 8 CPUs"), "{err}");
    assert!(
        Config::parse(path, text).is_err(),
        "checked here: no such cgroup"
    );
}

#[test]
fn a_pool_that_would_take_in_the_enforcer_itself_is_refused() {
    let me = std::process::id();
    let err = error_of(&format!(
        "[[pool]]\nname = \"b\"\nkind = \"offline\"\npids = [{me}]\n"
    ));
    assert!(
        err.starts_with("test.toml:4: field `pids`") && err.contains("enforcer itself"),
        "{err}"
    );
    // This process's own cgroup, in the cpu hierarchy (v1) or the unified one (v2).
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own = cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let root = match controllers {
            "" => "/sys/fs/cgroup".to_owned(),
            c if c.split(',').any(|c| c == "cpu") => format!("/sys/fs/cgroup/{c}"),
            _ => return None,
        };
        let dir = PathBuf::from(format!("{root}{path}"));
        dir.join("cgroup.procs").exists().then_some(dir)
    });
    if let Some(dir) = own {
        let text = format!(
            "[[pool]]\nname = \"b\"\nkind = \"offline\"\ncgroup = \"{}\"\n",
            dir.display()
        );
        let err = error_of(&text);
        assert!(
            err.starts_with("test.toml:4: field `cgroup`") && err.contains("enforcer itself"),
            "{err}"
        );
    }
}

#[test]
fn online_minimums_are_checked_against_this_machines_physical_cores() {
    let cores = Topology::detect().unwrap().cores.len();
    let text = format!("[[pool]]\nname = \"web\"\nkind = \"online\"\nmin_cores = {cores}\n");
    let err = error_of(&text);
    assert!(
        err.contains(&format!("this machine has {cores} physical cores")),
        "{err}"
    );
}

#[test]
fn the_old_demand_half_life_is_refused_with_its_replacement_named() {
    assert_eq!(Config::default().policy.demand_window_ms, 2000);
    let config = parse("[policy]\ndemand_window_ms = 3000\n").unwrap();
    assert_eq!(config.settings().policy.demand_window_ns, 3_000_000_000);
    let err = error_of("[policy]\ntick_ms = 50\ndemand_half_life_ms = 100\n");
    assert!(
        err.starts_with(
            "test.toml:3: field `demand_half_life_ms`: was replaced by `demand_window_ms`"
        ),
        "{err}"
    );
}

#[test]
fn cpu_weight_is_for_online_pools_within_the_kernels_range() {
    let online = "[[pool]]\nname = \"web\"\nkind = \"online\"\n";
    let config = parse(online).unwrap();
    assert_eq!(config.pool[0].cpu_weight(), DEFAULT_ONLINE_CPU_WEIGHT);
    let config = parse(&format!("{online}cpu_weight = 60\n")).unwrap();
    assert_eq!(config.pool[0].cpu_weight(), 60);
    for bad in ["0", "10001"] {
        let err = error_of(&format!("{online}cpu_weight = {bad}\n"));
        assert!(
            err.starts_with("test.toml:4: field `cpu_weight`") && err.contains("1 to 10000"),
            "{err}"
        );
    }
    let err = error_of("[[pool]]\nname = \"b\"\nkind = \"offline\"\ncpu_weight = 50\n");
    assert!(
        err.starts_with("test.toml:4: field `cpu_weight`") && err.contains("online pools only"),
        "{err}"
    );
}

#[test]
fn min_cpu_weight_defaults_to_a_tenth_of_training_and_stays_at_most_cpu_weight() {
    let online = "[[pool]]\nname = \"web\"\nkind = \"online\"\n";
    let pool = |extra: &str| parse(&format!("{online}{extra}")).unwrap().pool.remove(0);
    assert_eq!(pool("").min_cpu_weight(), DEFAULT_MIN_ONLINE_CPU_WEIGHT);
    assert_eq!(
        pool("cpu_weight = 5\n").min_cpu_weight(),
        5,
        "a lower cpu_weight is the floor"
    );
    assert_eq!(
        pool("cpu_weight = 60\nmin_cpu_weight = 60\n").min_cpu_weight(),
        60
    );
    let err = error_of(&format!("{online}cpu_weight = 40\nmin_cpu_weight = 41\n"));
    assert!(
        err.starts_with("test.toml:5: field `min_cpu_weight`") && err.contains("above"),
        "{err}"
    );
    let err = error_of(&format!("{online}min_cpu_weight = 0\n"));
    assert!(
        err.starts_with("test.toml:4: field `min_cpu_weight`") && err.contains("1 to 10000"),
        "{err}"
    );
    let err = error_of("[[pool]]\nname = \"b\"\nkind = \"offline\"\nmin_cpu_weight = 5\n");
    assert!(
        err.contains("field `min_cpu_weight`") && err.contains("online pools only"),
        "{err}"
    );
}

#[test]
fn metrics_address_is_checked() {
    assert_eq!(
        parse("").unwrap().metrics.address(),
        Some("127.0.0.1:9464".parse().unwrap())
    );
    assert_eq!(
        parse("[metrics]\nlisten = \"off\"\n")
            .unwrap()
            .metrics
            .address(),
        None
    );
    let err = error_of("[metrics]\nlisten = \"localhost\"\n");
    assert!(err.starts_with("test.toml:2: field `listen`"), "{err}");
}

#[test]
fn bad_pool_kind_is_named() {
    let err = error_of("[[pool]]\nname = \"p\"\nkind = \"batch\"\n");
    assert!(err.contains("test.toml:3") && err.contains("kind"), "{err}");
}

#[test]
fn gpu_section_takes_defaults_and_names_bad_values_by_line() {
    let config = parse("").unwrap();
    assert_eq!(config.gpu.enabled, gpu::GpuSwitch::Auto);
    assert_eq!(config.gpu.mps, gpu::MpsMode::Attach);
    let err = error_of("[gpu]\nmps = \"start\"\nclamp_run_fraction = 1.5\n");
    assert!(
        err.starts_with("test.toml:3: field `clamp_run_fraction`") && err.contains("1.5"),
        "{err}"
    );
    let err = error_of("[gpu]\nmps = \"sometimes\"\n");
    assert!(err.starts_with("test.toml:2: field `mps`"), "{err}");
    let err = error_of("[gpu]\nmin_run_fraction = 0.5\n");
    assert!(err.contains("above clamp_run_fraction"), "{err}");
}

#[test]
fn control_section_takes_defaults_and_names_bad_caps_by_line() {
    let control = parse("").unwrap().settings().control;
    assert_eq!(control.idle_timeout, std::time::Duration::from_secs(60));
    assert_eq!(
        (control.max_connections_per_user, control.max_connections),
        (64, 512)
    );
    let err = error_of(
        "[control]
max_connections_per_user = 8
max_connections = 0
",
    );
    assert!(
        err.starts_with("test.toml:3: field `max_connections`") && err.contains("at least 1"),
        "{err}"
    );
    let err = error_of(
        "[control]
max_connections = 4
max_connections_per_user = 8
",
    );
    assert!(
        err.starts_with("test.toml:3: field `max_connections_per_user`")
            && err.contains("more than max_connections"),
        "{err}"
    );
    let err = error_of(
        "[control]
idle_timeout = 5
",
    );
    assert!(err.contains("idle_timeout"), "{err}");
}

#[test]
fn the_shipped_example_config_parses_with_its_stated_defaults() {
    let config = parse(include_str!("../../../deploy/enforcer.example.toml")).unwrap();
    assert_eq!(config.settings().policy, Settings::default().policy);
    assert_eq!(config.settings().control, Settings::default().control);
    let defaults = gpu::GpuSection::default();
    assert_eq!(config.gpu.sample_ms, defaults.sample_ms);
    assert_eq!(config.gpu.settings(), defaults.settings());
    assert_eq!(
        config.gpu.training_memory_reserve_mib,
        defaults.training_memory_reserve_mib
    );
    let kubernetes = kubernetes::KubernetesSection::default();
    assert_eq!(config.kubernetes.cgroup_root, kubernetes.cgroup_root);
    assert_eq!(config.kubernetes.cgroup_driver, kubernetes.cgroup_driver);
    assert!(config.kubernetes.selector.is_empty() && config.kubernetes.node_name.is_none());
}

#[test]
fn the_helm_charts_default_config_follows_the_nodes_pods_on_a_gpu_server() {
    let text = include_str!("../../../deploy/helm/reamer/files/enforcer.toml");
    // The server reamer is for has 16 CPUs; the online pool keeps 2 of them.
    let config = Config::parse_for(
        Path::new("enforcer.toml"),
        text,
        Machine::Elsewhere { cpus: 16 },
    )
    .unwrap();
    assert!(config.kubernetes.is_enabled());
    let settings = config.settings();
    assert_eq!(settings.metrics, Some("0.0.0.0:9464".parse().unwrap()));
    let kinds: Vec<_> = settings
        .pools
        .iter()
        .map(|p| (p.name.as_str(), p.is_online()))
        .collect();
    assert_eq!(kinds, [("online", true), ("batch", false)]);
}

#[test]
fn gpu_flag_belongs_to_pools() {
    let config = parse("[[pool]]\nname = \"g\"\nkind = \"online\"\ngpu = true\n").unwrap();
    assert!(config.pool[0].uses_gpu());
    let pid = std::process::id();
    let err = error_of(&format!(
        "[[training]]\nname = \"t\"\npids = [{pid}]\ngpu = true\n"
    ));
    assert!(err.starts_with("test.toml:4: field `gpu`"), "{err}");
}

#[test]
fn syntax_error_has_a_line() {
    let err = error_of("[sensor\n");
    assert!(err.starts_with("test.toml:1:"), "{err}");
}
