//! The config file as written: serde types that mirror SPEC §3 exactly.
//! Values carry their spans so that validation can name the line of every
//! problem. Unknown keys are collected by [`parse`] (each with its span),
//! not fatal to parsing, so that `check` reports them beside every other
//! problem.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

pub(crate) type S<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
pub(crate) struct RawConfig {
    pub(crate) state_dir: Option<S<String>>,
    /// A folder to copy the CA certificate and bundle to, for tasks.
    pub(crate) publish_ca: Option<S<String>>,
    /// Mode of task unix sockets, octal ("0660").
    pub(crate) unix_mode: Option<S<String>>,
    pub(crate) admin: Option<RawAdmin>,
    pub(crate) resolver: Option<RawResolver>,
    pub(crate) upstream: Option<RawUpstream>,
    pub(crate) limits: Option<RawLimits>,
    pub(crate) logs: Option<RawLogs>,
    #[serde(default)]
    pub(crate) task: Vec<S<RawTask>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RawAdmin {
    pub(crate) listen: Option<S<String>>,
    pub(crate) metrics_listen: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawNameservers {
    Named(String),
    List(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub(crate) struct RawResolver {
    pub(crate) nameservers: Option<S<RawNameservers>>,
    #[serde(default)]
    pub(crate) hosts: BTreeMap<String, S<Vec<S<String>>>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RawUpstream {
    #[serde(default)]
    pub(crate) extra_roots: Vec<S<String>>,
}

/// Resource limits; every field has a default (see `Limits`).
#[derive(Debug, Deserialize)]
pub(crate) struct RawLimits {
    pub(crate) max_connections_per_task: Option<S<i64>>,
    pub(crate) header_timeout_secs: Option<S<i64>>,
    pub(crate) max_header_bytes: Option<S<i64>>,
    pub(crate) connect_timeout_secs: Option<S<i64>>,
    pub(crate) first_byte_timeout_secs: Option<S<i64>>,
    pub(crate) tunnel_idle_timeout_secs: Option<S<i64>>,
    pub(crate) drain_secs: Option<S<i64>>,
}

/// Access-log rotation.
#[derive(Debug, Deserialize)]
pub(crate) struct RawLogs {
    pub(crate) rotate_bytes: Option<S<i64>>,
    pub(crate) keep: Option<S<i64>>,
    pub(crate) stdout: Option<S<bool>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RawTask {
    pub(crate) id: S<String>,
    #[serde(default)]
    pub(crate) listen: Vec<S<String>>,
    #[serde(default)]
    pub(crate) allow: Vec<S<String>>,
    pub(crate) allow_mode: Option<S<String>>,
    /// How long `allow_mode = "ask"` holds a request for an answer.
    pub(crate) ask_timeout_secs: Option<S<i64>>,
    #[serde(default)]
    pub(crate) allow_private: Vec<S<String>>,
    pub(crate) intercept: Option<S<String>>,
    #[serde(default)]
    pub(crate) passthrough: Vec<S<String>>,
    pub(crate) taint: Option<RawTaint>,
    #[serde(default)]
    pub(crate) secret: Vec<S<RawSecret>>,
}

/// One `[[task.secret]]` as written.
#[derive(Debug, Deserialize)]
pub(crate) struct RawSecret {
    pub(crate) name: S<String>,
    pub(crate) from_env: Option<S<String>>,
    pub(crate) from_file: Option<S<String>>,
    /// A value written in the config: refused, and only its place is kept
    /// (never the text), so no message or `Debug` output can repeat it.
    pub(crate) value: Option<S<Withheld>>,
    #[serde(default)]
    pub(crate) hosts: Vec<S<String>>,
    pub(crate) headers: Option<Vec<S<String>>>,
    pub(crate) query: Option<S<bool>>,
    pub(crate) body: Option<S<bool>>,
    pub(crate) on_violation: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RawTaint {
    pub(crate) mode: Option<S<String>>,
    #[serde(default)]
    pub(crate) exempt: Vec<S<String>>,
    pub(crate) max_hosts: Option<S<i64>>,
    /// Decoded bytes scanned per response at most.
    pub(crate) max_scan_bytes: Option<S<i64>>,
    /// `"exclude"` (default): a response does not taint the host that
    /// served it; `"taint"`: it does.
    #[serde(rename = "self")]
    pub(crate) self_: Option<S<String>>,
    /// Multi-tenant hosts tainted per owner (default: the code forges).
    pub(crate) by_owner: Option<Vec<S<String>>>,
    /// Groups of hosts that count as one site: a response from one does
    /// not taint the others (default: each registry with its file hosts).
    pub(crate) related: Option<Vec<Vec<S<String>>>>,
}

/// A value read and dropped at once: nothing of it is kept or shown.
pub(crate) struct Withheld;

impl std::fmt::Debug for Withheld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(withheld)")
    }
}

impl<'de> Deserialize<'de> for Withheld {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Withheld, D::Error> {
        // Read as any value (not "ignored": it is a key the config knows).
        let _ = toml::Value::deserialize(d)?;
        Ok(Withheld)
    }
}

/// A key the config does not know, and where it is written.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unknown {
    /// `logs.rotate`, `task[1].alow`.
    pub(crate) key: String,
    pub(crate) span: Option<std::ops::Range<usize>>,
    /// The known key of the same table nearest to it, if one is near.
    pub(crate) nearest: Option<&'static str>,
    /// The table this exact key belongs to, when it is another one (a key
    /// written below `[task.taint]` lands in that table).
    pub(crate) belongs_in: Option<&'static str>,
}

/// Every key each table knows, for "did you mean". A key missing here only
/// loses its suggestion; the test below checks each one is accepted.
const KNOWN: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "state_dir",
            "publish_ca",
            "unix_mode",
            "admin",
            "resolver",
            "upstream",
            "limits",
            "logs",
            "task",
        ],
    ),
    ("admin", &["listen", "metrics_listen"]),
    ("resolver", &["nameservers", "hosts"]),
    ("upstream", &["extra_roots"]),
    (
        "limits",
        &[
            "max_connections_per_task",
            "header_timeout_secs",
            "max_header_bytes",
            "connect_timeout_secs",
            "first_byte_timeout_secs",
            "tunnel_idle_timeout_secs",
            "drain_secs",
        ],
    ),
    ("logs", &["rotate_bytes", "keep", "stdout"]),
    (
        "task",
        &[
            "id",
            "listen",
            "allow",
            "allow_mode",
            "ask_timeout_secs",
            "allow_private",
            "intercept",
            "passthrough",
            "taint",
            "secret",
        ],
    ),
    (
        "task.secret",
        &[
            "name",
            "from_env",
            "from_file",
            "value",
            "hosts",
            "headers",
            "query",
            "body",
            "on_violation",
        ],
    ),
    (
        "task.taint",
        &[
            "mode",
            "exempt",
            "max_hosts",
            "max_scan_bytes",
            "self",
            "by_owner",
            "related",
        ],
    ),
];

/// The known key of the table at `steps` (the unknown key last) nearest
/// to the unknown one, as clap suggests a subcommand.
fn nearest(steps: &[Step]) -> Option<&'static str> {
    let (Step::Key(typed), parent) = steps.split_last()? else {
        return None;
    };
    let table: Vec<&str> = parent
        .iter()
        .filter_map(|s| match s {
            Step::Key(k) => Some(k.as_str()),
            Step::Index(_) => None,
        })
        .collect();
    let (_, keys) = KNOWN.iter().find(|(t, _)| *t == table.join("."))?;
    keys.iter()
        .map(|k| (strsim::jaro_winkler(typed, k), *k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// Where the unknown key at `steps` is known, if in another table: as the
/// config writes that table's header.
fn belongs_in(steps: &[Step]) -> Option<&'static str> {
    let Some(Step::Key(typed)) = steps.last() else {
        return None;
    };
    let (table, _) = KNOWN
        .iter()
        .find(|(_, keys)| keys.contains(&typed.as_str()))?;
    Some(match *table {
        "" => "the top of the file (before any [section])",
        "task" => "[[task]] (above its [task.taint])",
        "task.taint" => "[task.taint]",
        "task.secret" => "[[task.secret]]",
        "admin" => "[admin]",
        "resolver" => "[resolver]",
        "upstream" => "[upstream]",
        "limits" => "[limits]",
        "logs" => "[logs]",
        _ => return None,
    })
}

/// One step of a path into the document.
enum Step {
    Key(String),
    Index(usize),
}

/// Parses a config text, collecting the keys it does not know instead of
/// stopping at the first.
pub(crate) fn parse(text: &str) -> Result<(RawConfig, Vec<Unknown>), toml::de::Error> {
    let de = toml::de::Deserializer::parse(text)?;
    let mut paths: Vec<Vec<Step>> = Vec::new();
    let raw: RawConfig = serde_ignored::deserialize(de, |path| paths.push(steps(&path)))?;
    let doc = DeTable::parse(text).ok();
    let unknown = paths
        .into_iter()
        .map(|p| Unknown {
            key: render(&p),
            span: doc.as_ref().and_then(|d| span_of(d.get_ref(), &p)),
            nearest: nearest(&p),
            belongs_in: belongs_in(&p),
        })
        .collect();
    Ok((raw, unknown))
}

/// The steps of an ignored path, without `Spanned`'s private fields.
fn steps(path: &serde_ignored::Path) -> Vec<Step> {
    use serde_ignored::Path;
    let mut out = Vec::new();
    let mut at = path;
    loop {
        match at {
            Path::Root => break,
            Path::Seq { parent, index } => {
                out.push(Step::Index(*index));
                at = parent;
            }
            Path::Map { parent, key } => {
                if !key.starts_with("$__") {
                    out.push(Step::Key(key.clone()));
                }
                at = parent;
            }
            Path::Some { parent }
            | Path::NewtypeStruct { parent }
            | Path::NewtypeVariant { parent } => at = parent,
        }
    }
    out.reverse();
    out
}

fn render(steps: &[Step]) -> String {
    let mut out = String::new();
    for s in steps {
        match s {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The key whose value is written at `offset`: `task[1].listen`, for a
/// problem serde found in a value's type. (A table's own span covers only
/// its header, so the search goes down to the values.)
pub(crate) fn key_at(text: &str, offset: usize) -> Option<String> {
    let doc = DeTable::parse(text).ok()?;
    let mut steps = Vec::new();
    find_in_table(doc.get_ref(), offset, &mut steps).then(|| render(&steps))
}

fn find_in_table(table: &DeTable, offset: usize, steps: &mut Vec<Step>) -> bool {
    for (k, v) in table.iter() {
        steps.push(Step::Key(k.get_ref().to_string()));
        if find_in_value(v, offset, steps) {
            return true;
        }
        steps.pop();
    }
    false
}

fn find_in_value(v: &Spanned<DeValue>, offset: usize, steps: &mut Vec<Step>) -> bool {
    match v.get_ref() {
        DeValue::Table(t) => find_in_table(t, offset, steps),
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                if let DeValue::Table(t) = item.get_ref() {
                    steps.push(Step::Index(i));
                    if find_in_table(t, offset, steps) {
                        return true;
                    }
                    steps.pop();
                }
            }
            v.span().contains(&offset)
        }
        _ => v.span().contains(&offset),
    }
}

/// Where the last key of `steps` is written.
fn span_of(table: &DeTable, steps: &[Step]) -> Option<std::ops::Range<usize>> {
    let (Step::Key(first), rest) = steps.split_first()? else {
        return None;
    };
    let (key, value) = table.get_key_value(first.as_str())?;
    if rest.is_empty() {
        return Some(key.span());
    }
    let mut value: &DeValue = value.get_ref();
    let mut rest = rest;
    while let Some((step, tail)) = rest.split_first() {
        match (step, value) {
            (Step::Index(i), DeValue::Array(a)) => {
                let item = a.get(*i)?;
                if tail.is_empty() {
                    return Some(item.span());
                }
                value = item.get_ref();
                rest = tail;
            }
            (Step::Key(_), DeValue::Table(t)) => return span_of(t, rest),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document with `key = true` in `table`.
    fn doc(table: &str, key: &str) -> String {
        let head = match table {
            "" => String::new(),
            "task" => "[[task]]\nid = \"a\"\n".to_string(),
            "task.taint" => "[[task]]\nid = \"a\"\n[task.taint]\n".to_string(),
            "task.secret" => "[[task]]\nid = \"a\"\n[[task.secret]]\nname = \"N\"\n".to_string(),
            t => format!("[{t}]\n"),
        };
        format!("{head}{key} = true\n")
    }

    #[test]
    fn every_known_key_is_one_the_config_takes() {
        for (table, keys) in KNOWN {
            // The table is written right: a made-up key there is unknown.
            let (_, unknown) = parse(&doc(table, "zzz")).expect(table);
            assert_eq!(unknown.len(), 1, "{table}");
            for key in *keys {
                // A wrong type is an error, not an unknown key.
                if let Ok((_, unknown)) = parse(&doc(table, key)) {
                    assert!(unknown.is_empty(), "{table}.{key}: {unknown:?}");
                }
            }
        }
    }

    #[test]
    fn a_typo_gets_the_nearest_key_of_its_own_table() {
        let cases = [
            ("task", "alow", Some("allow")),
            ("task", "allow_privat", Some("allow_private")),
            ("task.taint", "mood", Some("mode")),
            ("logs", "rotate", Some("rotate_bytes")),
            ("", "stat_dir", Some("state_dir")),
            ("", "colour", None),
            // Another table's key is not suggested.
            ("admin", "allow", None),
        ];
        for (table, typed, want) in cases {
            let (_, unknown) = parse(&doc(table, typed)).expect(typed);
            assert_eq!(unknown.len(), 1, "{typed}");
            assert_eq!(unknown[0].nearest, want, "{table}.{typed}");
        }
    }

    #[test]
    fn a_key_in_the_wrong_table_is_told_where_it_belongs() {
        let cases = [
            // Appended to a copied default: it lands in [task.taint].
            (
                "task.taint",
                "allow_private",
                Some("[[task]] (above its [task.taint])"),
            ),
            ("task", "mode", Some("[task.taint]")),
            ("", "header_timeout_secs", Some("[limits]")),
            ("admin", "allow", Some("[[task]] (above its [task.taint])")),
            (
                "task",
                "state_dir",
                Some("the top of the file (before any [section])"),
            ),
            ("task", "zzz", None),
        ];
        for (table, typed, want) in cases {
            let (_, unknown) = parse(&doc(table, typed)).expect(typed);
            assert_eq!(unknown.len(), 1, "{table}.{typed}");
            assert_eq!(unknown[0].belongs_in, want, "{table}.{typed}");
        }
    }
}
