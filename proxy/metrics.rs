//! metrics: the Prometheus families of SPEC §7, on prometheus-client.
//!
//! Counted in one place each: decisions and bytes where the access-log row
//! is written (`exchange::write_row`; refusals at accept whose row is
//! rate-limited are counted beside it), open connections by
//! `exchange::ConnSlot`, taint sizes in the store's caller, reloads in
//! `reload`. Must not decide anything.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::policy::Verdict;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DecisionLabels {
    pub(crate) task: String,
    pub(crate) decision: String,
    pub(crate) rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TaskLabels {
    pub(crate) task: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BytesLabels {
    pub(crate) task: String,
    pub(crate) direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BuildLabels {
    pub(crate) version: String,
}

/// How an opaque tunnel's bytes were relayed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RelayLabels {
    /// `splice` (both ends plain TCP: the kernel moves the bytes) or
    /// `buffered` (through sluice's buffers).
    pub(crate) path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    pub(crate) result: String,
}

type HistogramFamily = Family<TaskLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 0.25 ms .. ~8 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

/// The series kept in statics (one per process, not per `Metrics`).
fn register_process_wide(registry: &mut Registry) {
    registry.register(
        "sluice_console_lines_dropped",
        "sluice's own log lines and stdout rows dropped: the reader fell behind or went away",
        crate::console::DROPPED.clone(),
    );
    registry.register(
        "sluice_parked_connections",
        "HTTP/1 connections parked: quiet between requests, waiting on their socket alone with hyper's buffers given back",
        PARKED.clone(),
    );
}

/// Connections parked now (`tunnel::park`), of every task.
pub(crate) static PARKED: std::sync::LazyLock<Gauge> = std::sync::LazyLock::new(Gauge::default);

pub(crate) struct Metrics {
    registry: Registry,
    pub(crate) decisions: Family<DecisionLabels, Counter>,
    pub(crate) connections_active: Family<TaskLabels, Gauge>,
    pub(crate) bytes: Family<BytesLabels, Counter>,
    pub(crate) taint_hosts: Family<TaskLabels, Gauge>,
    pub(crate) taint_overflow: Family<TaskLabels, Gauge>,
    pub(crate) reloads: Family<ResultLabels, Counter>,
    pub(crate) config_generation: Gauge,
    /// When the config in force was loaded (start or last good reload),
    /// seconds since the epoch.
    pub(crate) config_loaded: Gauge,
    pub(crate) build_info: Family<BuildLabels, Gauge>,
    pub(crate) log_write_errors: Counter,
    /// Opaque tunnels by relay path ([`Metrics::opaque_relay`]).
    opaque_relays: Family<RelayLabels, Counter>,
    pub(crate) upstream_connect_seconds: HistogramFamily,
    pub(crate) first_byte_seconds: HistogramFamily,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Counts an opaque tunnel relayed by `path` (`splice` or `buffered`).
    pub(crate) fn opaque_relay(&self, path: &str) {
        self.opaque_relays
            .get_or_create(&RelayLabels {
                path: path.to_string(),
            })
            .inc();
    }

    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            decisions: Family::default(),
            connections_active: Family::default(),
            bytes: Family::default(),
            taint_hosts: Family::default(),
            taint_overflow: Family::default(),
            reloads: Family::default(),
            config_generation: Gauge::default(),
            config_loaded: Gauge::default(),
            build_info: Family::default(),
            log_write_errors: Counter::default(),
            opaque_relays: Family::default(),
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
            "sluice_config_last_reload_success_timestamp_seconds",
            "When the config in force was loaded (start or last successful reload)",
            m.config_loaded.clone(),
        );
        registry.register(
            "sluice_build_info",
            "1, labelled with the version of sluice running",
            m.build_info.clone(),
        );
        m.build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
        m.config_loaded_now();
        registry.register(
            "sluice_log_write_errors",
            "Log lines that could not be written (full disk, permissions)",
            m.log_write_errors.clone(),
        );
        registry.register(
            "sluice_opaque_relays",
            "Opaque tunnels relayed, by path: splice (kernel, zero-copy) or buffered",
            m.opaque_relays.clone(),
        );
        register_process_wide(&mut registry);
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

    /// Records that a config was loaded now.
    pub(crate) fn config_loaded_now(&self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        self.config_loaded.set(now);
    }

    /// Removes every series of a task a reload removed.
    pub(crate) fn remove_task(&self, task: &str) {
        let labels = Metrics::task(task);
        self.connections_active.remove(&labels);
        self.taint_hosts.remove(&labels);
        self.taint_overflow.remove(&labels);
        self.upstream_connect_seconds.remove(&labels);
        self.first_byte_seconds.remove(&labels);
        for direction in ["up", "down"] {
            self.bytes.remove(&BytesLabels {
                task: task.to_string(),
                direction: direction.to_string(),
            });
        }
        for decision in VERDICTS {
            for rule in
                std::iter::once("").chain(crate::policy::Rule::ALL.iter().map(|r| r.as_str()))
            {
                self.decisions.remove(&DecisionLabels {
                    task: task.to_string(),
                    decision: decision.to_string(),
                    rule: rule.to_string(),
                });
            }
        }
    }

    pub(crate) fn task(task: &str) -> TaskLabels {
        TaskLabels {
            task: task.to_string(),
        }
    }

    /// The Prometheus text exposition.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.push_str("# encoding failed\n");
        }
        out
    }
}

/// One task's handles into the families, made once per task so the hot
/// path counts with an atomic add: no label strings built, nothing hashed,
/// no family lock taken per request.
pub(crate) struct TaskMetrics {
    task: std::sync::Arc<str>,
    family: DecisionFamily,
    /// `sluice_decisions_total` by verdict × rule (slot 0: no rule), made on
    /// first use so only series that happened are exported.
    decisions: [std::sync::OnceLock<Counter>; DECISION_SLOTS],
    /// Decisions by verdict alone (for the admin API's totals).
    verdicts: [std::sync::atomic::AtomicU64; VERDICTS.len()],
    pub(crate) bytes_up: Counter,
    pub(crate) bytes_down: Counter,
    pub(crate) connections_active: Gauge,
    pub(crate) taint_hosts: Gauge,
    pub(crate) taint_overflow: Gauge,
    pub(crate) upstream_connect_seconds: Histogram,
    pub(crate) first_byte_seconds: Histogram,
}

type DecisionFamily = Family<DecisionLabels, Counter>;

/// Verdicts (allow, deny, would_deny, error) × (no rule + every rule).
const RULE_SLOTS: usize = crate::policy::Rule::COUNT + 1;
const DECISION_SLOTS: usize = VERDICTS.len() * RULE_SLOTS;
use crate::policy::verdict::LABELS as VERDICTS;

/// The slot of verdict `v` × `rule` in [`TaskMetrics`]'s decisions: slot 0
/// of each verdict is "no rule", then the rules in [`Rule::ALL`] order.
/// Both parts are kept in range, so the slot is always in bounds.
///
/// [`Rule::ALL`]: crate::policy::Rule::ALL
fn slot(v: usize, rule: Option<crate::policy::Rule>) -> usize {
    let v = v.min(VERDICTS.len() - 1);
    let r = rule.map_or(0, |r| r.index().min(RULE_SLOTS - 2) + 1);
    v * RULE_SLOTS + r
}

impl TaskMetrics {
    pub(crate) fn new(m: &Metrics, task: &str) -> TaskMetrics {
        let labels = Metrics::task(task);
        let bytes = |direction: &str| {
            m.bytes
                .get_or_create(&BytesLabels {
                    task: task.to_string(),
                    direction: direction.to_string(),
                })
                .clone()
        };
        TaskMetrics {
            task: task.into(),
            family: m.decisions.clone(),
            decisions: std::array::from_fn(|_| std::sync::OnceLock::new()),
            verdicts: Default::default(),
            bytes_up: bytes("up"),
            bytes_down: bytes("down"),
            connections_active: m.connections_active.get_or_create(&labels).clone(),
            taint_hosts: m.taint_hosts.get_or_create(&labels).clone(),
            taint_overflow: m.taint_overflow.get_or_create(&labels).clone(),
            upstream_connect_seconds: m.upstream_connect_seconds.get_or_create(&labels).clone(),
            first_byte_seconds: m.first_byte_seconds.get_or_create(&labels).clone(),
        }
    }

    /// Counts one decision.
    pub(crate) fn decision<T>(&self, verdict: &Verdict<T>) {
        let rule = verdict.rule();
        let v = verdict.index().min(VERDICTS.len() - 1);
        self.verdicts[v].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(counter) = self.decisions.get(slot(v, rule)) else {
            return;
        };
        counter
            .get_or_init(|| {
                self.family
                    .get_or_create(&DecisionLabels {
                        task: self.task.to_string(),
                        decision: VERDICTS[v].to_string(),
                        rule: rule.map_or("", |r| r.as_str()).to_string(),
                    })
                    .clone()
            })
            .inc();
    }

    /// Decisions so far with this verdict (its `policy::verdict` label).
    pub(crate) fn verdicts(&self, label: &str) -> u64 {
        VERDICTS.iter().position(|l| *l == label).map_or(0, |i| {
            self.verdicts[i].load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// Counts relayed bytes (up: to the upstream, down: to the client).
    pub(crate) fn bytes(&self, up: u64, down: u64) {
        if up > 0 {
            self.bytes_up.inc_by(up);
        }
        if down > 0 {
            self.bytes_down.inc_by(down);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verdict_and_rule_has_its_own_slot_in_bounds() {
        use crate::policy::Rule;
        let mut seen = std::collections::HashSet::new();
        for v in 0..VERDICTS.len() {
            for rule in std::iter::once(None).chain(Rule::ALL.iter().copied().map(Some)) {
                let s = slot(v, rule);
                assert!(s < DECISION_SLOTS, "{v} {rule:?}");
                assert!(seen.insert(s), "slot {s} twice");
            }
        }
        assert_eq!(seen.len(), DECISION_SLOTS);
        // Out-of-range parts stay in bounds.
        assert!(slot(usize::MAX / 2, Some(Rule::OverCapacity)) < DECISION_SLOTS);
    }

    #[test]
    fn every_rule_is_counted_under_its_own_label() {
        use crate::policy::{Refusal, Rule};
        let m = Metrics::new();
        let t = TaskMetrics::new(&m, "t");
        for rule in Rule::ALL {
            t.decision(&Verdict::<()>::Deny(Refusal::new(*rule, "x")));
        }
        let text = m.render();
        for rule in Rule::ALL {
            let label = if rule.is_failure() { "error" } else { "deny" };
            let line = format!(
                r#"sluice_decisions_total{{task="t",decision="{label}",rule="{}"}} 1"#,
                rule.as_str()
            );
            assert!(text.contains(&line), "{line} in {text}");
        }
    }

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

    #[test]
    fn task_handles_count_into_the_families() {
        let m = Metrics::new();
        let t = TaskMetrics::new(&m, "t");
        t.decision(&Verdict::Allow(()));
        t.decision(&Verdict::Allow(()));
        t.decision(&Verdict::WouldDeny(
            (),
            crate::policy::Refusal::new(crate::policy::Rule::UntrustedTarget, "x"),
        ));
        t.bytes(5, 0);
        t.connections_active.inc();
        let text = m.render();
        for line in [
            r#"sluice_decisions_total{task="t",decision="allow",rule=""} 2"#,
            r#"sluice_decisions_total{task="t",decision="would_deny",rule="untrusted-target"} 1"#,
            r#"sluice_bytes_total{task="t",direction="up"} 5"#,
            r#"sluice_connections_active{task="t"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(
            !text.contains(r#"decision="deny""#),
            "unused series stay out: {text}"
        );
    }
}
