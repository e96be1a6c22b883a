//! `sluice report`: check the state folder and the task, then print the
//! table, the JSON, the allow line, a live feed or an HTML page.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{out, StateArgs};

/// What `sluice report` prints.
pub(super) struct ReportOutput {
    pub(crate) json: bool,
    pub(crate) allow_list: bool,
    pub(crate) since: Option<String>,
    pub(crate) rows: bool,
    pub(crate) follow: bool,
    pub(crate) html: Option<PathBuf>,
    pub(crate) taint: bool,
}

/// Prints the message and gives the exit code.
fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("sluice: {message}");
    ExitCode::from(code)
}

pub(super) fn report(state: &StateArgs, task: Option<&str>, o: ReportOutput) -> ExitCode {
    let dir = match state.dir() {
        Ok(d) => d,
        Err(e) => return fail(1, e),
    };
    if let Err(e) = crate::report::check_state(&dir, task) {
        return fail(e.exit_code(), e);
    }
    let since = match o
        .since
        .as_deref()
        .map(|s| crate::report::since(s, time::OffsetDateTime::now_utc()))
        .transpose()
    {
        Ok(s) => s,
        Err(e) => return fail(e.exit_code(), e),
    };
    let since = since.as_deref();
    eprintln!("sluice: report of {}", dir.display());
    if o.follow {
        let color = std::io::IsTerminal::is_terminal(&std::io::stdout());
        // Ends when the reader goes (`| head`): quietly, as `out` does.
        let _ = crate::report::follow::follow(&dir, task, since, color, &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    if let Some(file) = &o.html {
        return match crate::report::html_page(&dir, task, since)
            .and_then(|p| std::fs::write(file, p))
        {
            Ok(()) => {
                eprintln!("sluice: wrote {}", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => fail(1, format!("cannot write {}: {e}", file.display())),
        };
    }
    if o.rows {
        let mut rows = crate::report::rows(&dir, task, since);
        rows.sort_by(|a, b| a.ts.cmp(&b.ts));
        if o.json {
            return print_json(&rows);
        }
        for r in &rows {
            out(&format!("{}\n", crate::report::follow::line(r, false)));
        }
        return ExitCode::SUCCESS;
    }
    let rows = match crate::report::build_since(&dir, task, since) {
        Ok(r) => r,
        Err(e) => {
            return fail(
                1,
                format!("cannot read the access logs in {}: {e}", dir.display()),
            )
        }
    };
    if o.allow_list {
        return allow_lines(&dir, task, &rows);
    }
    let tasks: Vec<String> = match crate::report::task_dirs(&dir, task) {
        Ok(t) => t.into_iter().map(|(name, _)| name).collect(),
        Err(_) => Vec::new(),
    };
    if o.taint && o.json {
        let all: Vec<_> = tasks
            .iter()
            .map(|t| serde_json::json!({"task": t, "taint": crate::report::taint::taint_set(&dir, t)}))
            .collect();
        return print_json(&all);
    }
    if o.json {
        return print_json(&rows);
    }
    // What taint changes comes first, then the destinations.
    let raw = crate::report::rows(&dir, task, since);
    for t in &tasks {
        out(&crate::report::taint::leading(
            &dir, t, &rows, &raw, o.taint,
        ));
    }
    if !o.taint {
        out(&crate::report::table(&rows));
    }
    ExitCode::SUCCESS
}

/// `--json`: pretty JSON on stdout.
fn print_json(v: &impl serde::Serialize) -> ExitCode {
    match serde_json::to_string_pretty(v) {
        Ok(s) => {
            out(&format!("{s}\n"));
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, e),
    }
}

/// `--allow-list`: one line per task (named when there are several).
fn allow_lines(dir: &Path, task: Option<&str>, rows: &[crate::report::Destination]) -> ExitCode {
    let mut tasks: Vec<&str> = rows.iter().map(|r| r.task.as_str()).collect();
    tasks.dedup();
    if let Some(t) = task {
        tasks = vec![t];
    }
    if tasks.is_empty() {
        return fail(
            1,
            format!(
                "no task reached any destination in {}; no allow line to print",
                dir.display()
            ),
        );
    }
    for t in tasks {
        let line = crate::report::allow_list(rows, t);
        if line == "allow = []\n" {
            // Pasted, an empty list would lock the task out.
            return fail(
                1,
                format!(
                    "task {t:?} reached no destination in {}; no allow line to print",
                    dir.display()
                ),
            );
        }
        if task.is_none() {
            out(&format!("# task {t}\n"));
        }
        out(&line);
    }
    ExitCode::SUCCESS
}
