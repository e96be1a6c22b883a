//! The module layering of ARCHITECTURE.md, checked: a module of `proxy/`
//! names (`crate::x`) only modules of its own layer or below. Reads the
//! source text; fails naming the file and the import that goes up.

use std::collections::BTreeSet;
use std::path::Path;

/// ARCHITECTURE.md's layers, top to bottom.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "commands",
        &[
            "main",
            "cli",
            "report",
            "guest_relay",
            "clientenv",
            "exec",
            "command_error",
        ],
    ),
    ("wiring", &["server", "admin", "reload"]),
    ("connections", &["accept", "conn"]),
    ("exchanges", &["intercept", "forward"]),
    ("pipeline", &["exchange"]),
    ("state", &["state", "ask"]),
    ("I/O", &["upstream", "tunnel", "splice", "tls", "listener"]),
    ("taint", &["taint", "secrets"]),
    ("records", &["log", "metrics", "respond", "dns", "console"]),
    ("model", &["policy", "config", "shell"]),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The modules a file names as `crate::x`, outside comments and test code.
fn imports(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + 7..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
        // `use crate::{a, b}` forms.
        if let Some(i) = line.find("crate::{") {
            for part in line[i + 8..].split([',', '}']) {
                let name = part.trim().split("::").next().unwrap_or("").to_string();
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    out.insert(name);
                }
            }
        }
    }
    out
}

#[test]
fn no_module_names_a_higher_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("proxy");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut problems = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap();
        let module = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" {
            continue;
        }
        let Some(mine) = layer_of(&module) else {
            problems.push(format!(
                "{}: module {module} is in no layer of ARCHITECTURE.md",
                rel.display()
            ));
            continue;
        };
        for name in imports(&std::fs::read_to_string(f).unwrap()) {
            match layer_of(&name) {
                Some(theirs) if theirs < mine => problems.push(format!(
                    "{}: {module} ({}) names crate::{name} ({}), a higher layer",
                    rel.display(),
                    LAYERS[mine].0,
                    LAYERS[theirs].0
                )),
                _ => {}
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import() {
    // The checker itself can fail: policy naming conn is caught.
    let names =
        imports("use crate::conn::serve;\nuse crate::{state, log::Kind};\n// crate::server\n");
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["conn", "log", "state"]
    );
    assert!(layer_of("conn") < layer_of("policy"));
}
