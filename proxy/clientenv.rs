//! clientenv: what a task's shell needs so that every common tool sends
//! its traffic through sluice and trusts sluice's CA — the data behind
//! `sluice env` and the book's "Setting up clients" table (docs/src/clients.md), kept in one
//! place so the two cannot drift.
//!
//! Pure: renders text from a proxy URL and two file paths. Must not read
//! or write files (the CLI does) or know about connections.

use std::fmt::Write as _;

use crate::shell::{plain, sh_quote};

/// What a variable is set to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// The proxy URL, `http://host:port`.
    Proxy,
    /// The CA bundle: the system roots plus sluice's CA.
    Bundle,
    /// sluice's CA alone (for tools that add it to roots they keep).
    Ca,
    /// A fixed value.
    Fixed(&'static str),
    /// Removed from the environment.
    Unset,
}

/// One environment variable a tool reads. `tool`, `overrides` and
/// `without` are the book's table (`readme_table`, checked by a test).
#[derive(Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Setting {
    pub(crate) tool: &'static str,
    pub(crate) var: &'static str,
    pub(crate) value: Value,
    /// What it takes precedence over.
    pub(crate) overrides: &'static str,
    /// What goes wrong without it.
    pub(crate) without: &'static str,
    /// Set only when the task's tunnels are intercepted (a CA exists).
    pub(crate) needs_ca: bool,
}

const fn proxy(
    tool: &'static str,
    var: &'static str,
    overrides: &'static str,
    without: &'static str,
) -> Setting {
    Setting {
        tool,
        var,
        value: Value::Proxy,
        overrides,
        without,
        needs_ca: false,
    }
}

const fn trust(
    tool: &'static str,
    var: &'static str,
    value: Value,
    overrides: &'static str,
    without: &'static str,
) -> Setting {
    Setting {
        tool,
        var,
        value,
        overrides,
        without,
        needs_ca: true,
    }
}

/// Every variable `sluice env` sets, in the order it prints them.
pub(crate) const SETTINGS: &[Setting] = &[
    proxy(
        "curl, wget, most tools",
        "http_proxy",
        "-",
        "curl reads only the lower-case name for http://",
    ),
    proxy(
        "most tools",
        "HTTP_PROXY",
        "-",
        "tools that read only the upper-case name go direct",
    ),
    proxy(
        "curl, pip, git, Go, most tools",
        "https_proxy",
        "-",
        "HTTPS goes direct (or into a wall)",
    ),
    proxy(
        "most tools",
        "HTTPS_PROXY",
        "-",
        "HTTPS goes direct (or into a wall)",
    ),
    Setting {
        tool: "every tool",
        var: "NO_PROXY",
        value: Value::Unset,
        overrides: "-",
        without: "a stray NO_PROXY sends matching hosts around sluice, or into a wall",
        needs_ca: false,
    },
    Setting {
        tool: "every tool",
        var: "no_proxy",
        value: Value::Unset,
        overrides: "-",
        without: "as NO_PROXY",
        needs_ca: false,
    },
    proxy(
        "npm",
        "npm_config_proxy",
        "`proxy` in .npmrc",
        "an .npmrc proxy wins over the environment",
    ),
    proxy(
        "npm",
        "npm_config_https_proxy",
        "`https-proxy` in .npmrc",
        "an .npmrc https-proxy wins over the environment",
    ),
    proxy(
        "pip",
        "PIP_PROXY",
        "`proxy` in pip.conf",
        "a pip.conf proxy wins over the environment",
    ),
    proxy(
        "cargo",
        "CARGO_HTTP_PROXY",
        "`http.proxy` in .cargo/config.toml",
        "a configured cargo proxy wins",
    ),
    Setting {
        tool: "Node (built-in fetch, http)",
        var: "NODE_USE_ENV_PROXY",
        value: Value::Fixed("1"),
        overrides: "-",
        without:
            "Node ignores the proxy variables and connects directly (Node 24 and later honour this)",
        needs_ca: false,
    },
    trust(
        "OpenSSL-based tools, Go, Ruby, Python ssl",
        "SSL_CERT_FILE",
        Value::Bundle,
        "the system store",
        "unknown-CA errors on intercepted hosts; sluice's CA alone would break passthrough hosts",
    ),
    trust(
        "curl",
        "CURL_CA_BUNDLE",
        Value::Bundle,
        "curl's built-in CA path",
        "curl: (60) SSL certificate problem",
    ),
    trust(
        "Python requests",
        "REQUESTS_CA_BUNDLE",
        Value::Bundle,
        "certifi's bundle",
        "CERTIFICATE_VERIFY_FAILED from requests",
    ),
    trust(
        "pip",
        "PIP_CERT",
        Value::Bundle,
        "`cert` in pip.conf (often the system bundle)",
        "pip's CERTIFICATE_VERIFY_FAILED, even with --cert elsewhere",
    ),
    trust(
        "Node",
        "NODE_EXTRA_CA_CERTS",
        Value::Ca,
        "- (adds to Node's own roots)",
        "UNABLE_TO_VERIFY_LEAF_SIGNATURE / self-signed certificate in chain",
    ),
    trust(
        "npm",
        "npm_config_cafile",
        Value::Bundle,
        "`cafile` in .npmrc (often the system bundle)",
        "npm ERR! code SELF_SIGNED_CERT_IN_CHAIN",
    ),
    trust(
        "git",
        "GIT_SSL_CAINFO",
        Value::Bundle,
        "`http.sslCAInfo` in git config",
        "server certificate verification failed",
    ),
    trust(
        "cargo",
        "CARGO_HTTP_CAINFO",
        Value::Bundle,
        "`http.cainfo` in .cargo/config.toml",
        "[60] SSL peer certificate or SSH remote key was not OK",
    ),
];

/// What Java needs: it reads no proxy or CA variables of its own.
pub(crate) const JAVA_NOTE: &str = "Java: JAVA_TOOL_OPTIONS carries the proxy; for the CA, Java needs a PKCS#12 trust store: keytool -importkeystore -srckeystore \"$JAVA_HOME/lib/security/cacerts\" -srcstorepass changeit -destkeystore sluice-truststore.p12 -deststorepass changeit && keytool -importcert -noprompt -alias sluice -file CA -keystore sluice-truststore.p12 -storepass changeit, then add -Djavax.net.ssl.trustStore=sluice-truststore.p12 -Djavax.net.ssl.trustStorePassword=changeit";

/// What `sluice env` renders for one task.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    pub(crate) task: String,
    /// `http://host:port`.
    pub(crate) proxy: String,
    /// The CA and the bundle, when the task intercepts.
    pub(crate) ca: Option<(String, String)>,
    /// Comment lines to print first (how to reach the proxy, say).
    pub(crate) notes: Vec<String>,
    /// Each secret's variable and its placeholder (never a value).
    pub(crate) secrets: Vec<(String, String)>,
}

/// The shells `sluice env` writes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Shell {
    Sh,
    Fish,
    Json,
}

impl Env {
    /// Each variable and its value (None: unset), in print order.
    pub(crate) fn vars(&self) -> Vec<(String, Option<String>)> {
        let mut out = Vec::new();
        for s in SETTINGS {
            let value = match (s.value, &self.ca) {
                (_, None) if s.needs_ca => continue,
                (Value::Proxy, _) => Some(self.proxy.clone()),
                (Value::Bundle, Some((_, bundle))) => Some(bundle.clone()),
                (Value::Ca, Some((ca, _))) => Some(ca.clone()),
                (Value::Bundle | Value::Ca, None) => continue,
                (Value::Fixed(v), _) => Some(v.to_string()),
                (Value::Unset, _) => None,
            };
            out.push((s.var.to_string(), value));
        }
        out.push(("JAVA_TOOL_OPTIONS".into(), Some(self.java_options())));
        for (name, placeholder) in &self.secrets {
            out.push((name.clone(), Some(placeholder.clone())));
        }
        out
    }

    fn java_options(&self) -> String {
        let (host, port) = host_port(&self.proxy);
        format!("-Dhttp.proxyHost={host} -Dhttp.proxyPort={port} -Dhttps.proxyHost={host} -Dhttps.proxyPort={port}")
    }

    fn comments(&self) -> Vec<String> {
        let mut c = vec![format!(
            "sluice env for task {:?}: proxy {}",
            self.task, self.proxy
        )];
        c.extend(self.notes.iter().cloned());
        c.push(
            "NO_PROXY is cleared: a host listed there would go around sluice (or into a wall)."
                .into(),
        );
        match &self.ca {
            Some((ca, bundle)) => {
                c.push(format!("CA bundle {bundle}: the system roots plus sluice's CA ({ca}), so passthrough hosts keep working."));
                c.push(JAVA_NOTE.replace(" CA ", &format!(" {ca} ")));
            }
            None => c.push("This task's tunnels are not intercepted: no CA to trust.".into()),
        }
        if !self.secrets.is_empty() {
            let names: Vec<&str> = self.secrets.iter().map(|(n, _)| n.as_str()).collect();
            c.push(format!(
                "{} hold placeholders, not the real values: sluice swaps each value in only on intercepted requests to its hosts.",
                names.join(", ")
            ));
        }
        c
    }

    /// The text for `eval "$(sluice env)"` (or fish's `| source`, or JSON).
    pub(crate) fn render(&self, shell: Shell) -> String {
        let mut out = String::new();
        match shell {
            Shell::Sh | Shell::Fish => {
                // Comments carry paths from the config: a newline in one
                // must not end the comment (the text is eval'd).
                for c in self.comments() {
                    let _ = writeln!(out, "# {}", one_line(&c));
                }
                for (var, value) in self.vars() {
                    let _ = match (shell, value) {
                        (Shell::Sh, Some(v)) => writeln!(out, "export {var}={}", sh_quote(&v)),
                        (Shell::Sh, None) => writeln!(out, "unset {var}"),
                        (_, Some(v)) => writeln!(out, "set -gx {var} {}", fish_quote(&v)),
                        (_, None) => writeln!(out, "set -e {var}"),
                    };
                }
            }
            Shell::Json => {
                let set: serde_json::Map<String, serde_json::Value> = self
                    .vars()
                    .into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k, v.into())))
                    .collect();
                let unset: Vec<String> = self
                    .vars()
                    .into_iter()
                    .filter(|(_, v)| v.is_none())
                    .map(|(k, _)| k)
                    .collect();
                let v = serde_json::json!({
                    "task": self.task, "proxy": self.proxy, "set": set,
                    "unset": unset, "notes": self.comments(),
                });
                let _ = writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&v).unwrap_or_default()
                );
            }
        }
        out
    }
}

/// Where a task reaches its proxy, from its first listener: the URL, and
/// notes on how (a guest relay for unix and vsock listeners). `Err` says
/// why it cannot be known (a listener on port 0).
pub(crate) fn proxy_for(
    listen: &crate::config::ListenAddr,
) -> Result<(String, Vec<String>), String> {
    use crate::config::ListenAddr;
    const GUEST: &str = "127.0.0.1:3128";
    match listen {
        ListenAddr::Tcp(a) if a.port() == 0 => Err(format!(
            "the task listens on {listen}, a port chosen at start; pass --proxy http://HOST:PORT"
        )),
        ListenAddr::Tcp(a) if a.ip().is_unspecified() => Ok((
            format!("http://127.0.0.1:{}", a.port()),
            vec![format!("sluice listens on {listen}: from another host or container, pass --proxy with the address it reaches sluice at.")],
        )),
        ListenAddr::Tcp(a) => Ok((format!("http://{a}"), vec![])),
        ListenAddr::Unix(p) => Ok((
            format!("http://{GUEST}"),
            vec![format!("The task listener is a unix socket: in the guest, run `sluice forward --listen tcp:{GUEST} --to unix:{}` first.", p.display())],
        )),
        ListenAddr::Vsock { port, .. } => Ok((
            format!("http://{GUEST}"),
            vec![format!("The task listener is vsock port {port}: in the guest, run `sluice forward --listen tcp:{GUEST} --to vsock:2:{port}` first (the host is CID 2).")],
        )),
    }
}

/// The host and port of `http://host:port`.
fn host_port(url: &str) -> (&str, &str) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.trim_end_matches('/');
    match rest.rsplit_once(':') {
        Some((h, p)) => (h, p),
        None => (rest, "80"),
    }
}

/// Single-quotes a value for fish, where \\ and \' are escapes inside '…'.
fn fish_quote(v: &str) -> String {
    if plain(v) {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\\', r"\\").replace('\'', r"\'"))
    }
}

/// A comment line's text: control characters (a newline would end the
/// comment, and the text is eval'd) shown escaped.
fn one_line(c: &str) -> String {
    c.chars()
        .map(|ch| {
            if ch.is_control() {
                ch.escape_default().to_string()
            } else {
                ch.to_string()
            }
        })
        .collect()
}

/// The book's "Setting up clients" table (docs/src/clients.md), from [`SETTINGS`].
#[cfg(test)]
fn readme_table() -> String {
    let mut out = String::from(
        "| tool | variable | set to | overrides | without it |\n|---|---|---|---|---|\n",
    );
    for s in SETTINGS {
        let value = match s.value {
            Value::Proxy => "the proxy URL".to_string(),
            Value::Bundle => "the CA bundle".to_string(),
            Value::Ca => "sluice's CA".to_string(),
            Value::Fixed(v) => format!("`{v}`"),
            Value::Unset => "(unset)".to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | `{}` | {} | {} | {} |",
            s.tool, s.var, value, s.overrides, s.without
        );
    }
    let _ = writeln!(
        out,
        "| Java | `JAVA_TOOL_OPTIONS` | `-Dhttp(s).proxyHost/Port` | - | Java ignores proxy variables; see the note below for its trust store |"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(ca: bool) -> Env {
        Env {
            task: "build".into(),
            proxy: "http://127.0.0.1:3128".into(),
            ca: ca.then(|| ("/s/ca.pem".into(), "/s/ca-bundle.pem".into())),
            notes: vec![],
            secrets: vec![],
        }
    }

    #[test]
    fn sh_sets_both_cases_clears_no_proxy_and_points_at_the_bundle() {
        let text = env(true).render(Shell::Sh);
        for line in [
            "export http_proxy=http://127.0.0.1:3128",
            "export HTTPS_PROXY=http://127.0.0.1:3128",
            "unset NO_PROXY",
            "unset no_proxy",
            "export SSL_CERT_FILE=/s/ca-bundle.pem",
            "export NODE_EXTRA_CA_CERTS=/s/ca.pem",
            "export npm_config_cafile=/s/ca-bundle.pem",
            "export PIP_CERT=/s/ca-bundle.pem",
            "export CARGO_HTTP_CAINFO=/s/ca-bundle.pem",
            "export GIT_SSL_CAINFO=/s/ca-bundle.pem",
            "export JAVA_TOOL_OPTIONS='-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=3128 -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=3128'",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .all(|l| l.starts_with("export ") || l.starts_with("unset ")));
    }

    #[test]
    fn without_interception_no_ca_variables() {
        let text = env(false).render(Shell::Sh);
        assert!(!text.contains("SSL_CERT_FILE") && !text.contains("NODE_EXTRA_CA_CERTS"));
        assert!(text.contains("export https_proxy="));
    }

    #[test]
    fn fish_and_json() {
        let fish = env(true).render(Shell::Fish);
        assert!(fish.contains("set -gx HTTPS_PROXY http://127.0.0.1:3128"));
        assert!(fish.contains("set -e NO_PROXY"));
        let v: serde_json::Value = serde_json::from_str(&env(true).render(Shell::Json)).unwrap();
        assert_eq!(v["set"]["SSL_CERT_FILE"], "/s/ca-bundle.pem");
        assert!(v["unset"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == "NO_PROXY"));
    }

    #[test]
    fn quoting_survives_the_shell() {
        assert_eq!(fish_quote(r"x\';curl evil|sh;#"), r"'x\\\';curl evil|sh;#'");
        assert_eq!(fish_quote(r"a\"), r"'a\\'");
    }

    /// Whatever a config path or note holds, `sh` reads back exactly the
    /// values and runs nothing else: every line is a comment or one
    /// export/unset, and evaluating it sets the strings given.
    #[test]
    fn hostile_paths_cannot_escape_eval() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("pwned");
        let m = marker.display();
        let hostile = [
            format!("/x\ntouch {m}\n"),
            format!("/a'b\"c$(touch {m})`touch {m}`;touch {m}"),
            "/tab\there\\end\\".to_string(),
            "/\r\u{7f}\u{1b}[31m".to_string(),
        ];
        for h in hostile {
            let env = Env {
                task: "t\nx".into(),
                proxy: format!("http://127.0.0.1:3128/{h}"),
                ca: Some((format!("{h}/ca.pem"), format!("{h}/ca-bundle.pem"))),
                notes: vec![format!("in the guest, run sluice forward --to unix:{h}")],
                secrets: vec![],
            };
            let text = env.render(Shell::Sh);
            for line in text.lines().filter(|l| l.starts_with('#')) {
                assert!(line.starts_with("# "), "{line:?}");
            }
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("{text}\nprintf %s \"$SSL_CERT_FILE\""))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("{h}/ca-bundle.pem")
            );
            assert!(!marker.exists(), "{h:?} ran a command:\n{text}");
        }
    }

    /// The book's table is generated from SETTINGS; after changing them,
    /// `SLUICE_BLESS=1 cargo test --lib clientenv` rewrites it.
    #[test]
    fn readme_table_matches_settings() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/clients.md");
        let readme = std::fs::read_to_string(&path).unwrap();
        let (start, end) = ("<!-- clients:begin -->\n", "<!-- clients:end -->");
        let a = readme
            .find(start)
            .expect("docs/src/clients.md has the clients table markers")
            + start.len();
        let b = readme.find(end).expect("end marker");
        let table = readme_table();
        if std::env::var_os("SLUICE_BLESS").is_some() {
            let new = format!("{}{table}{}", &readme[..a], &readme[b..]);
            std::fs::write(&path, new).unwrap();
            return;
        }
        assert_eq!(
            &readme[a..b],
            table,
            "docs/src/clients.md's client table drifted from clientenv::SETTINGS; rerun with SLUICE_BLESS=1"
        );
    }
}
