//! Every bound a spec must respect, and the defaults filled in when a field is absent. Bounds keep
//! a hostile or mistaken spec from exhausting an agent; each has a clear message when exceeded.

/// Largest spec file accepted, in bytes.
pub const SPEC_BYTES_MAX: usize = 1 << 20;
/// Most problems listed for one spec; the rest are counted in one line.
pub const ERRORS_MAX: usize = 100;
/// Longest workload name (a DNS label).
pub const NAME_LEN_MAX: usize = 63;
/// Most replicas of one workload.
pub const REPLICAS_MAX: u32 = 10_000;
/// Replicas when `replicas` is absent.
pub const REPLICAS_DEFAULT: u32 = 1;
/// Most CPU one replica may reserve: 1024 cores.
pub const CPU_MILLIS_MAX: u64 = 1_024_000;
/// Least memory one replica may reserve: 1 MiB.
pub const MEMORY_BYTES_MIN: u64 = 1 << 20;
/// Most memory one replica may reserve: 4 TiB.
pub const MEMORY_BYTES_MAX: u64 = 4 << 40;
/// Most environment variables.
pub const ENV_VARS_MAX: usize = 256;
/// Longest environment variable value, in bytes.
pub const ENV_VALUE_BYTES_MAX: usize = 32 << 10;
/// Most arguments in a command (program included).
pub const COMMAND_ARGS_MAX: usize = 256;
/// Longest command argument, path or other free-form string, in bytes.
pub const STRING_BYTES_MAX: usize = 4096;
/// Longest image reference.
pub const IMAGE_LEN_MAX: usize = 255;
/// Most published ports.
pub const PORTS_MAX: usize = 64;
/// Longest port name (as Kubernetes' port names, an IANA service name).
pub const PORT_NAME_LEN_MAX: usize = 15;
/// Most named ports a workload declares (a process's `ports`, a container's named mappings):
/// each instance's numbers are gossiped and answered, so they are few.
pub const NAMED_PORTS_MAX: usize = 16;
/// Most placement constraints.
pub const CONSTRAINTS_MAX: usize = 32;
/// Lowest placement priority.
pub const PRIORITY_MIN: i32 = -1000;
/// Highest placement priority.
pub const PRIORITY_MAX: i32 = 1000;
/// Longest duration anywhere in a spec: 24 hours.
pub const DURATION_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// Health probe interval when absent (as Kubernetes).
pub const HEALTH_INTERVAL_MS_DEFAULT: u64 = 10_000;
/// Health probe timeout when absent (as Kubernetes).
pub const HEALTH_TIMEOUT_MS_DEFAULT: u64 = 1_000;
/// Consecutive failures before unhealthy, when absent (as Kubernetes).
pub const HEALTH_FAILURE_THRESHOLD_DEFAULT: u32 = 3;
/// Most consecutive failures a health check may wait for.
pub const HEALTH_FAILURE_THRESHOLD_MAX: u32 = 100;
/// Start grace when absent: slow starters are not killed before they could answer.
pub const HEALTH_START_GRACE_MS_DEFAULT: u64 = 10_000;
/// HTTP probe path when absent.
pub const HEALTH_HTTP_PATH_DEFAULT: &str = "/";
/// How long a copy at a new version may go without serving before the rollout fails it, when
/// absent (Nomad's `healthy_deadline` is 5 minutes, Kubernetes' `progressDeadlineSeconds` 10;
/// Shoal's probes and starts are quicker to judge, and a bad version should not linger).
pub const UPDATE_PROGRESS_DEADLINE_MS_DEFAULT: u64 = 2 * 60 * 1000;
/// Shortest `update.progress_deadline`.
pub const UPDATE_PROGRESS_DEADLINE_MS_MIN: u64 = 1000;
/// Most live settings.
pub const SETTINGS_MAX: usize = 64;
