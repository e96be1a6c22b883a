//! metrics: the Prometheus families of SPEC §7, on prometheus-client.
//!
//! Counted in one place each: decisions and bytes where the access-log line
//! is written (`ConnCtx::record`), connections in the listener, taint sizes
//! in the store's caller, reloads in `reload`. Must not decide anything.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub task: String,
    pub decision: String,
    pub rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    pub task: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BytesLabels {
    pub task: String,
    pub direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

type HistogramFamily = Family<TaskLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 0.25 ms .. ~8 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

pub struct Metrics {
    registry: Registry,
    pub decisions: Family<DecisionLabels, Counter>,
    pub connections_active: Family<TaskLabels, Gauge>,
    pub bytes: Family<BytesLabels, Counter>,
    pub taint_hosts: Family<TaskLabels, Gauge>,
    pub taint_overflow: Family<TaskLabels, Gauge>,
    pub reloads: Family<ResultLabels, Counter>,
    pub config_generation: Gauge,
    pub log_write_errors: Counter,
    pub upstream_connect_seconds: HistogramFamily,
    pub first_byte_seconds: HistogramFamily,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            decisions: Family::default(),
            connections_active: Family::default(),
            bytes: Family::default(),
            taint_hosts: Family::default(),
            taint_overflow: Family::default(),
            reloads: Family::default(),
            config_generation: Gauge::default(),
            log_write_errors: Counter::default(),
            upstream_connect_seconds: Family::new_with_constructor(latency_histogram),
            first_byte_seconds: Family::new_with_constructor(latency_histogram),
            registry: Registry::default(),
        };
        // Counters get their `_total` suffix from the encoder.
        registry.register(
            "sluice_decisions",
            "Decisions by task, decision and rule",
            m.decisions.clone(),
        );
        registry.register(
            "sluice_connections_active",
            "Open client connections by task",
            m.connections_active.clone(),
        );
        registry.register(
            "sluice_bytes",
            "Bytes relayed by task and direction (up: to upstream, down: to the client)",
            m.bytes.clone(),
        );
        registry.register(
            "sluice_taint_hosts",
            "Hosts in the task's taint set",
            m.taint_hosts.clone(),
        );
        registry.register(
            "sluice_taint_overflow",
            "1 when the task's taint set is full and the task fails closed",
            m.taint_overflow.clone(),
        );
        registry.register(
            "sluice_reloads",
            "Config reloads by result",
            m.reloads.clone(),
        );
        registry.register(
            "sluice_config_generation",
            "Generation of the config in force",
            m.config_generation.clone(),
        );
        registry.register(
            "sluice_log_write_errors",
            "Log lines that could not be written (full disk, permissions)",
            m.log_write_errors.clone(),
        );
        registry.register(
            "sluice_upstream_connect_seconds",
            "Time to connect upstream (TCP, and TLS for intercepted HTTPS)",
            m.upstream_connect_seconds.clone(),
        );
        registry.register(
            "sluice_first_byte_seconds",
            "Time from a forwarded request to the upstream's response head",
            m.first_byte_seconds.clone(),
        );
        Metrics { registry, ..m }
    }

    pub fn task(task: &str) -> TaskLabels {
        TaskLabels {
            task: task.to_string(),
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.push_str("# encoding failed\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_spec_families() {
        let m = Metrics::new();
        m.decisions
            .get_or_create(&DecisionLabels {
                task: "t".into(),
                decision: "deny".into(),
                rule: "not-allowed".into(),
            })
            .inc();
        m.reloads
            .get_or_create(&ResultLabels {
                result: "ok".into(),
            })
            .inc();
        m.taint_hosts.get_or_create(&Metrics::task("t")).set(3);
        let text = m.render();
        assert!(
            text.contains(
                r#"sluice_decisions_total{task="t",decision="deny",rule="not-allowed"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"sluice_reloads_total{result="ok"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"sluice_taint_hosts{task="t"} 3"#), "{text}");
    }
}
